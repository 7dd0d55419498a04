package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxd/ctxd/artifacts"
	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/store"
	"github.com/ctxd/ctxd/internal/strict"
	"github.com/ctxd/ctxd/summarizer"
	"github.com/ctxd/ctxd/workers"
	"github.com/dgraph-io/badger/v4"
)

// harness is an engine over a real badger store (in memory unless dir is
// given) with a running worker pool.
type harness struct {
	t      *testing.T
	e      *Engine
	db     *badger.DB // nil on the NATS backend
	log    checkpoint.Log
	arts   artifacts.Backend
	pool   *workers.Pool
	close  []func()
	cancel context.CancelFunc
	done   chan struct{}
	closed bool
}

var testSecret = []byte(strings.Repeat("k", artifacts.SecretSize))

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// writeAgentFile writes a compaction agent file (front matter and
// prompt, docs/design.md §5.4) holding src in a fresh temporary directory and
// returns its path.
func writeAgentFile(t *testing.T, src string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "compaction.md")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func newHarness(t *testing.T, cfg config.Config, dir string) *harness {
	t.Helper()
	return newHarnessPool(t, cfg, dir, workers.Options{Size: 2, Queue: 16, DrainTimeout: time.Second})
}

// newHarnessPool is newHarness with the worker pool's options.
func newHarnessPool(t *testing.T, cfg config.Config, dir string, pool workers.Options) *harness {
	t.Helper()
	h := &harness{t: t, done: make(chan struct{})}
	var err error
	shared := false
	if testBackend == "nats" {
		h.openNATS(dir)
		shared = true
	} else {
		var db *badger.DB
		if dir == "" {
			db, err = store.OpenInMemory()
		} else {
			db, err = store.Open(dir, store.Options{SyncWrites: true, Logger: quietLogger()})
		}
		if err != nil {
			t.Fatal(err)
		}
		cps := checkpoint.Open(db, checkpoint.Options{})
		arts, err := artifacts.Open(db, testSecret)
		if err != nil {
			t.Fatal(err)
		}
		h.db, h.log, h.arts = db, cps, arts
		h.close = append(h.close, func() { _ = cps.Close() }, func() { _ = arts.Close() }, func() { _ = db.Close() })
	}
	h.pool, err = workers.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	sum := summarizer.New(summarizer.Options{Logger: quietLogger(), RetryWaitMin: time.Millisecond, RetryWaitMax: 5 * time.Millisecond})
	h.e, err = New(Options{Config: cfg, Log: h.log, Artifacts: h.arts, Summarizer: sum, Pool: h.pool, Logger: quietLogger(), Shared: shared})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { _ = h.pool.Run(ctx); close(h.done) }()
	t.Cleanup(h.Close)
	return h
}

// Close stops the pool and closes the stores, as a daemon shutdown does.
func (h *harness) Close() {
	if h.closed {
		return
	}
	h.closed = true
	h.cancel()
	<-h.done
	for _, f := range h.close {
		f()
	}
}

// testConfig is the configuration of the tests of compaction's mechanics:
// no offload, no context editing, and compaction at the threshold
// (weigh_compactions off; TestCompactionFiresOnlyWhenItPaysBack weighs).
func testConfig() config.Config {
	cfg := config.Defaults()
	cfg.Offload.Enabled = false
	cfg.ContextEditing.Enabled = false
	cfg.ContextCompaction.WeighCompactions = false
	return cfg
}

func text(role history.Role, s string) history.Message {
	return history.Message{Role: role, Content: []history.Block{{Type: history.BlockText, Text: s}}}
}

func user(s string) history.Message      { return text(history.RoleUser, s) }
func assistant(s string) history.Message { return text(history.RoleAssistant, s) }

func withUsage(m history.Message, input, output uint64) history.Message {
	m.Usage = &history.Usage{InputTokens: input, OutputTokens: output}
	return m
}

func calls(ids ...string) history.Message {
	m := history.Message{Role: history.RoleAssistant}
	for _, id := range ids {
		m.Content = append(m.Content, history.Block{Type: history.BlockToolCall, ID: id, Name: "read", Input: json.RawMessage(`{"path":"/src/` + id + `.go"}`)})
	}
	return m
}

func result(id, s string) history.Message {
	return history.Message{Role: history.RoleTool, ToolCallID: id, ToolName: "read", Content: []history.Block{{Type: history.BlockText, Text: s}}}
}

// words returns n space-separated words: about n o200k tokens.
func words(n int) string {
	return strings.TrimSpace(strings.Repeat(" word", n))
}

func (h *harness) create(id string, limit uint64) {
	h.t.Helper()
	if _, err := h.e.CreateSession(context.Background(), CreateParams{ID: id, Model: "test-model", ContextLimit: limit, System: "You are a test agent."}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) append(id string, msgs ...history.Message) AppendResult {
	h.t.Helper()
	res, err := h.e.Append(context.Background(), id, msgs)
	if err != nil {
		h.t.Fatal(err)
	}
	return res
}

func (h *harness) context(id string) *Assembled {
	h.t.Helper()
	a, err := h.e.Context(context.Background(), id, ContextOptions{NoPreSend: true})
	if err != nil {
		h.t.Fatal(err)
	}
	return a
}

func (h *harness) events(id string, kind checkpoint.Kind) []checkpoint.Event {
	h.t.Helper()
	var out []checkpoint.Event
	err := h.e.Events(context.Background(), id, 1, false, func(ev checkpoint.Event) error {
		if ev.Kind == kind {
			out = append(out, ev)
		}
		return nil
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

// waitEvent follows the session's events until one of kind arrives after
// fromSeq, or fails the test after a generous bound.
func (h *harness) waitEvent(id string, fromSeq uint64, kind checkpoint.Kind) checkpoint.Event {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var found checkpoint.Event
	stop := fmt.Errorf("found")
	err := h.e.Events(ctx, id, fromSeq, true, func(ev checkpoint.Event) error {
		if ev.Kind == kind {
			found = ev
			return stop
		}
		return nil
	})
	if err != stop {
		h.t.Fatalf("waiting for a %s event: %v", kind, err)
	}
	return found
}

// waitJobDone waits until session id has no job queued or running in the
// pool, or fails the test after a generous bound.
func (h *harness) waitJobDone(id string) {
	h.t.Helper()
	t := h.e.opts.Pool.Active(id)
	if t == nil {
		return
	}
	select {
	case <-t.Done():
	case <-time.After(30 * time.Second):
		h.t.Fatalf("session %s's job did not end", id)
	}
}

// fakeAnthropic is an httptest Anthropic Messages API whose answers a test
// scripts: each request takes the next reply (the last repeats).
type fakeAnthropic struct {
	srv *httptest.Server

	mu       sync.Mutex
	replies  []fakeReply
	requests [][]byte
	// refused lists the provider rules the requests broke: the fake is
	// strict (internal/strict) and answers them with Anthropic's 400.
	refused  []string
	received chan struct{}
	release  chan struct{} // when non-nil, each request waits for it
}

type fakeReply struct {
	status int
	body   string
}

func okSummary(text string) fakeReply {
	b, _ := json.Marshal(map[string]any{
		"id": "msg_test", "type": "message", "role": "assistant", "model": "claude-test",
		"content":     []map[string]any{{"type": "text", "text": text}},
		"stop_reason": "end_turn",
		"usage":       map[string]any{"input_tokens": 100, "output_tokens": 50},
	})
	return fakeReply{status: 200, body: string(b)}
}

func newFakeAnthropic(t *testing.T, replies ...fakeReply) *fakeAnthropic {
	f := &fakeAnthropic{replies: replies, received: make(chan struct{}, 100)}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		vs, err := strict.Anthropic(body, history.ThinkingUnknown, false)
		f.mu.Lock()
		f.requests = append(f.requests, body)
		if err != nil || len(vs) > 0 {
			f.refused = append(f.refused, fmt.Sprint(err, vs))
			f.mu.Unlock()
			w.WriteHeader(http.StatusBadRequest)
			_, _ = fmt.Fprintf(w, `{"type":"error","error":{"type":"invalid_request_error","message":%q}}`, fmt.Sprint(err, vs))
			return
		}
		rep := f.replies[0]
		if len(f.replies) > 1 {
			f.replies = f.replies[1:]
		}
		release := f.release
		f.mu.Unlock()
		f.received <- struct{}{}
		if release != nil {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rep.status)
		_, _ = io.WriteString(w, rep.body)
	}))
	t.Cleanup(f.srv.Close)
	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.refused) > 0 {
			t.Errorf("the strict provider refused %d summarizer requests: %v", len(f.refused), f.refused)
		}
	})
	t.Setenv("CTXD_TEST_KEY", "test-key")
	return f
}

func (f *fakeAnthropic) binding() config.Binding {
	return config.Binding{Name: "fake", Provider: "anthropic", Model: "claude-test", BaseURL: f.srv.URL, APIKeyEnv: "CTXD_TEST_KEY"}
}

func (f *fakeAnthropic) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.requests)
}

// checkValid fails the test when msgs breaks a provider rule
// (history.CheckRequest, docs/design.md §4a): a tool result without its call, a
// call without its result, an empty block or message, thinking out of place.
func checkValid(t *testing.T, msgs []history.Message) {
	t.Helper()
	if vs := history.CheckRequest(history.Sendable(msgs), history.Rules{}); len(vs) > 0 {
		t.Fatalf("invalid context: %v", vs)
	}
}
