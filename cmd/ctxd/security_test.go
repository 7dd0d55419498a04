package main

// Security against the real daemon (docs/design.md §8b): a session overlay
// cannot send the daemon's keys or files anywhere, and no secret reaches a
// log line, an event, an API error or /metrics when a provider echoes it.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxd/ctxd/api"
)

// The secrets of a run: a key-shaped Anthropic key, an OpenAI-compatible
// key with no recognisable shape (only the configured-secret rule can
// catch it), and the TCP bearer token.
const (
	testAnthropicKey = "sk-ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe-TESTKEY-aaaaaaaaaaaaaaaa"
	testOpenAIKey    = "plain-local-server-secret-8f3a2c"
	testTCPToken     = "tcp-bearer-token-0123456789abcdef"
)

// echoProvider answers every request with an error that repeats the key
// it was sent (as some providers and proxies do), and, for the OpenAI
// path, the TCP token too.
func echoProvider(t *testing.T) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Header.Get("x-api-key") != "":
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key: %s"}}`, r.Header.Get("x-api-key"))
		default:
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: %s (you sent %s; also seen: %s)","type":"invalid_request_error"}}`,
				strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), r.Header.Get("Authorization"), testTCPToken)
		}
	}))
	t.Cleanup(ts.Close)
	return ts, &n
}

// TestSecretsNeverLogged (docs/decisions.md "Secrets never logged"): a provider
// that echoes the key in its error; every log level, the events, the API
// errors, the session's last_error and /metrics are searched for the keys and
// token.
func TestSecretsNeverLogged(t *testing.T) {
	prov, calls := echoProvider(t)
	// fallback = "none": the compaction fails, so the provider's words
	// reach the API error, the events and last_error.
	cfg := baseConfig + fmt.Sprintf(`
[context_compaction]
keep_recent_tokens = 0
[compaction]
fallback = "none"
[daemon]
auth_token_env = "CTXD_TEST_TOKEN"
[[summarizer.bindings]]
name = "claude"
provider = "anthropic"
model = "claude-haiku-4-5"
base_url = %q
api_key_env = "CTXD_TEST_ANTHROPIC_KEY"
[[summarizer.bindings]]
name = "local"
provider = "openai"
model = "local-model"
base_url = %q
api_key_env = "CTXD_TEST_OPENAI_KEY"
`, prov.URL, prov.URL)
	e := newEnv(t, cfg)
	e.extraEnv = []string{"CTXD_TEST_TOKEN=" + testTCPToken, "CTXD_TEST_ANTHROPIC_KEY=" + testAnthropicKey, "CTXD_TEST_OPENAI_KEY=" + testOpenAIKey}
	p := e.startWith(t, "--listen", "127.0.0.1:0")
	c := e.client()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	if _, err := c.CreateSession(ctx, api.CreateSessionRequest{ID: "s", Model: "gpt-4o"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AppendMessages(ctx, "s", api.AppendMessagesRequest{Messages: []api.Message{userText("hello"), assistantText("hi", nil),
		userText("list the files"), assistantText("main.go and go.mod", nil), userText("thanks")}}); err != nil {
		t.Fatal(err)
	}
	var texts []string
	res, err := c.Compact(ctx, "s", api.CompactRequest{Wait: true})
	if api.ErrorCode(err) != api.Upstream {
		t.Fatalf("compaction with failing bindings: %v %+v", err, res)
	}
	texts = append(texts, "api error: "+err.Error())
	if calls.Load() < 2 {
		t.Fatalf("the provider was called %d times, want both bindings", calls.Load())
	}
	// The redacted provider text did reach the client: the test greps
	// something real.
	if !strings.Contains(err.Error(), "invalid x-api-key: [REDACTED]") || !strings.Contains(err.Error(), "Incorrect API key provided: [REDACTED]") {
		t.Errorf("the API error lost the provider's message: %v", err)
	}
	info, err := c.GetSession(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(info)
	texts = append(texts, "session: "+string(b))
	if err := c.StreamEvents(ctx, "s", api.EventsOptions{}, func(ev api.Event) error {
		b, _ := json.Marshal(ev)
		texts = append(texts, "event: "+string(b))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	m, err := c.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	texts = append(texts, "metrics: "+string(m))
	// A wrong token on TCP is refused and its value not logged either.
	addr := listenAddr(t, p)
	if _, err := (&api.Client{BaseURL: "http://" + addr, Token: testAnthropicKey}).Status(ctx); api.ErrorCode(err) != api.Unauthorized {
		t.Fatalf("TCP with a wrong token: %v", err)
	}
	if code := p.signalAndWait(t, os.Interrupt); code != 0 {
		t.Fatalf("exit %d", code)
	}
	texts = append(texts, "log: "+p.stderr.String())
	if !strings.Contains(p.stderr.String(), "level=DEBUG") || !strings.Contains(p.stderr.String(), "level=WARN") {
		t.Fatalf("the log does not hold every level:\n%s", p.stderr.String())
	}
	for _, txt := range texts {
		for _, secret := range []string{testAnthropicKey, testOpenAIKey, testTCPToken, "Zx9Yw8Vu7Ts6"} {
			if strings.Contains(txt, secret) {
				t.Errorf("%q leaked into %.300s", secret, txt)
			}
		}
	}
}

// listenAddr is the TCP address in the daemon's "ctxd started" line.
func listenAddr(t *testing.T, p *proc) string {
	t.Helper()
	p.waitLog(t, "ctxd started")
	_, rest, _ := strings.Cut(p.stderr.String(), "listen=")
	addr, _, _ := strings.Cut(rest, " ")
	return addr
}

// TestOverlayCannotExfiltrate (docs/decisions.md "Session overlays carry
// policy, never capabilities"): over the daemon's API, a
// session overlay defining a binding that points at a listener with the
// daemon's key variable, an agent_file naming a private file, or an
// offload.dir of the caller's choosing is a 400 naming the key, stores
// nothing and sends nothing; choosing a binding by name works.
func TestOverlayCannotExfiltrate(t *testing.T) {
	var mu sync.Mutex
	var got []string
	listener := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.Header.Get("x-api-key")+" "+string(b))
		mu.Unlock()
		w.WriteHeader(500)
	}))
	defer listener.Close()
	e := newEnv(t, baseConfig+`
[[summarizer.bindings]]
name = "primary"
provider = "anthropic"
model = "claude-haiku-4-5"
base_url = "http://127.0.0.1:9"
api_key_env = "CTXD_TEST_ANTHROPIC_KEY"
[[summarizer.bindings]]
name = "offline"
provider = "extractive"
`)
	e.extraEnv = []string{"CTXD_TEST_ANTHROPIC_KEY=" + testAnthropicKey}
	private := filepath.Join(e.dir, "private.md")
	if err := os.WriteFile(private, []byte("root-only secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	elsewhere := filepath.Join(e.dir, "elsewhere")
	e.start(t)
	c := e.client()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cases := []struct{ name, overlay, field, msg string }{
		{"a binding to the caller's listener with the daemon's key",
			fmt.Sprintf("[context_compaction]\nauto = true\n[[summarizer.bindings]]\nname = \"x\"\nprovider = \"anthropic\"\nmodel = \"m\"\nbase_url = %q\napi_key_env = \"CTXD_TEST_ANTHROPIC_KEY\"\n", listener.URL),
			"summarizer.bindings", "config: session overlay:3:1: summarizer.bindings: not allowed in a session overlay"},
		{"a private file as the prompt", fmt.Sprintf("[compaction]\nagent_file = %q\n", private),
			"compaction.agent_file", "config: session overlay:2:1: compaction.agent_file: not allowed in a session overlay"},
		{"offloads written elsewhere", fmt.Sprintf("[offload]\nmax_chars = 100\nkeep_head = 10\nkeep_tail = 10\ndir = %q\n", elsewhere),
			"offload.dir", "config: session overlay:5:1: offload.dir: not allowed in a session overlay"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.CreateSession(ctx, api.CreateSessionRequest{ID: "evil", Model: "gpt-4o", Config: tc.overlay})
			ae, _ := err.(*api.Error)
			if api.ErrorCode(err) != api.Invalid || ae == nil || ae.Field != tc.field || ae.Message != tc.msg {
				t.Fatalf("got %v (%+v), want 400 field %q %q", err, ae, tc.field, tc.msg)
			}
			if _, err := c.GetSession(ctx, "evil"); api.ErrorCode(err) != api.NotFound {
				t.Fatalf("a refused session was stored: %v", err)
			}
		})
	}
	// Policy and a binding chosen by name: the session compacts with the
	// extractive binding and never calls the network one.
	if _, err := c.CreateSession(ctx, api.CreateSessionRequest{ID: "ok", Model: "gpt-4o",
		Config: "[context_compaction]\nkeep_recent_tokens = 0\n[compaction]\nbinding = \"offline\"\n[offload]\nmax_chars = 100\nkeep_head = 10\nkeep_tail = 10\n"}); err != nil {
		t.Fatal(err)
	}
	call := api.Message{Role: api.RoleAssistant, Content: []api.Block{{Type: api.BlockToolCall, ID: "c1", Name: "bash", Input: json.RawMessage(`{}`)}}}
	result := api.Message{Role: api.RoleTool, ToolCallID: "c1", ToolName: "bash", Content: []api.Block{{Type: api.BlockText, Text: strings.Repeat("output line\n", 50)}}}
	if _, err := c.AppendMessages(ctx, "ok", api.AppendMessagesRequest{Messages: []api.Message{userText("go"), call, result, assistantText("done", nil)}}); err != nil {
		t.Fatal(err)
	}
	res, err := c.Compact(ctx, "ok", api.CompactRequest{Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Checkpoint == nil || res.Checkpoint.Binding != "offline" {
		t.Fatalf("compaction: %+v", res)
	}
	if _, err := os.Stat(elsewhere); !os.IsNotExist(err) {
		t.Errorf("the caller's directory was created: %v", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(e.dataDir, "offload")); len(entries) == 0 {
		t.Error("the tool result was not offloaded into the daemon's own directory")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) > 0 {
		t.Fatalf("the caller's listener received %q", got)
	}
}
