package engine

import (
	"context"
	"math"
	"testing"

	"github.com/ctxd/ctxd/checkpoint"
)

// rawOf is ctxd's uncalibrated estimate of session id's whole context.
func rawOf(t *testing.T, h *harness, id string) uint64 {
	t.Helper()
	s, err := h.e.lock(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer s.mu.Unlock()
	return s.rawTokens()
}

// TestOverflowFiguresCorrectTheSession: the provider's count of a refused
// request corrects the session's estimate at once, a window it names that
// is smaller than the session's becomes the session's (learned), both are
// recorded with a diagnostic and kept across a restart, and a later
// reported usage takes over the correction.
func TestOverflowFiguresCorrectTheSession(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	h := newHarness(t, testConfig(), dir)
	h.create("s", 60000)
	h.append("s", user(words(3000)), assistant(words(500)), user(words(3000)))
	raw := rawOf(t, h, "s")
	count := raw * 2 // the provider counts twice what ctxd estimates
	in, err := h.e.ObserveOverflow(ctx, "s", Overflow{Count: count, Limit: 40000})
	if err != nil {
		t.Fatal(err)
	}
	if in.ContextLimit != 40000 || in.WindowSource != WindowLearned || in.Threshold != 28000 {
		t.Errorf("window %d (%s), threshold %d; want 40000 learned, 28000", in.ContextLimit, in.WindowSource, in.Threshold)
	}
	if in.Tokens < count || in.Tokens > count+2 {
		t.Errorf("estimate after the overflow %d, want the provider's count %d", in.Tokens, count)
	}
	if ev := h.events("s", checkpoint.KindDiagnostic); len(ev) != 1 {
		t.Errorf("%d diagnostic events, want 1 overflow_observed", len(ev))
	}
	// A window the provider names that is larger than the session's
	// changes nothing of the window.
	if in, _ := h.e.ObserveOverflow(ctx, "s", Overflow{Limit: 900000}); in.ContextLimit != 40000 {
		t.Errorf("a larger named window replaced the learned one: %d", in.ContextLimit)
	}
	h.Close()

	h = newHarness(t, testConfig(), dir)
	defer h.Close()
	in, err = h.e.Session(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if in.ContextLimit != 40000 || in.WindowSource != WindowLearned || in.Tokens < count || in.Tokens > count+2 {
		t.Errorf("after a restart: window %d (%s), estimate %d (want 40000 learned, %d)", in.ContextLimit, in.WindowSource, in.Tokens, count)
	}
	// The next usage is the provider's newest word.
	h.append("s", withUsage(assistant(words(10)), raw, 10))
	if in, _ := h.e.Session(ctx, "s"); in.Tokens > raw+100 {
		t.Errorf("after a reported usage of %d the estimate is %d", raw, in.Tokens)
	}
}

// TestCheckpointFiguresInOneUnit: a compaction's tokens before (the
// provider's reported usage) and after (an estimate) are in the same
// unit: the after figure starts from the provider's count of the whole
// request it last reported, less ctxd's estimate of what the compaction
// removed — not ctxd's estimate of everything times the model's generic
// factor (which made 20,749 → 24,672 out of a compaction that shrank the
// request).
func TestCheckpointFiguresInOneUnit(t *testing.T) {
	h := newHarness(t, testConfig(), t.TempDir())
	defer h.Close()
	h.create("s", 20000)
	h.append("s", user(words(200)), assistant(words(50)), user(words(3000)))
	raw := rawOf(t, h, "s")
	reported := raw * 3 / 4 // the provider counts fewer tokens than ctxd
	h.append("s", withUsage(assistant(words(3000)), reported, 3000), user("go on"))
	res, err := h.e.Compact(context.Background(), "s", "manual", true)
	if err != nil || res.Checkpoint == nil {
		t.Fatalf("compact: %v", err)
	}
	cp := res.Checkpoint
	// The provider's count, moved by ctxd's estimate of what changed since
	// (the model's factor is 1 here).
	after := rawOf(t, h, "s")
	want := int64(reported) + int64(after) - int64(raw)
	if d := math.Abs(float64(int64(cp.TokensAfter)-want)) / float64(want); d > 0.03 {
		t.Errorf("tokens after %d, want %d (the provider's %d for an estimate of %d, the context now estimated at %d)", cp.TokensAfter, want, reported, raw, after)
	}
	if cp.TokensAfter >= cp.TokensBefore {
		t.Errorf("checkpoint %d → %d tokens", cp.TokensBefore, cp.TokensAfter)
	}
}

// TestCompactDeeperRetainsNothing: the deeper overflow compaction keeps no
// message but the requests carried beside the summary.
func TestCompactDeeperRetainsNothing(t *testing.T) {
	h := newHarness(t, testConfig(), t.TempDir())
	defer h.Close()
	h.create("s", 200000)
	for range 6 {
		h.append("s", user(words(300)), assistant(words(300)))
	}
	h.append("s", user("the newest task"))
	res, err := h.e.CompactDeeper(context.Background(), "s")
	if err != nil || res.Checkpoint == nil {
		t.Fatalf("compact deeper: %v", err)
	}
	if res.Checkpoint.FirstRetainedSeq != 0 || res.Checkpoint.Reason != "overflow" {
		t.Errorf("checkpoint retains from %d (reason %s), want nothing retained", res.Checkpoint.FirstRetainedSeq, res.Checkpoint.Reason)
	}
	a := h.context("s")
	if n := len(a.Messages); n > 3 {
		t.Errorf("%d messages after a deeper compaction, want the summary and the carried requests", n)
	}
}

// TestOverflowWithoutFiguresLearnsFromUsage: a refusal that names no window
// (the Responses API's) teaches the largest request the provider accepted,
// by its reported usage, as the window of a session that had none.
func TestOverflowWithoutFiguresLearnsFromUsage(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	h := newHarness(t, testConfig(), dir)
	if _, err := h.e.CreateSession(ctx, CreateParams{ID: "s", Model: "gpt-9-mystery", Provider: ProviderOpenAI}); err != nil {
		t.Fatal(err)
	}
	h.append("s", user(words(2000)), withUsage(assistant(words(100)), 12000, 100), user(words(2000)))
	in, err := h.e.ObserveOverflow(ctx, "s", Overflow{})
	if err != nil {
		t.Fatal(err)
	}
	if in.WindowSource != WindowLearned || in.ContextLimit != 12000 {
		t.Errorf("window %d (%s), want 12000 learned from the usage", in.ContextLimit, in.WindowSource)
	}
	// The provider then accepts a larger request: that is a lower bound
	// of its window too, and the window learned rises to it, restart or
	// not. A window the provider named is never raised so.
	h.append("s", withUsage(assistant(words(100)), 12600, 100))
	if in, _ := h.e.Session(ctx, "s"); in.WindowSource != WindowLearned || in.ContextLimit != 12600 {
		t.Errorf("after a 12,600-token request was accepted: window %d (%s), want 12600 learned", in.ContextLimit, in.WindowSource)
	}
	h.Close()
	h = newHarness(t, testConfig(), dir)
	defer h.Close()
	if in, _ := h.e.Session(ctx, "s"); in.WindowSource != WindowLearned || in.ContextLimit != 12600 {
		t.Errorf("after a restart: window %d (%s), want 12600 learned", in.ContextLimit, in.WindowSource)
	}
}
