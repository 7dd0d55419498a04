package engine

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/trigger"
)

// Compaction behaviour no other test covered: the failure count's reset,
// the original messages kept across a compaction, the agent file's timeout.

// A successful compaction resets the run's failure count (docs/design.md §5.5).
func TestSuccessResetsTheFailureCount(t *testing.T) {
	path := writeAgentFile(t, "+++\n[limits\n+++\nbroken front matter\n")
	cfg := testConfig()
	cfg.Compaction.AgentFile = path
	cfg.ContextCompaction.KeepRecentTokens = 0
	h := newHarness(t, cfg, "")
	h.create("s", 200000)
	h.append("s", user("hello "+words(100)), assistant("hi "+words(100)), user("next "+words(100)), assistant("ok "+words(100)), user("more"))
	for range 2 {
		if _, err := h.e.Compact(context.Background(), "s", trigger.Manual, true); err == nil {
			t.Fatal("a compaction with a broken agent file succeeded")
		}
	}
	if info, _ := h.e.Session(context.Background(), "s"); info.Failures != 2 {
		t.Fatalf("failures = %d, want 2", info.Failures)
	}
	if err := os.WriteFile(path, []byte("+++\n[limits]\ntimeout_ms = 5000\n+++\nSummarize.\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.e.SetConfig(cfg) // reload: the agent file is read again
	if _, err := h.e.Compact(context.Background(), "s", trigger.Manual, true); err != nil {
		t.Fatal(err)
	}
	if info, _ := h.e.Session(context.Background(), "s"); info.Failures != 0 || info.LastError != "" {
		t.Fatalf("after a success: failures %d, last error %q", info.Failures, info.LastError)
	}
}

// A compaction leaves the event log untouched: every original message stays
// readable, byte for byte, after it (docs/design.md §5.6).
func TestOriginalsSurviveACompaction(t *testing.T) {
	cfg := testConfig()
	cfg.ContextCompaction.KeepRecentTokens = 0
	h := newHarness(t, cfg, "")
	h.create("s", 200000)
	h.append("s", user("go "+words(300)), calls("a"), result("a", words(500)), assistant("done "+words(50)),
		user("next "+words(200)), calls("b"), result("b", words(500)), assistant("ok"), user("more"))
	before := h.events("s", checkpoint.KindMessage)
	res, err := h.e.Compact(context.Background(), "s", trigger.Manual, true)
	if err != nil {
		t.Fatal(err)
	}
	if a := h.context("s"); len(a.Messages) >= len(before) || a.CheckpointSeq != res.Checkpoint.Seq {
		t.Fatalf("the context holds %d of %d messages after the compaction", len(a.Messages), len(before))
	}
	after := h.events("s", checkpoint.KindMessage)
	if len(after) != len(before) {
		t.Fatalf("%d message events after the compaction, %d before", len(after), len(before))
	}
	for i := range before {
		a, _ := history.Encode(*before[i].Message)
		b, _ := history.Encode(*after[i].Message)
		if before[i].Seq != after[i].Seq || string(a) != string(b) {
			t.Fatalf("message %d changed: %s → %s", before[i].Seq, a, b)
		}
	}
	if info, _ := h.e.Session(context.Background(), "s"); info.Messages != uint64(len(before)) {
		t.Fatalf("info counts %d messages, the log %d", info.Messages, len(before))
	}
}

// callMetrics records summarizer calls.
type callMetrics struct {
	noMetrics
	mu    sync.Mutex
	calls []summarizerCall
}

type summarizerCall struct {
	binding string
	d       time.Duration
	err     error
}

func (m *callMetrics) SummarizerCall(binding string, d time.Duration, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, summarizerCall{binding, d, err})
}

// The engine gives the summarizer the agent file's limits.timeout_ms
// (docs/design.md §5.4): a provider that never answers fails that binding after
// 300 ms, not the flat 180 s.
func TestAgentFileTimeoutReachesTheSummarizer(t *testing.T) {
	f := newFakeAnthropic(t, okSummary("## Goal\nnever sent"))
	f.release = make(chan struct{}) // never closed: the provider hangs
	path := writeAgentFile(t, "+++\n[limits]\ntimeout_ms = 300\n+++\nSummarize.\n")
	cfg := testConfig()
	cfg.Compaction.AgentFile = path
	cfg.ContextCompaction.KeepRecentTokens = 0
	cfg.Summarizer.Bindings = []config.Binding{f.binding()}
	h := newHarness(t, cfg, "")
	rec := &callMetrics{}
	h.e.metrics = rec
	h.create("s", 200000)
	h.append("s", user("hello "+words(100)), assistant("hi "+words(100)), user("next "+words(100)), assistant("ok "+words(100)), user("more"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, _ = h.e.Compact(ctx, "s", trigger.Manual, true)
	if ctx.Err() != nil {
		t.Fatal("the compaction outlived the agent file's timeout by a minute")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var fake *summarizerCall
	for i := range rec.calls {
		if rec.calls[i].binding == "fake" {
			fake = &rec.calls[i]
		}
	}
	if fake == nil || fake.err == nil || fake.d < 300*time.Millisecond || fake.d > 30*time.Second {
		t.Fatalf("the fake binding's call: %+v", fake)
	}
}
