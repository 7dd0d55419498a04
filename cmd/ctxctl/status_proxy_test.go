package main

import (
	"strings"
	"testing"

	"github.com/ctxd/ctxd/api"
)

// `ctxctl status` shows the proxy's client rule breaks beside its other
// counts, and only when there are some.
func TestProxyLineShowsClientRuleBreaks(t *testing.T) {
	p := &api.ProxyStatus{Enabled: true, Listen: "127.0.0.1:7420", Upstream: "https://api.anthropic.com", Requests: 5, Managed: 4}
	if got := proxyLine(p); strings.Contains(got, "client requests broke") {
		t.Errorf("no breaks, yet: %s", got)
	}
	p.ClientRuleBreaks = 2
	if got := proxyLine(p); !strings.Contains(got, "(5 requests, 4 managed,") || !strings.Contains(got, "; 2 client requests broke docs/design.md §4a themselves") {
		t.Errorf("proxy line %q", got)
	}
}

// `ctxctl status` shows what each client credential keeps stored, by its
// hash.
func TestProxyLineShowsCredentialUsage(t *testing.T) {
	p := &api.ProxyStatus{Enabled: true, Listen: "127.0.0.1:7420", Upstream: "https://api.anthropic.com",
		Credentials: []api.ProxyCredential{{Credential: "0123456789ab", Sessions: 3, Bytes: 4096}}}
	if got := proxyLine(p); !strings.Contains(got, "credential 0123456789ab: 3 sessions, 4096 bytes") {
		t.Errorf("proxy line %q", got)
	}
}

// `ctxctl status` says which mode the proxy runs in, and counts in the
// number of their noun ("1 session", not "1 sessions").
func TestProxyLineShowsModeAndPlurals(t *testing.T) {
	p := &api.ProxyStatus{Enabled: true, Listen: "127.0.0.1:7420", Upstream: "https://api.anthropic.com", Mode: "enforce", Requests: 1, Conversations: 1, Branches: 1, MaxBranches: 1,
		Credentials: []api.ProxyCredential{{Credential: "0123456789ab", Sessions: 1, Bytes: 1}}}
	got := proxyLine(p)
	for _, want := range []string{"http://127.0.0.1:7420, mode enforce → ", "(1 request, ", "1 conversation started, 1 branch, at most 1 session in one conversation", "credential 0123456789ab: 1 session, 1 byte"} {
		if !strings.Contains(got, want) {
			t.Errorf("proxy line lacks %q:\n%s", want, got)
		}
	}
	p.Mode = "observe"
	if got := proxyLine(p); !strings.Contains(got, ", mode observe (every request forwarded as the client sent it") {
		t.Errorf("observe mode not shown: %s", got)
	}
}
