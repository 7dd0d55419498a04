package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/artifacts"
	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/store"
	"github.com/ctxd/ctxd/summarizer"
	"github.com/ctxd/ctxd/trigger"
	"github.com/ctxd/ctxd/workers"
)

// fixture is a Server over an in-memory engine, served over TCP loopback
// by httptest with the Server's ConnContext.
type fixture struct {
	srv    *Server
	eng    *engine.Engine
	arts   artifacts.Backend
	ts     *httptest.Server
	client *api.Client
	// token is sent by do unless hdr sets Authorization.
	token string
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func newFixture(t testing.TB, mod func(*Options)) *fixture {
	t.Helper()
	var (
		log    checkpoint.Log
		arts   artifacts.Backend
		closer []func()
		shared bool
	)
	if testBackend == "nats" {
		log, arts, closer = openNATS(t)
		shared = true
	} else {
		db, err := store.OpenInMemory()
		if err != nil {
			t.Fatal(err)
		}
		ba, err := artifacts.Open(db, bytes.Repeat([]byte{7}, artifacts.SecretSize))
		if err != nil {
			t.Fatal(err)
		}
		bl := checkpoint.Open(db, checkpoint.Options{})
		log, arts = bl, ba
		closer = []func(){func() { _ = bl.Close() }, func() { _ = ba.Close() }, func() { _ = db.Close() }}
	}
	pool, err := workers.New(workers.Options{Size: 2, Queue: 8, DrainTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = pool.Run(ctx) })
	reg := prometheus.NewRegistry()
	metrics := NewMetrics(reg)
	cfg := config.Defaults()
	cfg.Storage.DataDir = t.TempDir()
	eng, err := engine.New(engine.Options{
		Config: cfg, Log: log, Artifacts: arts, Pool: pool, Metrics: metrics, Shared: shared,
		Summarizer: summarizer.New(summarizer.Options{Logger: quietLogger()}),
		Logger:     quietLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{
		Engine: eng, Artifacts: arts, Logger: quietLogger(), Registry: reg, Metrics: metrics,
		Pool:      PoolInfo{Stats: pool.Stats, Size: 2, Capacity: 8},
		Heartbeat: 20 * time.Millisecond,
		// The fixture serves over TCP, which always needs the token.
		AuthToken: fixtureToken,
	}
	if mod != nil {
		mod(&opts)
	}
	srv := New(opts)
	ts := httptest.NewUnstartedServer(srv.Handler())
	ts.Config.ConnContext = srv.ConnContext
	// As the daemon serves it (cmd/ctxd).
	ts.Config.MaxHeaderBytes = int(srv.headerMax)
	ts.Config.RegisterOnShutdown(srv.BeginShutdown)
	ts.Start()
	t.Cleanup(func() {
		srv.BeginShutdown()
		ts.Close()
		cancel()
		wg.Wait()
		for _, f := range closer {
			f()
		}
	})
	return &fixture{srv: srv, eng: eng, arts: arts, ts: ts, token: opts.AuthToken, client: &api.Client{BaseURL: ts.URL, Token: opts.AuthToken}}
}

// fixtureToken is the fixture's default bearer token.
const fixtureToken = "fixture-token"

// do sends a raw request and returns status, decoded error (if any) and
// body.
func (f *fixture) do(t *testing.T, method, path, body string, hdr map[string]string) (int, *api.Error, []byte, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, f.ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", api.ContentTypeJSON)
	}
	if _, set := hdr["Authorization"]; !set && f.token != "" {
		req.Header.Set("Authorization", "Bearer "+f.token)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := f.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.Header.Get(api.HeaderVersion) != api.Version {
		t.Errorf("%s %s: %s header = %q, want %q", method, path, api.HeaderVersion, resp.Header.Get(api.HeaderVersion), api.Version)
	}
	var env api.ErrorEnvelope
	if resp.StatusCode >= 400 {
		if err := json.Unmarshal(b, &env); err != nil || env.Error == nil {
			t.Fatalf("%s %s: %d with a body that is not the envelope: %s", method, path, resp.StatusCode, b)
		}
	}
	return resp.StatusCode, env.Error, b, resp.Header
}

func (f *fixture) create(t testing.TB, id string) {
	t.Helper()
	if _, err := f.client.CreateSession(context.Background(), api.CreateSessionRequest{ID: id, Model: "claude-sonnet-4-5"}); err != nil {
		t.Fatal(err)
	}
}

// wantRefused sends a request and fails t unless it is refused with
// status and the API error code, naming field (and, when field is set,
// saying it in the message, with each of words too), and unless session
// id's last_seq is still before: a refused request stores nothing. It
// returns the error for further checks.
func (f *fixture) wantRefused(t *testing.T, method, path, body string, hdr map[string]string, status int, code, field string, words []string, id string, before uint64) *api.Error {
	t.Helper()
	got, ae, raw, _ := f.do(t, method, path, body, hdr)
	if got != status || ae == nil || ae.Code != code {
		t.Fatalf("got %d %s, want %d %s", got, raw, status, code)
	}
	if ae.Field != field {
		t.Errorf("field %q, want %q (%s)", ae.Field, field, ae.Message)
	}
	for _, w := range words {
		if !strings.Contains(ae.Message, w) {
			t.Errorf("message %q lacks %q", ae.Message, w)
		}
	}
	if field != "" && !strings.Contains(ae.Message, field) {
		t.Errorf("message %q does not name the field %q", ae.Message, field)
	}
	if seq := f.lastSeq(t, id); seq != before {
		t.Errorf("last_seq %d after a bad request, want %d", seq, before)
	}
	return ae
}

func (f *fixture) lastSeq(t testing.TB, id string) uint64 {
	t.Helper()
	s, err := f.client.GetSession(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return s.LastSeq
}

func text(role api.Role, s string) api.Message {
	return api.Message{Role: role, Content: []api.Block{{Type: api.BlockText, Text: s}}}
}

func TestToAPIError(t *testing.T) {
	cases := []struct {
		name      string
		err       error
		code      string
		field     string
		msg       string // exact when set
		msgHas    string
		internal  bool
		msgHasNot string
	}{
		{name: "not found", err: fmt.Errorf("session %q: %w", "x", engine.ErrNotFound), code: api.NotFound, msgHas: `"x"`},
		{name: "field error", err: &engine.FieldError{Field: "messages[2].tool_call_id", Err: fmt.Errorf("%w: no call with id %q", engine.ErrInvalid, "c9")}, code: api.Invalid, field: "messages[2].tool_call_id", msg: `messages[2].tool_call_id: no call with id "c9"`},
		{name: "plain invalid", err: fmt.Errorf("%w: reason", engine.ErrInvalid), code: api.Invalid, msg: "reason"},
		{name: "exists", err: fmt.Errorf("session %q: %w", "x", engine.ErrExists), code: api.Conflict},
		{name: "open round", err: fmt.Errorf("%w: %s", engine.ErrConflict, trigger.NotCompactingOpenRound), code: api.Conflict, msg: "Not compacting now: a tool call is still waiting on its result."},
		{name: "queue full", err: fmt.Errorf("%w: the compaction queue is full; try again shortly", engine.ErrUnavailable), code: api.Unavailable, msg: "the compaction queue is full; try again shortly"},
		{name: "storage unreachable", err: fmt.Errorf("session %q: load: %w: storage: nats: no servers available (connection reconnecting)", "x", checkpoint.ErrUnavailable), code: api.Unavailable, msg: "storage: nats: no servers available (connection reconnecting)"},
		{name: "storage unreachable past its time limit", err: errors.Join(fmt.Errorf("%w: storage: nats: no servers available", checkpoint.ErrUnavailable), context.DeadlineExceeded), code: api.Unavailable, msgHas: "storage: nats: no servers available"},
		{name: "log closed", err: fmt.Errorf("append: %w", checkpoint.ErrClosed), code: api.Unavailable},
		{name: "write outcome unknown", err: fmt.Errorf("session %q: publish: %w: storage: nats: no acknowledgement within 10s", "x", checkpoint.ErrUncertain), code: api.Timeout, msgHas: "the write may have been stored: storage: nats: no acknowledgement within 10s; retry with the same Idempotency-Key"},
		{name: "write outcome unknown past its time limit", err: errors.Join(fmt.Errorf("%w: storage: nats: publish", checkpoint.ErrUncertain), context.DeadlineExceeded), code: api.Timeout, msgHas: "may have been stored"},
		{name: "leader election past the bound", err: fmt.Errorf("%w: storage: nats: JetStream did not serve it for 10s", checkpoint.ErrUnavailable), code: api.Unavailable, msgHas: "did not serve it"},
		{name: "too large", err: fmt.Errorf("append: %w", checkpoint.ErrTooLarge), code: api.TooLarge},
		{name: "all bindings failed", err: fmt.Errorf("compaction: %w: b1: 500", summarizer.ErrAllBindingsFailed), code: api.Upstream, msgHas: "b1"},
		{name: "deadline", err: fmt.Errorf("wait: %w", context.DeadlineExceeded), code: api.Timeout},
		{name: "artifact not found", err: fmt.Errorf("get: %w", artifacts.ErrNotFound), code: api.NotFound},
		{name: "artifact bad id", err: fmt.Errorf("%w: x", artifacts.ErrInvalidID), code: api.Invalid, field: "id"},
		{name: "api error passes", err: api.Errorf(api.Forbidden, "", "no"), code: api.Forbidden, msg: "no"},
		{name: "open round wrapped", err: fmt.Errorf("compact %q: %w", "x", engine.ErrOpenRound), code: api.Conflict, msg: "Not compacting now: a tool call is still waiting on its result."},
		{name: "nothing to compact", err: fmt.Errorf("%w: no message a summary could replace", engine.ErrNothingToCompact), code: api.Conflict, msg: "nothing to compact: no message a summary could replace"},
		{name: "store too large", err: fmt.Errorf("commit: %w", store.ErrTooLarge), code: api.TooLarge, msgHas: "split them into smaller appends"},
		{name: "store closed", err: fmt.Errorf("commit: %w", store.ErrClosed), code: api.Unavailable, msg: "ctxd is shutting down"},
		{name: "disk full", err: fmt.Errorf("append: %w", store.ErrNoSpace), code: api.InsufficientStorage, msg: "the disk is full: ctxd refuses writes below its free-space reserve; nothing was stored"},
		{name: "disk full with figures", err: fmt.Errorf("append: %w", &store.SpaceError{Dir: "/d", Free: 1, Need: 2, Reserve: 3}), code: api.InsufficientStorage, msgHas: "/d has"},
		{name: "checkpoint invalid", err: fmt.Errorf("%w: session id %q", checkpoint.ErrInvalid, "a/b"), code: api.Invalid, msg: `session id "a/b"`},
		{name: "checkpoint not found", err: fmt.Errorf("session %q: %w", "x", checkpoint.ErrNotFound), code: api.NotFound, msg: `session "x": not found`},
		{name: "checkpoint conflict is the daemon's", err: fmt.Errorf("append at: %w", checkpoint.ErrConflict), code: api.Internal, internal: true},
		{name: "proxy owned", err: &engine.ProxyOwnedError{ID: "p-1", API: "chat", Field: "tools"}, code: api.Conflict, field: "tools", msgHas: "is owned by the proxy (chat API)"},
		{name: "reserved label", err: engine.ReservedForProxy("s", map[string]string{engine.LabelProxy: "x"}), code: api.Invalid, field: "labels.proxy", msgHas: "labels.proxy: reserved"},
		{name: "cancelled", err: fmt.Errorf("wait: %w", context.Canceled), code: api.Unavailable, msg: "the request was cancelled"},
		{name: "unknown is internal", err: errors.New("disk on fire at /secret/path"), code: api.Internal, internal: true, msgHasNot: "/secret/path"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ae, internal := ToAPIError(c.err)
			if ae.Code != c.code || ae.Field != c.field || internal != c.internal {
				t.Fatalf("got code %q field %q internal %v, want %q %q %v (message %q)", ae.Code, ae.Field, internal, c.code, c.field, c.internal, ae.Message)
			}
			if c.msg != "" && ae.Message != c.msg {
				t.Errorf("message %q, want %q", ae.Message, c.msg)
			}
			if c.msgHas != "" && !strings.Contains(ae.Message, c.msgHas) {
				t.Errorf("message %q lacks %q", ae.Message, c.msgHas)
			}
			if c.msgHasNot != "" && strings.Contains(ae.Message, c.msgHasNot) {
				t.Errorf("message %q leaks %q", ae.Message, c.msgHasNot)
			}
		})
	}
}

// TestUnavailableSaysWhenToRetry: every 503 carries Retry-After (a queue
// full, a stream electing its leader, a node stopping); other errors,
// a 504 among them, do not.
func TestUnavailableSaysWhenToRetry(t *testing.T) {
	s := &Server{log: quietLogger()}
	for _, c := range []struct {
		err   error
		retry string
	}{
		{fmt.Errorf("%w: storage: nats: JetStream did not serve it for 10s", checkpoint.ErrUnavailable), retryAfterSeconds},
		{fmt.Errorf("%w: the compaction queue is full", engine.ErrUnavailable), retryAfterSeconds},
		{fmt.Errorf("%w: no acknowledgement", checkpoint.ErrUncertain), ""},
		{fmt.Errorf("%w", engine.ErrNotFound), ""},
	} {
		rec := httptest.NewRecorder()
		s.writeError(rec, httptest.NewRequest("POST", "/v1/sessions/x/messages", nil), c.err)
		if got := rec.Header().Get("Retry-After"); got != c.retry {
			t.Errorf("%v: status %d, Retry-After %q, want %q", c.err, rec.Code, got, c.retry)
		}
	}
}

func TestBadRequestsChangeNothing(t *testing.T) {
	f := newFixture(t, nil)
	f.create(t, "s1")
	ctx := context.Background()
	if _, err := f.client.AppendMessages(ctx, "s1", api.AppendMessagesRequest{Messages: []api.Message{text(api.RoleUser, "hi")}}); err != nil {
		t.Fatal(err)
	}
	before := f.lastSeq(t, "s1")
	msgs := "/v1/sessions/s1/messages"
	cases := []struct {
		name, method, path, body string
		hdr                      map[string]string
		status                   int
		code, field              string
	}{
		{name: "malformed JSON", method: "POST", path: msgs, body: `{"messages":[`, status: 400, code: api.Invalid},
		{name: "syntax error", method: "POST", path: msgs, body: `{"messages":[}`, status: 400, code: api.Invalid, field: "messages[0]"},
		{name: "unknown field", method: "POST", path: msgs, body: `{"messages":[],"extra":1}`, status: 400, code: api.Invalid, field: "extra"},
		{name: "unknown nested field", method: "POST", path: msgs, body: `{"messages":[{"role":"user","content":[],"colour":"red"}]}`, status: 400, code: api.Invalid, field: "messages[0].colour"},
		{name: "wrong type", method: "POST", path: msgs, body: `{"messages":[{"role":7,"content":[]}]}`, status: 400, code: api.Invalid, field: "messages[0].role"},
		{name: "two values", method: "POST", path: msgs, body: `{"messages":[]} {}`, status: 400, code: api.Invalid},
		{name: "empty body", method: "POST", path: msgs, body: ``, status: 400, code: api.Invalid},
		{name: "no messages", method: "POST", path: msgs, body: `{"messages":[]}`, status: 400, code: api.Invalid, field: "messages"},
		{name: "not an object", method: "POST", path: msgs, body: `[1,2]`, status: 400, code: api.Invalid},
		{name: "wrong content type", method: "POST", path: msgs, body: `{"messages":[]}`, hdr: map[string]string{"Content-Type": "text/plain"}, status: 415, code: api.UnsupportedMediaType, field: "Content-Type"},
		{name: "unknown call", method: "POST", path: msgs, body: `{"messages":[{"role":"tool","tool_call_id":"nope","content":[{"type":"text","text":"r"}]}]}`, status: 400, code: api.Invalid, field: "messages[0].tool_call_id"},
		{name: "bad block type", method: "POST", path: msgs, body: `{"messages":[{"role":"user","content":[{"type":"video"}]}]}`, status: 400, code: api.Invalid, field: "messages[0].content[0].type"},
		{name: "empty text block", method: "POST", path: msgs, body: `{"messages":[{"role":"user","content":[{"type":"text","text":"ok"},{"type":"text","text":""}]}]}`, status: 400, code: api.Invalid, field: "messages[0].content[1].text"},
		{name: "unsigned thinking for a thinking-bound model", method: "POST", path: msgs, body: `{"messages":[{"role":"assistant","content":[{"type":"thinking","text":"hmm"},{"type":"text","text":"ok"}]}]}`, status: 400, code: api.Invalid, field: "messages[0].content[0].signature"},
		{name: "unknown session", method: "POST", path: "/v1/sessions/nope/messages", body: `{"messages":[{"role":"user","content":[]}]}`, status: 404, code: api.NotFound},
		{name: "bad session id", method: "GET", path: "/v1/sessions/a%20b", status: 400, code: api.Invalid, field: "id"},
		{name: "wrong method", method: "PUT", path: msgs, body: `{}`, status: 405, code: api.MethodNotAllowed},
		{name: "unknown route", method: "GET", path: "/v1/nothing", status: 404, code: api.NotFound},
		{name: "bad format", method: "GET", path: "/v1/sessions/s1/context?format=xml", status: 400, code: api.Invalid, field: "format"},
		{name: "bad presend", method: "GET", path: "/v1/sessions/s1/context?presend=maybe", status: 400, code: api.Invalid, field: "presend"},
		{name: "bad reason", method: "POST", path: "/v1/sessions/s1/compact", body: `{"reason":"because"}`, status: 400, code: api.Invalid, field: "reason"},
		{name: "bad from", method: "GET", path: "/v1/sessions/s1/events?from=-1", status: 400, code: api.Invalid, field: "from"},
		{name: "bad limit", method: "GET", path: "/v1/sessions?limit=0", status: 400, code: api.Invalid, field: "limit"},
		{name: "limit too large", method: "GET", path: "/v1/sessions?limit=1001", status: 400, code: api.Invalid, field: "limit"},
		{name: "limit not a number", method: "GET", path: "/v1/sessions?limit=ten", status: 400, code: api.Invalid, field: "limit"},
		{name: "bad after", method: "GET", path: "/v1/sessions?after=a%2Fb", status: 400, code: api.Invalid, field: "after"},
		// 2^64−1 used to wrap to 0 and replay the whole log.
		{name: "Last-Event-ID 2^64-1", method: "GET", path: "/v1/sessions/s1/events", hdr: map[string]string{api.HeaderLastEventID: "18446744073709551615"}, status: 400, code: api.Invalid, field: api.HeaderLastEventID},
		{name: "Last-Event-ID past the log", method: "GET", path: "/v1/sessions/s1/events", hdr: map[string]string{api.HeaderLastEventID: "2"}, status: 400, code: api.Invalid, field: api.HeaderLastEventID},
		{name: "from 2^64-1", method: "GET", path: "/v1/sessions/s1/events?from=18446744073709551615", status: 400, code: api.Invalid, field: "from"},
		{name: "from past the log", method: "GET", path: "/v1/sessions/s1/events?from=3", status: 400, code: api.Invalid, field: "from"},
		{name: "overlay defines a binding", method: "POST", path: "/v1/sessions", body: `{"id":"s2","model":"gpt-4o","config":"[offload]\nmax_chars = 20000\n[[summarizer.bindings]]\nname = \"x\"\nprovider = \"anthropic\"\nmodel = \"m\"\nbase_url = \"http://127.0.0.1:9\"\napi_key_env = \"ANTHROPIC_API_KEY\"\n"}`, status: 400, code: api.Invalid, field: "summarizer.bindings"},
		{name: "overlay names the agent file", method: "POST", path: "/v1/sessions", body: `{"id":"s2","model":"gpt-4o","config":"[compaction]\nagent_file = \"/etc/shadow\"\n"}`, status: 400, code: api.Invalid, field: "compaction.agent_file"},
		{name: "overlay names the offload dir", method: "POST", path: "/v1/sessions", body: `{"id":"s2","model":"gpt-4o","config":"offload.dir = \"/tmp\"\n"}`, status: 400, code: api.Invalid, field: "offload.dir"},
		{name: "overlay names an unknown binding", method: "POST", path: "/v1/sessions", body: `{"id":"s2","model":"gpt-4o","config":"[compaction]\nbinding = \"nope\"\n"}`, status: 400, code: api.Invalid, field: "compaction.binding"},
		{name: "labels of the wrong type", method: "POST", path: "/v1/sessions", body: `{"model":"gpt-4o","labels":{"a":1}}`, status: 400, code: api.Invalid, field: "labels.a"},
		{name: "missing model", method: "POST", path: "/v1/sessions", body: `{"id":"s2"}`, status: 400, code: api.Invalid, field: "model"},
		{name: "unknown model without limit", method: "POST", path: "/v1/sessions", body: `{"id":"s2","model":"mystery"}`, status: 400, code: api.Invalid, field: "context_limit"},
		{name: "existing id", method: "POST", path: "/v1/sessions", body: `{"id":"s1","model":"gpt-4o"}`, status: 409, code: api.Conflict},
		{name: "bad artifact id", method: "GET", path: "/v1/artifacts/zz", status: 400, code: api.Invalid, field: "id"},
		{name: "unknown artifact", method: "GET", path: "/v1/artifacts/" + strings.Repeat("ab", 32), status: 404, code: api.NotFound},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f.wantRefused(t, c.method, c.path, c.body, c.hdr, c.status, c.code, c.field, nil, "s1", before)
		})
	}
	if _, err := f.client.GetSession(ctx, "s2"); api.ErrorCode(err) != api.NotFound {
		t.Errorf("a refused create left session s2 behind: %v", err)
	}
}

// TestStrictDecoding: what docs/api.md promises of a request
// body — valid UTF-8, no duplicate key, case-sensitive keys, no unknown key,
// the right types — is refused with 400 naming the full path of the value,
// without Go type names, and nothing is stored.
func TestStrictDecoding(t *testing.T) {
	f := newFixture(t, nil)
	f.create(t, "s1")
	ctx := context.Background()
	if _, err := f.client.AppendMessages(ctx, "s1", api.AppendMessagesRequest{Messages: []api.Message{text(api.RoleUser, "hi")}}); err != nil {
		t.Fatal(err)
	}
	before := f.lastSeq(t, "s1")
	three := func(third string) string {
		return `{"messages":[{"role":"user","content":[{"type":"text","text":"a"}]},{"role":"assistant","content":[{"type":"text","text":"b"}]},` + third + `]}`
	}
	cases := []struct {
		name, path, body, field string
		want                    []string
	}{
		{"raw invalid UTF-8", "/v1/sessions/s1/messages", three("{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"bad \xff byte\"}]}"),
			"messages[2].content[0].text", []string{"invalid UTF-8"}},
		{"lone surrogate escape", "/v1/sessions/s1/messages", three(`{"role":"user","content":[{"type":"text","text":"\ud800"}]}`),
			"messages[2].content[0].text", []string{"invalid UTF-8", `\ud800`}},
		{"duplicate key", "/v1/sessions/s1/messages", three(`{"role":"user","role":"assistant","content":[]}`),
			"messages[2].role", []string{"duplicate key \"role\""}},
		{"duplicate key in a tool input", "/v1/sessions/s1/messages", three(`{"role":"assistant","content":[{"type":"tool_call","id":"c","name":"x","input":{"a":1,"a":2}}]}`),
			"messages[2].content[0].input.a", []string{"duplicate key"}},
		{"key of another case", "/v1/sessions/s1/messages", three(`{"Role":"user","content":[]}`),
			"messages[2].Role", []string{"unknown key \"Role\""}},
		{"type error", "/v1/sessions/s1/messages", three(`{"role":"user","content":[{"type":"text","text":7}]}`),
			"messages[2].content[0].text", []string{"must be a string, not a number"}},
		{"role of the wrong type", "/v1/sessions/s1/messages", three(`{"role":1,"content":[]}`),
			"messages[2].role", []string{"must be a string, not a number"}},
		{"unknown key with its path", "/v1/sessions/s1/messages", three(`{"role":"user","content":[{"type":"text","text":"x","extra":1}]}`),
			"messages[2].content[0].extra", []string{"unknown key \"extra\""}},
		{"bad time", "/v1/sessions/s1/messages", three(`{"role":"user","content":[],"time":"yesterday"}`),
			"messages[2].time", []string{"RFC 3339"}},
		{"negative usage", "/v1/sessions/s1/messages", three(`{"role":"assistant","content":[],"usage":{"input_tokens":-1}}`),
			"messages[2].usage.input_tokens", []string{"must be a non-negative integer, not -1"}},
		{"patch tools of the wrong type", "/v1/sessions/s1", `{"tools":{"name":"x"}}`, "tools", []string{"must be an array"}},
		{"create with a duplicate", "/v1/sessions", `{"id":"s9","model":"gpt-4o","model":"o3"}`, "model", []string{"duplicate key"}},
		{"compact wait of the wrong type", "/v1/sessions/s1/compact", `{"wait":"yes"}`, "wait", []string{"must be true or false"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			method := "POST"
			if c.path == "/v1/sessions/s1" {
				method = "PATCH"
			}
			ae := f.wantRefused(t, method, c.path, c.body, nil, http.StatusBadRequest, api.Invalid, c.field, c.want, "s1", before)
			for _, goName := range []string{"api.", "string (", "uint64", "time.Time", "json:", "Go "} {
				if strings.Contains(ae.Message, goName) {
					t.Errorf("message %q shows Go's %q", ae.Message, goName)
				}
			}
		})
	}
	if _, err := f.client.GetSession(ctx, "s9"); api.ErrorCode(err) != api.NotFound {
		t.Errorf("a refused create left a session behind: %v", err)
	}
}

func TestOversizedBody(t *testing.T) {
	f := newFixture(t, nil)
	f.create(t, "s1")
	big := `{"messages":[{"role":"user","content":[{"type":"text","text":"` + strings.Repeat("x", api.MaxRequestBytes) + `"}]}]}`
	status, ae, _, _ := f.do(t, "POST", "/v1/sessions/s1/messages", big, nil)
	if status != http.StatusRequestEntityTooLarge || ae.Code != api.TooLarge {
		t.Fatalf("got %d %+v", status, ae)
	}
	// Without a Content-Length (chunked), the cap applies while reading.
	req, _ := http.NewRequest("POST", f.ts.URL+"/v1/sessions/s1/messages", io.MultiReader(strings.NewReader(big)))
	req.ContentLength = -1
	req.Header.Set("Authorization", "Bearer "+f.token)
	resp, err := f.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked: got %d", resp.StatusCode)
	}
	if got := f.lastSeq(t, "s1"); got != 0 {
		t.Errorf("last_seq %d, want 0", got)
	}
}

func TestCompactOpenRound(t *testing.T) {
	f := newFixture(t, nil)
	f.create(t, "s1")
	ctx := context.Background()
	call := api.Message{Role: api.RoleAssistant, Content: []api.Block{{Type: api.BlockToolCall, ID: "c1", Name: "bash", Input: json.RawMessage(`{}`)}}}
	if _, err := f.client.AppendMessages(ctx, "s1", api.AppendMessagesRequest{Messages: []api.Message{text(api.RoleUser, "go"), call}}); err != nil {
		t.Fatal(err)
	}
	_, err := f.client.Compact(ctx, "s1", api.CompactRequest{Wait: true})
	if api.ErrorCode(err) != api.Conflict || api.ErrorMessage(err) != "Not compacting now: a tool call is still waiting on its result." {
		t.Fatalf("got %v (%s)", err, api.ErrorCode(err))
	}
	res := api.Message{Role: api.RoleTool, ToolCallID: "c1", ToolName: "bash", Content: []api.Block{{Type: api.BlockText, Text: "ok"}}}
	if _, err := f.client.AppendMessages(ctx, "s1", api.AppendMessagesRequest{Messages: []api.Message{res, text(api.RoleAssistant, "done")}}); err != nil {
		t.Fatal(err)
	}
	out, err := f.client.Compact(ctx, "s1", api.CompactRequest{Wait: true})
	if err != nil || out.Status != api.CompactDone || out.Checkpoint == nil || out.Checkpoint.Summary == "" {
		t.Fatalf("compact: %+v, %v", out, err)
	}
	cps, err := f.client.Checkpoints(ctx, "s1")
	if err != nil || len(cps) != 1 {
		t.Fatalf("checkpoints: %v %v", cps, err)
	}
	cr, err := f.client.Context(ctx, "s1")
	if err != nil || cr.CheckpointSeq != cps[0].Seq {
		t.Fatalf("context after compaction: %+v %v", cr, err)
	}
}

func TestContextFormats(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	if _, err := f.client.CreateSession(ctx, api.CreateSessionRequest{
		ID: "s1", Model: "claude-sonnet-4-5", System: "be brief <b>&</b>",
		Tools:  []api.ToolDef{{Name: "bash", InputSchema: json.RawMessage(`{"type":"object"}`)}},
		Config: "[context_editing]\nmode = \"server\"\n",
	}); err != nil {
		t.Fatal(err)
	}
	call := api.Message{Role: api.RoleAssistant, Content: []api.Block{{Type: api.BlockToolCall, ID: "c1", Name: "bash", Input: json.RawMessage(`{"cmd":"ls"}`)}}}
	res := api.Message{Role: api.RoleTool, ToolCallID: "c1", ToolName: "bash", Content: []api.Block{{Type: api.BlockText, Text: "a\nb"}}}
	if _, err := f.client.AppendMessages(ctx, "s1", api.AppendMessagesRequest{Messages: []api.Message{text(api.RoleUser, "list"), call, res}}); err != nil {
		t.Fatal(err)
	}

	var canon api.ContextResponse
	raw, err := f.client.ContextWith(ctx, "s1", api.ContextOptions{NoPreSend: true})
	if err != nil || json.Unmarshal(raw, &canon) != nil {
		t.Fatalf("canonical: %s %v", raw, err)
	}
	if len(canon.Messages) != 3 || canon.System != "be brief <b>&</b>" || canon.LastSeq == 0 {
		t.Errorf("canonical: %s", raw)
	}
	if !bytes.Contains(raw, []byte("<b>&</b>")) {
		t.Errorf("canonical escapes HTML: %s", raw)
	}

	status, _, body, hdr := f.do(t, "GET", "/v1/sessions/s1/context?format=anthropic", "", nil)
	var anth struct {
		System   string            `json:"system"`
		Tools    []json.RawMessage `json:"tools"`
		Messages []struct {
			Role    string            `json:"role"`
			Content []json.RawMessage `json:"content"`
		} `json:"messages"`
		ContextManagement json.RawMessage `json:"context_management"`
	}
	if status != 200 || json.Unmarshal(body, &anth) != nil {
		t.Fatalf("anthropic: %d %s", status, body)
	}
	if anth.System == "" || len(anth.Tools) != 1 || len(anth.Messages) != 3 || anth.Messages[2].Role != "user" {
		t.Errorf("anthropic shape: %s", body)
	}
	strictAnthropic(t, body, history.ThinkingUnknown)
	if len(anth.ContextManagement) == 0 || hdr.Get(api.HeaderAnthropicBeta) != AnthropicContextManagementBeta {
		t.Errorf("mode server: context_management %s, beta header %q", anth.ContextManagement, hdr.Get(api.HeaderAnthropicBeta))
	}

	raw, err = f.client.ContextRaw(ctx, "s1", api.FormatOpenAI)
	var oai struct {
		Messages []struct {
			Role       string `json:"role"`
			ToolCallID string `json:"tool_call_id"`
		} `json:"messages"`
		Tools []json.RawMessage `json:"tools"`
	}
	if err != nil || json.Unmarshal(raw, &oai) != nil {
		t.Fatalf("openai: %s %v", raw, err)
	}
	if len(oai.Messages) != 4 || oai.Messages[0].Role != "system" || oai.Messages[3].ToolCallID != "c1" || len(oai.Tools) != 1 {
		t.Errorf("openai shape: %s", raw)
	}
}

func TestEventsStream(t *testing.T) {
	f := newFixture(t, nil)
	f.create(t, "s1")
	ctx := context.Background()
	for i := range 3 {
		if _, err := f.client.AppendMessages(ctx, "s1", api.AppendMessagesRequest{Messages: []api.Message{text(api.RoleUser, fmt.Sprint("m", i))}}); err != nil {
			t.Fatal(err)
		}
	}
	var seqs []uint64
	if err := f.client.StreamEvents(ctx, "s1", api.EventsOptions{From: 2}, func(ev api.Event) error {
		seqs = append(seqs, ev.Seq)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(seqs) != "[2 3]" {
		t.Errorf("from=2: seqs %v", seqs)
	}

	// Last-Event-ID resumes after the id; heartbeats arrive while idle.
	status, _, body, hdr := f.do(t, "GET", "/v1/sessions/s1/events", "", map[string]string{api.HeaderLastEventID: "1"})
	if status != 200 || hdr.Get("Content-Type") != api.ContentTypeEventStream {
		t.Fatalf("%d %s", status, body)
	}
	if bytes.Contains(body, []byte("id: 1\n")) || !bytes.Contains(body, []byte("id: 2\nevent: message\ndata: {")) {
		t.Errorf("Last-Event-ID: 1 stream:\n%s", body)
	}

	// Follow: a new event arrives on an open stream.
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got := make(chan uint64, 8)
	done := make(chan error, 1)
	go func() {
		done <- f.client.Events(fctx, "s1", 3, func(ev api.Event) error {
			got <- ev.Seq
			if ev.Seq == 4 {
				return io.EOF
			}
			return nil
		})
	}()
	if s := <-got; s != 3 {
		t.Fatalf("first followed seq %d", s)
	}
	time.Sleep(50 * time.Millisecond) // let a heartbeat or two pass on the idle stream
	if _, err := f.client.AppendMessages(ctx, "s1", api.AppendMessagesRequest{Messages: []api.Message{text(api.RoleUser, "m3")}}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, io.EOF) {
		t.Fatalf("follow: %v", err)
	}

	// Shutdown ends a followed stream with unavailable and a resume point.
	done2 := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		done2 <- f.client.Events(ctx, "s1", 4, func(api.Event) error { close(started); return nil })
	}()
	<-started
	f.srv.BeginShutdown()
	err := <-done2
	if api.ErrorCode(err) != api.Unavailable || !strings.Contains(err.Error(), "resume from seq 5") {
		t.Fatalf("shutdown: %v", err)
	}

	// Unknown session: a 404 before the stream starts.
	if err := f.client.StreamEvents(ctx, "nope", api.EventsOptions{}, func(api.Event) error { return nil }); api.ErrorCode(err) != api.NotFound {
		t.Fatalf("unknown session: %v", err)
	}
}

func TestSecurityTCP(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.AuthToken = "tok" })
	cases := []struct {
		name   string
		hdr    map[string]string
		status int
	}{
		{"token ok", map[string]string{"Authorization": "Bearer tok"}, 200},
		{"no token", map[string]string{"Authorization": ""}, 401},
		{"bad token", map[string]string{"Authorization": "Bearer nope"}, 401},
		{"token as basic auth", map[string]string{"Authorization": "Basic dG9r"}, 401},
		{"token prefix", map[string]string{"Authorization": "Bearer to"}, 401},
		{"origin", map[string]string{"Authorization": "Bearer tok", "Origin": "http://evil.example"}, 403},
		{"referer", map[string]string{"Authorization": "Bearer tok", "Referer": "http://evil.example/"}, 403},
		{"foreign host", map[string]string{"Authorization": "Bearer tok", "Host": "evil.example"}, 403},
		{"localhost host", map[string]string{"Authorization": "Bearer tok", "Host": "localhost:" + portOf(f.ts.URL)}, 200},
		{"wrong port", map[string]string{"Authorization": "Bearer tok", "Host": "127.0.0.1:1"}, 403},
		{"no port", map[string]string{"Authorization": "Bearer tok", "Host": "localhost"}, 403},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, _, body, _ := f.do(t, "GET", "/v1/status", "", c.hdr)
			if status != c.status {
				t.Fatalf("got %d %s, want %d", status, body, c.status)
			}
		})
	}
}

func portOf(u string) string {
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(u, "http://"))
	return port
}

func TestHostAllowed(t *testing.T) {
	lo := connInfo{loopbackListener: true, port: "7411"}
	public := connInfo{port: "7411"}
	cases := []struct {
		host string
		info connInfo
		want bool
	}{
		{"localhost:7411", lo, true},
		{"LOCALHOST:7411", lo, true},
		{"127.0.0.1:7411", lo, true},
		{"[::1]:7411", lo, true},
		{"127.0.0.1", lo, false}, // no port: port 80, not the listener's
		{"localhost", lo, false},
		{"[::1]", lo, false},
		{"localhost", connInfo{loopbackListener: true, port: "80"}, true},
		{"127.0.0.1:80", lo, false},
		{"evil.example:7411", lo, false},
		{"10.0.0.5:7411", lo, false},
		{"10.0.0.5:7411", public, true},
		{"evil.example:7411", public, false},
		{"", lo, false},
		{"127.0.0.1:7411", connInfo{}, true},
		{"10.0.0.5:7411", connInfo{}, false},
	}
	for _, c := range cases {
		if got := hostAllowed(c.host, c.info); got != c.want {
			t.Errorf("hostAllowed(%q, %+v) = %v, want %v", c.host, c.info, got, c.want)
		}
	}
}

func TestUnixPeerUID(t *testing.T) {
	for _, c := range []struct {
		name    string
		ownUID  uint32
		allowed []uint32
		status  int
	}{
		{"own uid", uint32(os.Getuid()), nil, 200},
		{"other uid", uint32(os.Getuid()) + 1000, nil, 403},
		{"allowed uid", uint32(os.Getuid()) + 1000, []uint32{uint32(os.Getuid())}, 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, func(o *Options) { o.OwnUID, o.OwnUIDSet, o.AllowedUIDs = c.ownUID, true, c.allowed })
			dir, err := os.MkdirTemp("", "ctxdsrv")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			sock := filepath.Join(dir, "s")
			l, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			hs := &http.Server{Handler: f.srv.Handler(), ConnContext: f.srv.ConnContext}
			go func() { _ = hs.Serve(l) }()
			t.Cleanup(func() { _ = hs.Close() })
			_, err = (&api.Client{Socket: sock}).Status(context.Background())
			switch {
			case c.status == 200 && err != nil:
				t.Fatal(err)
			case c.status == 403 && api.ErrorCode(err) != api.Forbidden:
				t.Fatalf("got %v, want forbidden", err)
			}
		})
	}
}

func TestMetricsAndStatus(t *testing.T) {
	f := newFixture(t, nil)
	f.create(t, "s1")
	ctx := context.Background()
	if _, err := f.client.AppendMessages(ctx, "s1", api.AppendMessagesRequest{Messages: []api.Message{text(api.RoleUser, "a"), text(api.RoleAssistant, "b")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.Compact(ctx, "s1", api.CompactRequest{Wait: true}); err != nil {
		t.Fatal(err)
	}
	b, err := f.client.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		MetricSessions + " 1", MetricAppends + " 2", MetricCompactions + `{outcome="ok"} 1`,
		MetricQueueDepth + " 0", MetricQueueCapacity + " 8", MetricSummarizer + "_count",
		MetricRequests + `{code="200",route="POST /v1/sessions/{id}/messages"} 1`,
	} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if bytes.Contains(b, []byte("s1")) {
		t.Errorf("a session id appears in the metrics")
	}
	st, err := f.client.Status(ctx)
	if err != nil || st.Sessions != 1 || st.Version != api.Version || st.Workers.Size != 2 || st.Queue.Capacity != 8 {
		t.Fatalf("status %+v %v", st, err)
	}
}

func TestSessionLifecycle(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	f.create(t, "b")
	f.create(t, "a")
	list, err := f.client.ListSessions(ctx)
	if err != nil || len(list) != 2 || list[0].ID != "a" {
		t.Fatalf("list %+v %v", list, err)
	}
	page, err := f.client.ListSessionsPage(ctx, "", 1)
	if err != nil || len(page.Sessions) != 1 || page.Sessions[0].ID != "a" || page.Next != "a" {
		t.Fatalf("first page %+v %v", page, err)
	}
	page, err = f.client.ListSessionsPage(ctx, page.Next, 1)
	if err != nil || len(page.Sessions) != 1 || page.Sessions[0].ID != "b" || page.Next != "" {
		t.Fatalf("second page %+v %v", page, err)
	}
	sys := "new"
	s, err := f.client.PatchSession(ctx, "a", api.PatchSessionRequest{System: &sys})
	if err != nil || s.LastSeq == 0 {
		t.Fatalf("patch %+v %v", s, err)
	}
	run, err := f.client.StartRun(ctx, "a", api.RunRequest{})
	if err != nil || run.Seq <= s.LastSeq {
		t.Fatalf("run %+v %v", run, err)
	}
	if err := f.client.DeleteSession(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.GetSession(ctx, "a"); api.ErrorCode(err) != api.NotFound {
		t.Fatalf("after delete: %v", err)
	}
	id, err := f.arts.Retain(ctx, []byte("hello"), artifacts.FormatText)
	if err != nil {
		t.Fatal(err)
	}
	got, err := f.client.Artifact(ctx, id.URI())
	if err != nil || string(got) != "hello" {
		t.Fatalf("artifact %q %v", got, err)
	}
}

func TestSessionDescribesItself(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	limit := uint64(100000)
	if _, err := f.client.CreateSession(ctx, api.CreateSessionRequest{ID: "d", Model: "gpt-4o", ContextLimit: limit, Labels: map[string]string{"team": "infra"}}); err != nil {
		t.Fatal(err)
	}
	msgs := []api.Message{
		{Role: api.RoleUser, Content: []api.Block{{Type: api.BlockText, Text: "hi"}}},
		{Role: api.RoleAssistant, Content: []api.Block{{Type: api.BlockToolCall, ID: "c1", Name: "read", Input: json.RawMessage(`{}`)}},
			Usage: &api.Usage{InputTokens: 100, OutputTokens: 100}},
	}
	res, err := f.client.AppendMessages(ctx, "d", api.AppendMessagesRequest{Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	if res.FirstSeq == 0 || res.LastSeq != res.FirstSeq+1 {
		t.Fatalf("seqs %d..%d", res.FirstSeq, res.LastSeq)
	}
	s, err := f.client.GetSession(ctx, "d")
	if err != nil {
		t.Fatal(err)
	}
	if s.Labels["team"] != "infra" || !s.Auto || s.Messages != 2 || s.OpenToolCalls != 1 || s.Compaction != api.CompactionIdle {
		t.Fatalf("session = %+v", s)
	}
	if s.LastCheck == nil || s.LastCheck.Signal != api.SignalPostCheck || s.LastCheck.Fired || s.LastCheck.Tokens.Value != 200 {
		t.Fatalf("last check = %+v", s.LastCheck)
	}
	if s.ContextEditing == "" || s.Shape == "" {
		t.Fatalf("mode %q shape %q", s.ContextEditing, s.Shape)
	}
}

func TestUncleanPathGetsTheEnvelope(t *testing.T) {
	f := newFixture(t, nil)
	req := httptest.NewRequest("GET", "http://127.0.0.1/v1/sessions/../status", nil)
	req.Header.Set("Authorization", "Bearer "+fixtureToken)
	rec := httptest.NewRecorder()
	f.srv.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), `"code":"not_found"`) {
		t.Fatalf("%d %s", rec.Code, rec.Body.String())
	}
}

// TestOversizedBodyWholeFirst: a client that writes its whole
// oversized body before reading the answer (Python's http.client does)
// gets the 413, not a broken pipe or a reset, with and without a
// Content-Length.
func TestOversizedBodyWholeFirst(t *testing.T) {
	f := newFixture(t, nil)
	f.create(t, "s1")
	body := `{"messages":[{"role":"user","content":[{"type":"text","text":"` + strings.Repeat("x", api.MaxRequestBytes+1<<20) + `"}]}]}`
	for _, chunked := range []bool{false, true} {
		t.Run(fmt.Sprintf("chunked=%v", chunked), func(t *testing.T) {
			conn, err := net.Dial("tcp", f.ts.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			var req bytes.Buffer
			fmt.Fprintf(&req, "POST /v1/sessions/s1/messages HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n", f.ts.Listener.Addr(), f.token)
			if chunked {
				fmt.Fprintf(&req, "Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(body), body)
			} else {
				fmt.Fprintf(&req, "Content-Length: %d\r\n\r\n%s", len(body), body)
			}
			if _, err := conn.Write(req.Bytes()); err != nil {
				t.Fatalf("writing the whole body first: %v", err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("reading the answer: %v", err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), `"too_large"`) {
				t.Fatalf("got %d %s", resp.StatusCode, b)
			}
		})
	}
	if got := f.lastSeq(t, "s1"); got != 0 {
		t.Errorf("last_seq %d, want 0", got)
	}
}

// TestOverlayRefusalNamesTheKey: an overlay that defines its own summarizer
// binding (a capability, never policy: docs/decisions.md "Session overlays
// carry policy, never capabilities") is answered 400 with the key as the field
// and the configuration's own problem line, and stores nothing.
func TestOverlayRefusalNamesTheKey(t *testing.T) {
	f := newFixture(t, nil)
	overlay := "[offload]\nmax_chars = 20000\n[[summarizer.bindings]]\nname = \"x\"\nprovider = \"anthropic\"\nmodel = \"m\"\nbase_url = \"http://127.0.0.1:9\"\napi_key_env = \"CTXD_AUTH_TOKEN\"\n"
	ctx := context.Background()
	_, err := f.client.CreateSession(ctx, api.CreateSessionRequest{ID: "evil", Model: "gpt-4o", Config: overlay})
	ae, ok := errors.AsType[*api.Error](err)
	if !ok || ae.Code != api.Invalid || ae.Field != "summarizer.bindings" ||
		ae.Message != "config: session overlay:3:1: summarizer.bindings: not allowed in a session overlay" {
		t.Fatalf("got %v (%+v)", err, ae)
	}
	if ids, err := f.eng.ListSessions(ctx); err != nil || len(ids) != 0 {
		t.Fatalf("sessions after a refused create: %v %v", ids, err)
	}
}

// TestIdempotentAppendOverHTTP (docs/api.md "Retrying an append"): a
// POST messages retried with its Idempotency-Key is answered with the
// first append (Idempotent-Replayed: true, replayed in the body, the same
// seqs) and stores nothing; the key with other messages is 409; an empty
// or over-long key is 400 naming the header, and changes nothing.
func TestIdempotentAppendOverHTTP(t *testing.T) {
	f := newFixture(t, nil)
	f.create(t, "s1")
	body := `{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`
	key := map[string]string{api.HeaderIdempotencyKey: "turn-1"}
	status, _, b1, h1 := f.do(t, "POST", "/v1/sessions/s1/messages", body, key)
	if status != 200 || h1.Get(api.HeaderIdempotentReplayed) != "" {
		t.Fatalf("first: %d %s", status, b1)
	}
	status, _, b2, h2 := f.do(t, "POST", "/v1/sessions/s1/messages", body, key)
	if status != 200 || h2.Get(api.HeaderIdempotentReplayed) != "true" {
		t.Fatalf("retry: %d %q %s", status, h2.Get(api.HeaderIdempotentReplayed), b2)
	}
	var r1, r2 api.AppendMessagesResponse
	if json.Unmarshal(b1, &r1) != nil || json.Unmarshal(b2, &r2) != nil || !r2.Replayed || r1.Replayed ||
		r1.FirstSeq != r2.FirstSeq || r1.LastSeq != r2.LastSeq || len(r2.Messages) != 1 || r2.Messages[0].Seq != r1.Messages[0].Seq {
		t.Fatalf("first %s\nretry %s", b1, b2)
	}
	before := f.lastSeq(t, "s1")
	if before != r1.LastSeq {
		t.Fatalf("last seq %d after the retry, want %d", before, r1.LastSeq)
	}
	f.wantRefused(t, "POST", "/v1/sessions/s1/messages", `{"messages":[{"role":"user","content":[{"type":"text","text":"other"}]}]}`, key, 409, api.Conflict, "", []string{"turn-1", "other messages"}, "s1", before)
	f.wantRefused(t, "POST", "/v1/sessions/s1/messages", body, map[string]string{api.HeaderIdempotencyKey: ""}, 400, api.Invalid, api.HeaderIdempotencyKey, []string{"empty"}, "s1", before)
	f.wantRefused(t, "POST", "/v1/sessions/s1/messages", body, map[string]string{api.HeaderIdempotencyKey: strings.Repeat("k", 256)}, 400, api.Invalid, api.HeaderIdempotencyKey, []string{"256 bytes"}, "s1", before)
}
