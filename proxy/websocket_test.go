package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/server"
)

// TestWebSocketUpgradeDeclined: Codex's WebSocket handshake on GET
// /v1/responses is declined at once with 426 (the status on which Codex
// falls back to HTTP without retrying the upgrade), an OpenAI-shaped error
// and a Ctxd-Diagnostic saying to use HTTP; the connection is closed;
// nothing reaches the upstream; status and the metrics count it; and the
// conversation then sent over HTTP is managed.
func TestWebSocketUpgradeDeclined(t *testing.T) {
	f := newOpenAIFixture(t, openAIConfig(nil))
	head := "GET /v1/responses HTTP/1.1\r\nHost: HOST\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" +
		"Authorization: Bearer " + testKey + "\r\nOpenAI-Beta: responses_websockets=2026-02-06\r\nSession-Id: 0199-codex-thread\r\n\r\n"
	start := time.Now()
	resp, body := rawRequest(t, f, head, "", 5*time.Second)
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the decline took %s", took)
	}
	if resp.StatusCode != http.StatusUpgradeRequired {
		t.Fatalf("status %d, want 426: %s", resp.StatusCode, body)
	}
	if !resp.Close {
		t.Error("the connection is kept open after the decline")
	}
	var e struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, "HTTP") {
		t.Errorf("body is not an OpenAI error naming HTTP: %s", body)
	}
	if d := resp.Header.Get(HeaderDiagnostic); !strings.Contains(d, "declined") {
		t.Errorf("diagnostic %q", d)
	}
	if strings.Contains(f.logs.String(), testKey) || !strings.Contains(f.logs.String(), "protocol upgrade declined") {
		t.Errorf("the log does not say the upgrade was declined, or holds the key:\n%s", f.logs.String())
	}
	if n := len(f.up.requests()); n != 0 {
		t.Fatalf("%d requests reached the upstream", n)
	}
	if s := f.p.Stats(); s.DeclinedUpgrades != 1 || s.PassedThrough != 0 {
		t.Errorf("stats %+v: want 1 declined upgrade, nothing passed through", s)
	}
	if got := gathered(t, f, server.MetricProxyRequests, map[string]string{"api": "other", "outcome": outcomeUpgradeDeclined}); got != 1 {
		t.Errorf("requests metric, outcome upgrade_declined: %v", got)
	}
	// The fallback: the same conversation over HTTP is managed.
	f.up.script(reply{stream: true, body: responsesSSE([]string{`{"type":"message","role":"assistant","id":"msg_1","content":[{"type":"output_text","text":"ok","annotations":[]}]}`}, 100, 0, 5)})
	r2, _ := f.postOpenAI("/v1/responses", newCodexConversation().body(""), map[string]string{"Session-Id": "0199-codex-thread"})
	if r2.StatusCode != 200 || r2.Header.Get(HeaderSessionID) == "" {
		t.Fatalf("the HTTP fallback is not managed: %d, diagnostic %q", r2.StatusCode, r2.Header.Get(HeaderDiagnostic))
	}
}

// TestUpgradeDeclinedAnthropicShape: an upgrade on an Anthropic path is
// declined the same way, in the Anthropic error shape.
func TestUpgradeDeclinedAnthropicShape(t *testing.T) {
	f := newFixture(t, testConfig())
	req, _ := http.NewRequest("GET", f.url+"/v1/messages", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("X-Api-Key", testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUpgradeRequired || !strings.Contains(string(b), `"type":"error"`) {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if f.p.Stats().DeclinedUpgrades != 1 || len(f.up.requests()) != 0 {
		t.Errorf("stats %+v, %d upstream requests", f.p.Stats(), len(f.up.requests()))
	}
}
