package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/trigger"
	"github.com/ctxd/ctxd/wire/anthropic"
)

// fill appends a history of about tokens tokens to session id: rounds of a
// user prompt, a tool call and a ~2,000-token result, an answer.
func fill(b testing.TB, h *harness, id string, tokens int) int {
	n := 0
	for i := 0; n*2050 < tokens; i++ {
		cid := fmt.Sprintf("call%d", i)
		if _, err := h.e.Append(context.Background(), id, []history.Message{
			user(fmt.Sprintf("step %d", i)), calls(cid), result(cid, words(2000)), assistant(fmt.Sprintf("step %d done", i)),
		}); err != nil {
			b.Fatal(err)
		}
		n++
	}
	return n * 4
}

// BenchmarkCompactionOverhead measures everything a compaction of a
// 200k-token history costs the daemon besides the summarizer's own latency:
// snapshot, request assembly and rendering, the HTTP exchange with a fake
// provider that answers at once, retention, the checkpoint transaction and
// the events. The metric pct_of_2s_call is that time as a share of a 2 s
// summarizer call (goal ≤ 1 %).
func BenchmarkCompactionOverhead(b *testing.B) {
	f := newFakeAnthropic(&testing.T{}, okSummary("## Goal\nbenchmark summary"))
	defer f.srv.Close()
	// The fake signals each request on a channel of 100: drain it, or the
	// 101st summarizer call blocks in the handler and b.N > 100 hangs.
	drained := make(chan struct{})
	defer close(drained)
	go func() {
		for {
			select {
			case <-f.received:
			case <-drained:
				return
			}
		}
	}()
	b.Setenv("CTXD_TEST_KEY", "test-key")
	cfg := testConfig()
	cfg.Summarizer.Bindings = []config.Binding{f.binding()}
	h := newHarness(&testing.T{}, cfg, b.TempDir())
	defer h.Close()
	var total time.Duration
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		id := fmt.Sprintf("s%d", i)
		h.create(id, 1000000)
		fill(b, h, id, 200000)
		b.StartTimer()
		start := time.Now()
		if _, err := h.e.Compact(context.Background(), id, trigger.Manual, true); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
	}
	per := total / time.Duration(b.N)
	b.ReportMetric(float64(per)/float64(2*time.Second)*100, "pct_of_2s_call")
}

// BenchmarkPreSendDecision2000 measures the pre-send check of a
// 2,000-message session: the estimate and the trigger decision (goal ≤ 1 ms).
func BenchmarkPreSendDecision2000(b *testing.B) {
	h := newHarness(&testing.T{}, testConfig(), "")
	defer h.Close()
	h.create("s", 10000000)
	for i := range 500 {
		cid := fmt.Sprintf("call%d", i)
		if _, err := h.e.Append(context.Background(), "s", []history.Message{user("go"), calls(cid), result(cid, "ok"), assistant("done")}); err != nil {
			b.Fatal(err)
		}
	}
	s, _ := h.e.session(context.Background(), "s")
	for b.Loop() {
		s.mu.Lock()
		tokens, _ := s.estimate()
		d := trigger.Decide(trigger.PreSend, s.triggerState(tokens))
		s.mu.Unlock()
		if d.Compact {
			b.Fatal("compacting")
		}
	}
}

// benchSession200k returns a harness with a 200k-token session "s" and its
// stored messages.
func benchSession200k(b *testing.B) (*harness, []history.Message) {
	h := newHarness(&testing.T{}, testConfig(), b.TempDir())
	h.create("s", 10000000)
	fill(b, h, "s", 200000)
	a, err := h.e.Context(context.Background(), "s", ContextOptions{NoPreSend: true})
	if err != nil {
		b.Fatal(err)
	}
	return h, a.Messages
}

// BenchmarkContextAssembly measures GET /context's work for a 200k-token
// session — the pre-send check, assembly and JSON encoding — in the
// canonical and the Anthropic format, against the baseline of JSON-encoding
// the same messages from memory (goal ≤ 2×).
func BenchmarkContextAssembly(b *testing.B) {
	h, msgs := benchSession200k(b)
	defer h.Close()
	b.Run("baseline-json", func(b *testing.B) {
		for b.Loop() {
			out, err := json.Marshal(msgs)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(out)))
		}
	})
	b.Run("canonical", func(b *testing.B) {
		for b.Loop() {
			a, err := h.e.Context(context.Background(), "s", ContextOptions{})
			if err != nil {
				b.Fatal(err)
			}
			out, err := json.Marshal(a)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(out)))
		}
	})
	b.Run("anthropic", func(b *testing.B) {
		for b.Loop() {
			a, err := h.e.Context(context.Background(), "s", ContextOptions{})
			if err != nil {
				b.Fatal(err)
			}
			out, err := json.Marshal(anthropic.Render(a.System, a.Tools, a.Messages))
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(out)))
		}
	})
}

// BenchmarkAppendToLargeSession measures one append (a user prompt and an
// answer) to a session of ~2,000 messages holding ~1.5 MB of tool results,
// with the default layers on: the per-append cost that must not grow with
// the history (docs/performance.md "Profiles").
func BenchmarkAppendToLargeSession(b *testing.B) {
	cfg := config.Defaults()
	cfg.Offload.Enabled = false
	cfg.ContextCompaction.Auto = false
	h := newHarness(&testing.T{}, cfg, b.TempDir())
	defer h.Close()
	h.create("s", 100000000)
	for i := range 500 {
		cid := fmt.Sprintf("call%d", i)
		if _, err := h.e.Append(context.Background(), "s", []history.Message{user("go"), calls(cid), result(cid, words(600)), assistant("done")}); err != nil {
			b.Fatal(err)
		}
	}
	msgs := []history.Message{user("next step"), assistant("ok")}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := h.e.Append(context.Background(), "s", msgs); err != nil {
			b.Fatal(err)
		}
	}
}
