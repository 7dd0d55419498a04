package server

// A session the provider proxy created (p-…) used to take appends and PATCHes
// of its system prompt through the daemon API (200); the injected message then
// went upstream inside the client's next turn, and the stored system prompt
// disagreed with the one sent. Each test failed before the fix
// (docs/decisions.md "A proxied session is its client's").

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/artifacts"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/strict"
	"github.com/ctxd/ctxd/proxy"
)

// fakeAnthropic is an Anthropic Messages upstream that records every
// request body and answers each, not streamed, with "answer <n>". Like the
// provider, it refuses (400, and fails the test) a request that breaks
// the rules of docs/design.md §4a (internal/strict).
type fakeAnthropic struct {
	srv    *httptest.Server
	mu     sync.Mutex
	bodies [][]byte
}

func newFakeAnthropic(t *testing.T) *fakeAnthropic {
	u := &fakeAnthropic{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.bodies = append(u.bodies, b)
		n := len(u.bodies)
		u.mu.Unlock()
		if vs, err := strict.Anthropic(b, history.ThinkingOff, false); err != nil || vs.Err() != nil {
			t.Errorf("the upstream refused request %d: %v %v: %s", n, err, vs.Err(), b)
			http.Error(w, `{"type":"error","error":{"type":"invalid_request_error","message":"refused"}}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		answer, _ := json.Marshal(map[string]any{
			"id": "msg_x", "type": "message", "role": "assistant", "model": "claude-opus-4-8",
			"content":     []any{map[string]any{"type": "text", "text": "answer " + strconv.Itoa(n)}},
			"stop_reason": "end_turn", "stop_sequence": nil,
			"usage": map[string]any{"input_tokens": 40, "output_tokens": 3},
		})
		_, _ = w.Write(answer)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *fakeAnthropic) requests() [][]byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([][]byte(nil), u.bodies...)
}

// startProxy serves a provider proxy over the fixture's engine on a
// loopback port, forwarding to upstream; it returns the proxy's base URL.
func startProxy(t *testing.T, eng *engine.Engine, upstream string) string {
	t.Helper()
	cfg := config.Defaults()
	cfg.Proxy.Upstreams.Anthropic.BaseURL = upstream
	p, err := proxy.New(proxy.Options{Engine: eng, Secret: []byte(strings.Repeat("s", artifacts.SecretSize)),
		Config: cfg.Proxy, Logger: quietLogger(), Metrics: NewProxyMetrics(prometheus.NewRegistry())})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(p.Handler())
	ts.Config.ConnContext = p.ConnContext
	ts.Start()
	t.Cleanup(ts.Close)
	return ts.URL
}

// proxyTurn sends one Messages request through the proxy, as an agent
// would (its whole history in messages), and returns the ctxd session
// that recorded it.
func proxyTurn(t *testing.T, base, messages string) string {
	t.Helper()
	body := `{"model":"claude-opus-4-8","max_tokens":1024,"system":"You are a coding agent.","tools":[{"name":"Read","description":"read a file","input_schema":{"type":"object"}}],"messages":` + messages + `}`
	req, _ := http.NewRequest("POST", base+"/v1/messages", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", "sk-ant-test-0123456789")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	req.Header.Set(proxy.HeaderSession, "agent-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("proxied turn: %d %s", resp.StatusCode, b)
	}
	if d := resp.Header.Get("Ctxd-Diagnostic"); d != "" {
		t.Fatalf("proxied turn not managed: %s", d)
	}
	id := resp.Header.Get(proxy.HeaderSessionID)
	if !strings.HasPrefix(id, "p-") {
		t.Fatalf("proxied turn: session %q, want a p- session", id)
	}
	return id
}

// waitMessages waits until session id holds n messages: the proxy records
// the answer once it has passed it on, which may be after the client read
// its last byte.
func waitMessages(t *testing.T, f *fixture, id string, n uint64) *api.Session {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := f.client.GetSession(context.Background(), id)
		if err == nil && s.Messages >= n {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %s: %v messages after 10 s, want %d (err %v)", id, s, n, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestProxySessionRefusesAPIWrites: after one proxied turn, an append and
// a PATCH of system, tools, pinned or model through the daemon API are 409
// conflict naming the reason, nothing stored; the client's next turn goes
// upstream exactly as the client sent it; reads, context_limit, runs and
// compaction still work.
func TestProxySessionRefusesAPIWrites(t *testing.T) {
	f := newFixture(t, nil)
	up := newFakeAnthropic(t)
	base := startProxy(t, f.eng, up.srv.URL)
	ctx := context.Background()

	first := `[{"role":"user","content":"hello"}]`
	id := proxyTurn(t, base, first)
	before := waitMessages(t, f, id, 2)
	if before.Labels[engine.LabelProxy] != "anthropic" {
		t.Fatalf("labels %v: the proxy's session is not labelled %s=anthropic", before.Labels, engine.LabelProxy)
	}

	path := "/v1/sessions/" + id
	ae := f.wantRefused(t, "POST", path+"/messages", `{"messages":[{"role":"user","content":[{"type":"text","text":"INJECTED by the API"}]}]}`, nil,
		http.StatusConflict, api.Conflict, "", []string{"owned by the proxy", "nothing was stored", id}, id, before.LastSeq)
	if !strings.Contains(ae.Message, "client's next message") {
		t.Errorf("append refusal %q does not say why", ae.Message)
	}
	for _, c := range []struct{ field, body string }{
		{"system", `{"system":"You are a pirate."}`},
		{"tools", `{"tools":[]}`},
		{"pinned", `{"pinned":[{"type":"text","text":"INJECTED pinned"}]}`},
		{"model", `{"model":"claude-sonnet-4-5"}`},
		// One refused field refuses the whole PATCH: the allowed
		// context_limit beside it is not applied either.
		{"system", `{"system":"You are a pirate.","context_limit":50000}`},
	} {
		t.Run("patch "+c.field, func(t *testing.T) {
			f.wantRefused(t, "PATCH", path, c.body, nil, http.StatusConflict, api.Conflict, c.field, []string{"owned by the proxy", "nothing was stored"}, id, before.LastSeq)
		})
	}
	after, err := f.client.GetSession(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if after.SystemDigest != before.SystemDigest || after.ToolsDigest != before.ToolsDigest || after.Model != before.Model ||
		after.ContextLimit != before.ContextLimit || after.Messages != before.Messages || after.LastSeq != before.LastSeq {
		t.Errorf("refused writes changed the session:\nbefore %+v\nafter  %+v", before, after)
	}

	// The client's next turn goes upstream as the client sent it: no
	// injected message, no pinned context, its own system prompt.
	proxyTurn(t, base, `[{"role":"user","content":"hello"},{"role":"assistant","content":[{"type":"text","text":"answer 1"}]},{"role":"user","content":"next"}]`)
	waitMessages(t, f, id, 4)
	reqs := up.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d upstream requests, want 2", len(reqs))
	}
	var sent struct {
		System   string `json:"system"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(reqs[1], &sent); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(reqs[1]), "INJECTED") || len(sent.Messages) != 3 || sent.System != "You are a coding agent." {
		t.Errorf("the next turn went upstream changed (%d messages, system %q): %s", len(sent.Messages), sent.System, reqs[1])
	}
	for i, want := range []string{"user", "assistant", "user"} {
		if i < len(sent.Messages) && sent.Messages[i].Role != want {
			t.Errorf("messages[%d].role %q, want %q: %s", i, sent.Messages[i].Role, want, reqs[1])
		}
	}

	// What stays the operator's: reads, the window, runs, compaction.
	for _, c := range []struct{ method, path, body string }{
		{"GET", path, ""},
		{"GET", path + "/context?format=anthropic&presend=false", ""},
		{"GET", path + "/checkpoints", ""},
		{"PATCH", path, `{"context_limit":150000}`},
		{"POST", path + "/runs", `{}`},
		{"POST", path + "/compact", `{"reason":"manual","wait":true}`},
	} {
		if status, _, raw, _ := f.do(t, c.method, c.path, c.body, nil); status != http.StatusOK {
			t.Errorf("%s %s: %d %s, want 200", c.method, c.path, status, raw)
		}
	}
	if s, err := f.client.GetSession(ctx, id); err != nil || s.ContextLimit != 150000 {
		t.Errorf("context_limit after its PATCH: %+v %v, want 150000", s, err)
	}
}

// TestDaemonSessionTakesWritesAndLabelProxyIsReserved: a session of the
// daemon API still takes appends and PATCHes; creating one labelled as the
// proxy's is refused on labels.proxy, nothing stored; and a write to a
// missing session is still 404.
func TestDaemonSessionTakesWritesAndLabelProxyIsReserved(t *testing.T) {
	f := newFixture(t, nil)
	f.create(t, "s1")
	if status, _, raw, _ := f.do(t, "POST", "/v1/sessions/s1/messages", `{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`, nil); status != http.StatusOK {
		t.Errorf("append to a daemon API session: %d %s", status, raw)
	}
	if status, _, raw, _ := f.do(t, "PATCH", "/v1/sessions/s1", `{"system":"You are terse.","model":"claude-sonnet-4-5"}`, nil); status != http.StatusOK {
		t.Errorf("PATCH of a daemon API session: %d %s", status, raw)
	}
	f.refusedUnchanged(t, "POST", "/v1/sessions", `{"id":"fake-proxy","model":"claude-sonnet-4-5","labels":{"proxy":"anthropic"}}`, nil, http.StatusBadRequest, api.Invalid, "labels.proxy")
	if _, err := f.client.GetSession(context.Background(), "fake-proxy"); api.ErrorCode(err) != api.NotFound {
		t.Errorf("a refused create left session fake-proxy: %v", err)
	}
	// A proxy id (a conversation's or its next branch's) cannot be taken
	// by the daemon API: the proxy would adopt it as the client's history.
	for _, id := range []string{"p-82b49561d547f1c1cddbc934", "p-078a2fbfe0e349ac48ffeb1f-b2"} {
		f.refusedUnchanged(t, "POST", "/v1/sessions", `{"id":"`+id+`","model":"claude-sonnet-4-5"}`, nil, http.StatusBadRequest, api.Invalid, "id")
		if _, err := f.client.GetSession(context.Background(), id); api.ErrorCode(err) != api.NotFound {
			t.Errorf("a refused create left session %s: %v", id, err)
		}
	}
	if status, ae, raw, _ := f.do(t, "POST", "/v1/sessions/none/messages", `{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`, nil); status != http.StatusNotFound || ae.Code != api.NotFound {
		t.Errorf("append to a missing session: %d %s, want 404", status, raw)
	}
	if status, _, raw, _ := f.do(t, "PATCH", "/v1/sessions/none", `{"system":"x"}`, nil); status != http.StatusNotFound {
		t.Errorf("PATCH of a missing session: %d %s, want 404", status, raw)
	}
}
