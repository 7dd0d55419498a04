package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/api"
)

// ctxctl status and doctor show every upstream the daemon reports with its
// base URL and endpoints; a daemon that reports only
// the Anthropic one still shows it.
func TestStatusShowsEveryUpstream(t *testing.T) {
	p := &api.ProxyStatus{Enabled: true, Listen: "127.0.0.1:7420", Upstream: "https://api.anthropic.com", Upstreams: []api.ProxyUpstream{
		{Name: "anthropic", BaseURL: "https://api.anthropic.com", Endpoints: []string{"/v1/messages"}},
		{Name: "openai", BaseURL: "http://127.0.0.1:8000", Endpoints: []string{"/v1/responses", "/v1/chat/completions"}},
	}}
	want := "http://127.0.0.1:7420 → anthropic https://api.anthropic.com (/v1/messages); openai http://127.0.0.1:8000 (/v1/responses, /v1/chat/completions) ("
	if got := proxyLine(p); !strings.HasPrefix(got, want) {
		t.Errorf("status line %q", got)
	}
	var b bytes.Buffer
	writeDoctor(&b, &doctorReport{Daemon: doctorDaemon{Reachable: true, Socket: "s", Status: &api.Status{Proxy: p}}})
	if !strings.Contains(b.String(), "proxy: "+want) {
		t.Errorf("doctor:\n%s", b.String())
	}
	old := *p
	old.Upstreams = nil
	if got := proxyLine(&old); !strings.HasPrefix(got, "http://127.0.0.1:7420 → https://api.anthropic.com (") {
		t.Errorf("older daemon: %q", got)
	}
}
