package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/config"
)

// TestProxyAuthToken (docs/operating.md "A fleet"): with proxy.auth =
// "token" the proxy, reachable through a load balancer under any Host,
// answers 401 to a request without the daemon's token or with a wrong
// one, forwards one with it, and never forwards the token header to the
// provider.
func TestProxyAuthToken(t *testing.T) {
	cfg := testConfig()
	f := newFixture(t, cfg)
	const token = "fleet-token-0123456789abcdef"
	pc := f.cfg.Proxy
	pc.Auth = config.ProxyAuthToken
	p, err := New(Options{Engine: f.eng, Secret: testSecret, Config: pc, Logger: f.logger, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{Engine: f.eng, Secret: testSecret, Config: pc, Logger: f.logger}); err == nil || !strings.Contains(err.Error(), "daemon.auth_token_env") {
		t.Fatalf("a token proxy without the token: %v", err)
	}
	_ = f.hs.Close()
	f.p = p
	f.serve()
	body := newConversation().user("hello").body()
	for _, hdr := range []map[string]string{{}, {TokenHeader: "wrong-token-0123456789abcdef"}} {
		resp, b := postHost(t, f, "ctxd.example.internal", body, hdr)
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(b), TokenHeader) {
			t.Fatalf("%v: %d %s, want 401 naming %s", hdr, resp.StatusCode, b, TokenHeader)
		}
	}
	if n := len(f.up.requests()); n != 0 {
		t.Fatalf("%d requests reached the provider without the token", n)
	}
	resp, b := postHost(t, f, "ctxd.example.internal", body, map[string]string{TokenHeader: token})
	if resp.StatusCode != 200 {
		t.Fatalf("with the token: %d %s", resp.StatusCode, b)
	}
	reqs := f.up.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests reached the provider, want 1", len(reqs))
	}
	if v := reqs[0].header.Get(TokenHeader); v != "" {
		t.Fatalf("the provider received %s: %q", TokenHeader, v)
	}
}

// TestProxyAuthLoopbackRefusesOtherHosts: the default (proxy.auth =
// "loopback") still refuses a Host that is not a loopback name.
func TestProxyAuthLoopbackRefusesOtherHosts(t *testing.T) {
	f := newFixture(t, testConfig())
	resp, b := postHost(t, f, "ctxd.example.internal", newConversation().user("hello").body(), nil)
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("%d %s, want 403", resp.StatusCode, b)
	}
}

// postHost is fixture.post with the Host a load balancer would send.
func postHost(t *testing.T, f *fixture, host, body string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", f.url+"/v1/messages?beta=true", strings.NewReader(body))
	req.Host = host
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", testKey)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return resp, b
}
