package engine

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/trigger"
	"github.com/ctxd/ctxd/workers"
)

// TestPreSendTakesTheQueuePlaceOfBackgroundWork (issue 19 §1): with the
// only worker busy and the queue full of a background compaction, an
// agent's pre-send check is not refused: its compaction takes the
// background job's place, runs next, and the context comes back
// compacted. The background job yields (it never runs).
func TestPreSendTakesTheQueuePlaceOfBackgroundWork(t *testing.T) {
	f := newFakeAnthropic(t, okSummary("## Goal\nA test summary."))
	release := make(chan struct{})
	f.release = release
	cfg := testConfig()
	cfg.ContextCompaction.KeepRecentTokens = 0 // summarize everything
	cfg.Summarizer.Bindings = []config.Binding{f.binding()}
	h := newHarnessPool(t, cfg, "", workers.Options{Size: 1, Queue: 1, DrainTimeout: time.Second})
	ctx := context.Background()
	for _, id := range []string{"busy", "bg"} {
		h.create(id, 200000)
		h.append(id, user("hello "+words(50)), assistant("hi "+words(50)), user("more "+words(50)), assistant("ok "+words(50)))
	}
	if _, err := h.e.Compact(ctx, "busy", trigger.Manual, false); err != nil {
		t.Fatal(err)
	}
	<-f.received // busy's summarizer call holds the only worker
	if _, err := h.e.Compact(ctx, "bg", trigger.Manual, false); err != nil {
		t.Fatal(err)
	}
	if _, err := h.e.Compact(ctx, "busy", trigger.Manual, false); err != nil {
		t.Fatalf("joining the running job: %v", err)
	}

	h.create("agent", 12000) // over the window: it cannot be sent as it is
	h.append("agent", user("go"), calls("a", "b", "c", "d"),
		result("a", words(4000)), result("b", words(4000)), result("c", words(4000)), result("d", words(4000)), assistant("done"))
	got := make(chan *Assembled, 1)
	go func() {
		a, err := h.e.Context(ctx, "agent", ContextOptions{})
		if err != nil {
			t.Error(err)
		}
		got <- a
	}()
	// The pre-send compaction is queued in bg's place.
	deadline := time.Now().Add(10 * time.Second)
	for h.pool.Active("agent") == nil {
		if time.Now().After(deadline) {
			t.Fatal("the pre-send compaction was not queued")
		}
		time.Sleep(time.Millisecond)
	}
	if h.pool.Active("bg") != nil {
		t.Fatal("the background job still holds its queue place")
	}
	close(release)
	a := <-got
	if a == nil || !a.Compacted || a.Diagnostic != "" {
		t.Fatalf("pre-send context: compacted %v, diagnostic %q", a != nil && a.Compacted, a.Diagnostic)
	}
	if cps, _ := h.e.Checkpoints(ctx, "bg"); len(cps) != 0 {
		t.Fatal("the yielded background compaction ran")
	}
}

// TestPreSendDoesNotWaitBehindOtherSessions (issue 19 §1): with every
// worker busy, a pre-send check whose context still fits the window (below
// the midpoint between threshold and window) is answered at once with the
// uncompacted context and a diagnostic; its compaction stays queued as
// background work (no waited slot) and runs when a worker frees.
func TestPreSendDoesNotWaitBehindOtherSessions(t *testing.T) {
	f := newFakeAnthropic(t, okSummary("## Goal\nA test summary."))
	release := make(chan struct{})
	f.release = release
	cfg := testConfig()
	cfg.ContextCompaction.KeepRecentTokens = 0 // summarize everything
	cfg.Summarizer.Bindings = []config.Binding{f.binding()}
	h := newHarnessPool(t, cfg, "", workers.Options{Size: 1, Queue: 4, DrainTimeout: time.Second})
	ctx := context.Background()
	h.create("busy", 200000)
	h.append("busy", user("hello "+words(50)), assistant("hi "+words(50)), user("more "+words(50)), assistant("ok "+words(50)))
	if _, err := h.e.Compact(ctx, "busy", trigger.Manual, false); err != nil {
		t.Fatal(err)
	}
	<-f.received // the only worker is busy

	h.create("agent", 40000)
	h.append("agent", user("go"))
	for i := 0; ; i++ {
		in, err := h.e.Session(ctx, "agent")
		if err != nil {
			t.Fatal(err)
		}
		if in.Tokens >= in.Threshold {
			if mid := in.Threshold + (in.ContextLimit-in.Threshold)/2; in.Tokens >= mid {
				t.Fatalf("setup: %d tokens, past the midpoint %d", in.Tokens, mid)
			}
			break
		}
		id := fmt.Sprintf("c%d", i)
		h.append("agent", calls(id), result(id, words(600)))
	}
	start := time.Now()
	a, err := h.e.Context(ctx, "agent", ContextOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Compacted || !strings.Contains(a.Diagnostic, "queued behind others") {
		t.Fatalf("compacted %v, diagnostic %q", a.Compacted, a.Diagnostic)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the pre-send check waited %v", d)
	}
	tk := h.pool.Active("agent")
	if tk == nil {
		t.Fatal("the pre-send compaction is not queued")
	}
	if st := h.pool.Stats(); st.QueuedWaited != 0 {
		t.Fatalf("queue %+v: a fitting read's compaction took a waited slot", st)
	}
	close(release)
	if err := tk.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if cps, _ := h.e.Checkpoints(ctx, "agent"); len(cps) != 1 {
		t.Fatalf("%d checkpoints after the queued compaction ran", len(cps))
	}
}

// TestPreSendWaitsAtMostOneRoundOfThePool (issue 19 §1, docs/decisions.md
// "A pre-send read waits at most one round of the pool"): with the only
// worker busy and one compaction another request waits on already queued,
// a pre-send check whose context is over the window does not queue behind
// it: it is answered at once, uncompacted,
// with a diagnostic, and its compaction stays queued as background work —
// behind the waited one, and still run.
func TestPreSendWaitsAtMostOneRoundOfThePool(t *testing.T) {
	f := newFakeAnthropic(t, okSummary("## Goal\nA test summary."))
	release := make(chan struct{})
	f.release = release
	cfg := testConfig()
	cfg.ContextCompaction.KeepRecentTokens = 0 // summarize everything
	cfg.Summarizer.Bindings = []config.Binding{f.binding()}
	h := newHarnessPool(t, cfg, "", workers.Options{Size: 1, Queue: 4, DrainTimeout: time.Second})
	ctx := context.Background()
	for _, id := range []string{"busy", "waited"} {
		h.create(id, 200000)
		h.append(id, user("hello "+words(50)), assistant("hi "+words(50)), user("more "+words(50)), assistant("ok "+words(50)))
	}
	if _, err := h.e.Compact(ctx, "busy", trigger.Manual, false); err != nil {
		t.Fatal(err)
	}
	<-f.received // the only worker is busy
	waitedDone := make(chan error, 1)
	go func() {
		_, err := h.e.Compact(ctx, "waited", trigger.Manual, true)
		waitedDone <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for h.pool.Stats().QueuedWaited != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the waited compaction was not queued")
		}
		time.Sleep(time.Millisecond)
	}

	h.create("agent", 40000)
	h.append("agent", user("go"))
	for i := 0; ; i++ {
		in, err := h.e.Session(ctx, "agent")
		if err != nil {
			t.Fatal(err)
		}
		if in.Tokens > in.ContextLimit {
			break
		}
		id := fmt.Sprintf("c%d", i)
		h.append("agent", calls(id), result(id, words(600)))
	}
	a, err := h.e.Context(ctx, "agent", ContextOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Compacted || !strings.Contains(a.Diagnostic, "1 compactions that requests wait on are queued ahead of it") {
		t.Fatalf("compacted %v, diagnostic %q", a.Compacted, a.Diagnostic)
	}
	tk := h.pool.Active("agent")
	if tk == nil {
		t.Fatal("the pre-send compaction is not queued")
	}
	if st := h.pool.Stats(); st.Queued != 2 || st.QueuedWaited != 1 {
		t.Fatalf("queue %+v, want the waited job and the agent's, as background", st)
	}
	close(release)
	if err := <-waitedDone; err != nil {
		t.Fatalf("the waited compaction: %v", err)
	}
	if err := tk.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if cps, _ := h.e.Checkpoints(ctx, "agent"); len(cps) != 1 {
		t.Fatalf("%d checkpoints after the queued compaction ran", len(cps))
	}
}

// TestPreSendWaitsWhenFewerThanAWorkerRoundAhead: the bound is the pool's
// size, not "anything queued": with two workers, one busy, the other busy
// too, and one waited compaction queued, a pre-send check over the window
// has one job ahead of it, fewer than two workers, so it waits and
// comes back compacted.
func TestPreSendWaitsWhenFewerThanAWorkerRoundAhead(t *testing.T) {
	f := newFakeAnthropic(t, okSummary("## Goal\nA test summary."))
	release := make(chan struct{})
	f.release = release
	cfg := testConfig()
	cfg.ContextCompaction.KeepRecentTokens = 0
	cfg.Summarizer.Bindings = []config.Binding{f.binding()}
	h := newHarnessPool(t, cfg, "", workers.Options{Size: 2, Queue: 4, DrainTimeout: time.Second})
	ctx := context.Background()
	for _, id := range []string{"busy1", "busy2", "waited"} {
		h.create(id, 200000)
		h.append(id, user("hello "+words(50)), assistant("hi "+words(50)), user("more "+words(50)), assistant("ok "+words(50)))
	}
	for _, id := range []string{"busy1", "busy2"} {
		if _, err := h.e.Compact(ctx, id, trigger.Manual, false); err != nil {
			t.Fatal(err)
		}
		<-f.received
	}
	waitedDone := make(chan error, 1)
	go func() {
		_, err := h.e.Compact(ctx, "waited", trigger.Manual, true)
		waitedDone <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for h.pool.Stats().QueuedWaited != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the waited compaction was not queued")
		}
		time.Sleep(time.Millisecond)
	}
	h.create("agent", 40000)
	h.append("agent", user("go"))
	for i := 0; ; i++ {
		in, err := h.e.Session(ctx, "agent")
		if err != nil {
			t.Fatal(err)
		}
		if in.Tokens > in.ContextLimit {
			break
		}
		id := fmt.Sprintf("c%d", i)
		h.append("agent", calls(id), result(id, words(600)))
	}
	got := make(chan *Assembled, 1)
	go func() {
		a, err := h.e.Context(ctx, "agent", ContextOptions{})
		if err != nil {
			t.Error(err)
		}
		got <- a
	}()
	for h.pool.Stats().QueuedWaited != 2 {
		if time.Now().After(deadline) {
			t.Fatal("the pre-send compaction was not queued as waited work")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case a := <-got:
		t.Fatalf("the pre-send check did not wait: compacted %v, diagnostic %q", a != nil && a.Compacted, a.Diagnostic)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	a := <-got
	if a == nil || !a.Compacted || a.Diagnostic != "" {
		t.Fatalf("pre-send context: compacted %v, diagnostic %q", a != nil && a.Compacted, a.Diagnostic)
	}
	if err := <-waitedDone; err != nil {
		t.Fatal(err)
	}
}

// fillUntil appends rounds of tool calls with 600-word results to session
// id until done holds for its estimate, and returns the last SessionInfo.
func fillUntil(t *testing.T, h *harness, id string, done func(tokens, threshold, limit uint64) bool) {
	t.Helper()
	ctx := context.Background()
	for i := 0; ; i++ {
		in, err := h.e.Session(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if done(uint64(in.Tokens), uint64(in.Threshold), uint64(in.ContextLimit)) {
			return
		}
		if i > 1000 {
			t.Fatalf("setup: %s never reached its size (%d tokens)", id, in.Tokens)
		}
		cid := fmt.Sprintf("c%d", i)
		h.append(id, calls(cid), result(cid, words(600)))
	}
}

// TestPreSendWaitedSlotsGoToOverWindowReads (issue 19 §1, docs/decisions.md
// "A pre-send read waits at most one round of the pool"): with both workers
// busy, a pre-send check past the midpoint but still within the window is
// served at once, uncompacted, and its compaction takes no waited slot;
// then two checks over the window both wait (0 and 1 waited jobs ahead,
// fewer than 2 workers: the fitting read's job is not counted) and come
// back compacted once the workers free.
func TestPreSendWaitedSlotsGoToOverWindowReads(t *testing.T) {
	f := newFakeAnthropic(t, okSummary("## Goal\nA test summary."))
	release := make(chan struct{})
	f.release = release
	cfg := testConfig()
	cfg.ContextCompaction.KeepRecentTokens = 0
	cfg.Summarizer.Bindings = []config.Binding{f.binding()}
	h := newHarnessPool(t, cfg, "", workers.Options{Size: 2, Queue: 8, DrainTimeout: time.Second})
	ctx := context.Background()
	for _, id := range []string{"busy1", "busy2"} {
		h.create(id, 200000)
		h.append(id, user("hello "+words(50)), assistant("hi "+words(50)), user("more "+words(50)), assistant("ok "+words(50)))
		if _, err := h.e.Compact(ctx, id, trigger.Manual, false); err != nil {
			t.Fatal(err)
		}
		<-f.received
	}
	h.create("fit", 40000)
	h.append("fit", user("go"))
	fillUntil(t, h, "fit", func(tok, thr, lim uint64) bool { return tok >= thr+(lim-thr)/2 })
	if in, _ := h.e.Session(ctx, "fit"); uint64(in.Tokens) > uint64(in.ContextLimit) {
		t.Fatalf("setup: fit has %d tokens, over its window %d", in.Tokens, in.ContextLimit)
	}
	for _, id := range []string{"over1", "over2"} {
		h.create(id, 40000)
		h.append(id, user("go"))
		fillUntil(t, h, id, func(tok, _, lim uint64) bool { return tok > lim })
	}

	start := time.Now()
	a, err := h.e.Context(ctx, "fit", ContextOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Compacted || !strings.Contains(a.Diagnostic, "no worker took it within") {
		t.Fatalf("fitting read: compacted %v, diagnostic %q", a.Compacted, a.Diagnostic)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the fitting read waited %v", d)
	}
	if st := h.pool.Stats(); st.QueuedWaited != 0 || h.pool.Active("fit") == nil {
		t.Fatalf("queue %+v, fit queued %v: want fit's compaction queued as background", st, h.pool.Active("fit") != nil)
	}

	got := make(chan *Assembled, 2)
	deadline := time.Now().Add(10 * time.Second)
	for i, id := range []string{"over1", "over2"} {
		go func() {
			a, err := h.e.Context(ctx, id, ContextOptions{})
			if err != nil {
				t.Error(err)
			}
			got <- a
		}()
		for h.pool.Stats().QueuedWaited != i+1 {
			if time.Now().After(deadline) {
				t.Fatalf("%s's compaction was not queued as waited work: %+v", id, h.pool.Stats())
			}
			time.Sleep(time.Millisecond)
		}
	}
	select {
	case a := <-got:
		t.Fatalf("an over-window read did not wait: compacted %v, diagnostic %q", a != nil && a.Compacted, a.Diagnostic)
	case <-time.After(300 * time.Millisecond): // past the fitting read's grace
	}
	close(release)
	for range 2 {
		a := <-got
		if a == nil || !a.Compacted || strings.Contains(a.Diagnostic, "exceeds the context window") {
			t.Fatalf("over-window read: compacted %v, diagnostic %q", a != nil && a.Compacted, a.Diagnostic)
		}
	}
	tk := h.pool.Active("fit")
	if tk != nil {
		if err := tk.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if cps, _ := h.e.Checkpoints(ctx, "fit"); len(cps) != 1 {
		t.Fatalf("fit: %d checkpoints after its queued compaction", len(cps))
	}
}
