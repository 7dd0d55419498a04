package summarizer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/corpustest"
)

// memStore is an in-memory ArtifactStore: content addressed by SHA-256.
type memStore struct {
	mu      sync.Mutex
	content map[string][]byte
	format  map[string]string
	calls   int
	err     error
}

func newMemStore() *memStore {
	return &memStore{content: map[string][]byte{}, format: map[string]string{}}
}

func (s *memStore) Retain(_ context.Context, content []byte, format string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.err != nil {
		return "", s.err
	}
	sum := sha256.Sum256(content)
	uri := "artifact://" + hex.EncodeToString(sum[:])
	s.content[uri] = slices.Clone(content)
	s.format[uri] = format
	return uri, nil
}

func (s *memStore) get(uri string) ([]byte, string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.content[uri]
	return c, s.format[uri], ok
}

// quietLogger discards everything.
func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// newTestSummarizer retries fast: no test ever waits a real backoff.
func newTestSummarizer() *Summarizer {
	return New(Options{Logger: quietLogger(), RetryWaitMin: time.Millisecond, RetryWaitMax: 5 * time.Millisecond})
}

// errorBody is one entry of the corpus's providers/error-bodies.json.
type errorBody = corpustest.ErrorBody

// errorBodies returns the corpus's error bodies by id.
func errorBodies(t *testing.T) map[string]errorBody {
	t.Helper()
	out := map[string]errorBody{}
	for _, e := range corpustest.ErrorBodies(t) {
		out[e.ID] = e
	}
	return out
}

// corpusError returns the exact body of a corpus error by id.
func corpusError(t *testing.T, id string) (int, []byte) {
	t.Helper()
	e, ok := errorBodies(t)[id]
	if !ok || e.Body == nil {
		t.Fatalf("corpus error %q missing or without a JSON body", id)
	}
	return e.Status, []byte(*e.Body)
}

// cassetteBody returns the response body of an Anthropic cassette
// interaction, re-encoded as JSON.
func cassetteBody(t *testing.T, id string) []byte {
	t.Helper()
	var f struct {
		Interactions []struct {
			ID       string `json:"id"`
			Response struct {
				Body json.RawMessage `json:"body"`
			} `json:"response"`
		} `json:"interactions"`
	}
	if err := json.Unmarshal(corpustest.Read(t, "providers/anthropic-messages-cassettes.json"), &f); err != nil {
		t.Fatal(err)
	}
	for _, in := range f.Interactions {
		if in.ID == id {
			return in.Response.Body
		}
	}
	t.Fatalf("cassette %q not found", id)
	return nil
}

// reply is one scripted response of a fake provider.
type reply struct {
	status int
	header map[string]string
	body   []byte
}

// fakeProvider is an httptest server answering scripted replies in order
// (the last one repeats) and recording every request.
type fakeProvider struct {
	*httptest.Server
	mu       sync.Mutex
	replies  []reply
	requests []recorded
}

// recorded is one request a fake provider received.
type recorded struct {
	path   string
	header http.Header
	body   []byte
}

func newFakeProvider(t *testing.T, replies ...reply) *fakeProvider {
	t.Helper()
	f := &fakeProvider{replies: replies}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		n := len(f.requests)
		f.requests = append(f.requests, recorded{path: r.URL.Path, header: r.Header.Clone(), body: body})
		rep := f.replies[min(n, len(f.replies)-1)]
		f.mu.Unlock()
		for k, v := range rep.header {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rep.status)
		_, _ = w.Write(rep.body)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeProvider) got() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests)
}

func anthropicBinding(name, url string) config.Binding {
	return config.Binding{Name: name, Provider: ProviderAnthropic, Model: "claude-test", BaseURL: url}
}

func openAIBinding(name, url string) config.Binding {
	return config.Binding{Name: name, Provider: ProviderOpenAI, Model: "gpt-test", BaseURL: url}
}

// sampleRequest is a small closed history: a user request, a round of two
// parallel calls (an ordinary file read and an artifact read), a
// multi-block result, an error, and a final answer.
func sampleRequest() Request {
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	text := func(s string) []history.Block { return []history.Block{{Type: history.BlockText, Text: s}} }
	return Request{
		System: "You are a coding agent.",
		Tools: []history.ToolDef{
			{Name: "read", Description: "Read a file", InputSchema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`)},
			{Name: "bash", Description: "Run a command"},
		},
		Messages: []history.Message{
			{Seq: 1, Role: history.RoleUser, Content: text("Fix the failing test in pkg/foo."), Time: ts},
			{Seq: 2, Role: history.RoleAssistant, Content: []history.Block{
				{Type: history.BlockThinking, Text: "Look at the test first.", Signature: "sig-1"},
				{Type: history.BlockToolCall, ID: "c1", Name: "read", Input: json.RawMessage(`{"path":"pkg/foo/foo_test.go"}`)},
				{Type: history.BlockToolCall, ID: "c2", Name: "read", Input: json.RawMessage(`{"filePath":"artifact://abc123"}`)},
			}},
			{Seq: 3, Role: history.RoleTool, ToolCallID: "c1", ToolName: "read", Content: text("package foo\n\nfunc TestFoo(t *testing.T) {}\n")},
			{Seq: 4, Role: history.RoleTool, ToolCallID: "c2", ToolName: "read", Content: text("the artifact's bytes, already stored")},
			{Seq: 5, Role: history.RoleAssistant, Content: []history.Block{
				{Type: history.BlockText, Text: "Running the tests."},
				{Type: history.BlockToolCall, ID: "c3", Name: "bash", Input: json.RawMessage(`{"command":"go test ./pkg/foo/"}`)},
			}},
			{Seq: 6, Role: history.RoleTool, ToolCallID: "c3", ToolName: "bash", IsError: true, Content: []history.Block{
				{Type: history.BlockText, Text: "--- FAIL: TestFoo"},
				{Type: history.BlockJSON, JSON: json.RawMessage(`{"exit_code":1}`)},
			}},
			{Seq: 7, Role: history.RoleAssistant, Content: text("The test fails because the fixture is missing; I will add it next.")},
		},
		MaxSummaryBytes: 4096,
		Timeout:         5 * time.Second,
	}
}

// cloneRequest deep-copies a Request, so a test can check that nothing in
// the original changed.
func cloneRequest(r Request) Request {
	c := r
	c.Tools = slices.Clone(r.Tools)
	for i := range c.Tools {
		c.Tools[i].InputSchema = slices.Clone(c.Tools[i].InputSchema)
	}
	c.Messages = slices.Clone(r.Messages)[:0]
	for _, m := range r.Messages {
		blocks := slices.Clone(m.Content)[:0]
		for _, b := range m.Content {
			b.Input = slices.Clone(b.Input)
			b.JSON = slices.Clone(b.JSON)
			blocks = append(blocks, b)
		}
		m.Content = blocks
		if m.Usage != nil {
			u := *m.Usage
			m.Usage = &u
		}
		c.Messages = append(c.Messages, m)
	}
	c.ArtifactReadTools = slices.Clone(r.ArtifactReadTools)
	return c
}
