package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// The answers of the fake Anthropic provider: the real Messages API bodies
// of a context-length error (400), of an overload (529) and a success.
const (
	bodyPromptTooLong = `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 200251 tokens > 200000 maximum"}}`
	bodyOverloaded    = `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`
	bodySuccess       = `{"id":"msg_ctxbench","type":"message","role":"assistant","model":"claude-haiku-4-5",` +
		`"content":[{"type":"text","text":"## Goal\nReplay a recorded agent session under load.\n\n## State\nctxbench is appending; nothing is broken.\n\n## Files and artifacts\nNone.\n\n## Decisions\nNone.\n\n## Errors and fixes\nNone.\n\n## Reasoning to carry forward\nNone.\n\n## Next steps\nContinue the replay."}],` +
		`"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":%d,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":64}}`
	// statusOverloaded is Anthropic's "overloaded" status.
	statusOverloaded = 529
)

// fakeProvider is an Anthropic Messages endpoint on loopback that answers
// compaction requests after a set latency, failing a set share of them.
type fakeProvider struct {
	latency       time.Duration
	contextLength float64 // share answered 400 prompt too long
	overloaded    float64 // share answered 529

	srv  *http.Server
	ln   net.Listener
	wg   sync.WaitGroup
	done chan struct{}

	mu  sync.Mutex
	rnd *rand.Rand

	// Counters of answers given.
	calls, tooLong, overloads, successes atomic.Int64
}

// startFake listens on 127.0.0.1 (a free port) and serves until close.
func startFake(latency time.Duration, contextLength, overloaded float64, seed uint64) (*fakeProvider, error) {
	if contextLength < 0 || overloaded < 0 || contextLength+overloaded > 1 {
		return nil, fmt.Errorf("--context-length-rate and --overloaded-rate must be ≥ 0 with a sum ≤ 1, got %g and %g", contextLength, overloaded)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fake provider: %w", err)
	}
	f := &fakeProvider{
		latency: latency, contextLength: contextLength, overloaded: overloaded,
		ln: ln, done: make(chan struct{}), rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/messages", f.messages)
	// net/http's own complaints go through slog as warn records, as the
	// daemon's do.
	f.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(slog.Default().Handler(), slog.LevelWarn)}
	f.wg.Go(func() { _ = f.srv.Serve(ln) })
	return f, nil
}

// URL is the base_url of the fake provider.
func (f *fakeProvider) URL() string { return "http://" + f.ln.Addr().String() }

// close stops the server; requests still sleeping return at once.
func (f *fakeProvider) close() {
	close(f.done)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := f.srv.Shutdown(ctx); err != nil {
		_ = f.srv.Close()
	}
	f.wg.Wait()
}

// draw picks the answer of one call.
func (f *fakeProvider) draw() float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rnd.Float64()
}

func (f *fakeProvider) messages(w http.ResponseWriter, r *http.Request) {
	n, _ := io.Copy(io.Discard, r.Body)
	f.calls.Add(1)
	if f.latency > 0 {
		t := time.NewTimer(f.latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		case <-f.done:
			t.Stop()
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	x := f.draw()
	switch {
	case x < f.contextLength:
		f.tooLong.Add(1)
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, bodyPromptTooLong)
	case x < f.contextLength+f.overloaded:
		f.overloads.Add(1)
		w.WriteHeader(statusOverloaded)
		_, _ = io.WriteString(w, bodyOverloaded)
	default:
		f.successes.Add(1)
		_, _ = fmt.Fprintf(w, bodySuccess, n/4)
	}
}

// ProviderStats counts the fake provider's answers.
type ProviderStats struct {
	// Calls is every request; Success, ContextLength (400 prompt is too
	// long) and Overloaded (529) split it by answer.
	Calls         int64 `json:"calls"`
	Success       int64 `json:"success"`
	ContextLength int64 `json:"context_length_errors"`
	Overloaded    int64 `json:"overloaded_errors"`
}

func (f *fakeProvider) stats() ProviderStats {
	return ProviderStats{Calls: f.calls.Load(), Success: f.successes.Load(), ContextLength: f.tooLong.Load(), Overloaded: f.overloads.Load()}
}
