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

// priorityPool is the set-up of the pool-priority tests (docs/decisions.md
// "A pre-send read waits at most one round of the pool"): a
// harness whose pool has the given workers and queue places, a fake
// provider whose summaries wait for release, and busy sessions whose
// compactions hold workers until release is closed.
type priorityPool struct {
	t       *testing.T
	h       *harness
	f       *fakeAnthropic
	release chan struct{}
}

// newPriorityPool starts the harness and, for each id of busy in turn,
// creates a small session and compacts it, returning once its summarizer
// call holds a worker.
func newPriorityPool(t *testing.T, pool workers.Options, busy ...string) *priorityPool {
	t.Helper()
	f := newFakeAnthropic(t, okSummary("## Goal\nA test summary."))
	p := &priorityPool{t: t, f: f, release: make(chan struct{})}
	f.release = p.release
	cfg := testConfig()
	cfg.ContextCompaction.KeepRecentTokens = 0 // summarize everything
	cfg.Summarizer.Bindings = []config.Binding{f.binding()}
	// The bound under test is the pre-send check's wait at the trigger:
	// speculative summaries off (with them on, a context that fits the
	// window waits for no summarizer call at all).
	cfg.ContextCompaction.PreparePercent = config.PrepareOff
	p.h = newHarnessPool(t, cfg, "", pool)
	for _, id := range busy {
		p.small(id)
		if _, err := p.h.e.Compact(context.Background(), id, trigger.Manual, false); err != nil {
			t.Fatal(err)
		}
		<-f.received
	}
	return p
}

// small creates session id with a 200,000-token window and four short
// messages: enough to compact, far from its threshold.
func (p *priorityPool) small(id string) {
	p.h.create(id, 200000)
	p.h.append(id, user("hello "+words(50)), assistant("hi "+words(50)), user("more "+words(50)), assistant("ok "+words(50)))
}

// agent creates session id with a 40,000-token window and fills it with
// rounds of tool calls until done holds for its estimate (fillUntil).
func (p *priorityPool) agent(id string, done func(tokens, threshold, limit uint64) bool) {
	p.h.create(id, 40000)
	p.h.append(id, user("go"))
	fillUntil(p.t, p.h, id, done)
}

// overWindow is agent's done for a session over its window.
func overWindow(tokens, _, limit uint64) bool { return tokens > limit }

// await polls cond every millisecond and fails the test with what when it
// does not hold within 10 s.
func (p *priorityPool) await(what string, cond func() bool) {
	p.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			p.t.Fatal(what)
		}
		time.Sleep(time.Millisecond)
	}
}

// waited compacts session id as a request that waits on the result does,
// in the background, and returns once the pool counts waitedAfter waited
// jobs; the channel receives the compaction's error.
func (p *priorityPool) waited(id string, waitedAfter int) <-chan error {
	p.t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := p.h.e.Compact(context.Background(), id, trigger.Manual, true)
		done <- err
	}()
	p.await("the waited compaction was not queued", func() bool { return p.h.pool.Stats().QueuedWaited == waitedAfter })
	return done
}

// contextAsync asks session id's context (a pre-send check) in the
// background; the channel receives it (nil on an error, which fails the
// test).
func (p *priorityPool) contextAsync(id string) <-chan *Assembled {
	got := make(chan *Assembled, 1)
	go func() {
		a, err := p.h.e.Context(context.Background(), id, ContextOptions{})
		if err != nil {
			p.t.Error(err)
		}
		got <- a
	}()
	return got
}

// checkpoints fails the test unless session id has want checkpoints.
func (p *priorityPool) checkpoints(id string, want int, what string) {
	p.t.Helper()
	if cps, _ := p.h.e.Checkpoints(context.Background(), id); len(cps) != want {
		p.t.Fatalf("%s: %d checkpoints of %s, want %d", what, len(cps), id, want)
	}
}

// TestPreSendTakesTheQueuePlaceOfBackgroundWork: with the
// only worker busy and the queue full of a background compaction, an
// agent's pre-send check is not refused: its compaction takes the
// background job's place, runs next, and the context comes back
// compacted. The background job yields (it never runs).
func TestPreSendTakesTheQueuePlaceOfBackgroundWork(t *testing.T) {
	p := newPriorityPool(t, workers.Options{Size: 1, Queue: 1, DrainTimeout: time.Second}, "busy")
	h, ctx := p.h, context.Background()
	p.small("bg")
	if _, err := h.e.Compact(ctx, "bg", trigger.Manual, false); err != nil {
		t.Fatal(err)
	}
	if _, err := h.e.Compact(ctx, "busy", trigger.Manual, false); err != nil {
		t.Fatalf("joining the running job: %v", err)
	}

	h.create("agent", 12000) // over the window: it cannot be sent as it is
	h.append("agent", user("go"), calls("a", "b", "c", "d"),
		result("a", words(4000)), result("b", words(4000)), result("c", words(4000)), result("d", words(4000)), assistant("done"))
	got := p.contextAsync("agent")
	// The pre-send compaction is queued in bg's place.
	p.await("the pre-send compaction was not queued", func() bool { return h.pool.Active("agent") != nil })
	if h.pool.Active("bg") != nil {
		t.Fatal("the background job still holds its queue place")
	}
	close(p.release)
	a := <-got
	if a == nil || !a.Compacted || a.Diagnostic != "" {
		t.Fatalf("pre-send context: compacted %v, diagnostic %q", a != nil && a.Compacted, a.Diagnostic)
	}
	p.checkpoints("bg", 0, "the yielded background compaction ran")
}

// TestPreSendDoesNotWaitBehindOtherSessions: with every
// worker busy, a pre-send check whose context still fits the window (below
// the midpoint between threshold and window) is answered at once with the
// uncompacted context and a diagnostic; its compaction stays queued as
// background work (no waited slot) and runs when a worker frees.
func TestPreSendDoesNotWaitBehindOtherSessions(t *testing.T) {
	p := newPriorityPool(t, workers.Options{Size: 1, Queue: 4, DrainTimeout: time.Second}, "busy")
	h, ctx := p.h, context.Background()
	p.agent("agent", func(tok, thr, _ uint64) bool { return tok >= thr })
	if in, _ := h.e.Session(ctx, "agent"); in.Tokens >= in.Threshold+(in.ContextLimit-in.Threshold)/2 {
		t.Fatalf("setup: %d tokens, past the midpoint %d", in.Tokens, in.Threshold+(in.ContextLimit-in.Threshold)/2)
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
	close(p.release)
	if err := tk.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	p.checkpoints("agent", 1, "after the queued compaction ran")
}

// TestPreSendWaitsAtMostOneRoundOfThePool (docs/decisions.md
// "A pre-send read waits at most one round of the pool"): with the only
// worker busy and one compaction another request waits on already queued,
// a pre-send check whose context is over the window does not queue behind
// it: it is answered at once, uncompacted,
// with a diagnostic, and its compaction stays queued as background work —
// behind the waited one, and still run.
func TestPreSendWaitsAtMostOneRoundOfThePool(t *testing.T) {
	p := newPriorityPool(t, workers.Options{Size: 1, Queue: 4, DrainTimeout: time.Second}, "busy")
	h, ctx := p.h, context.Background()
	p.small("waited")
	waitedDone := p.waited("waited", 1)

	p.agent("agent", overWindow)
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
	close(p.release)
	if err := <-waitedDone; err != nil {
		t.Fatalf("the waited compaction: %v", err)
	}
	if err := tk.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	p.checkpoints("agent", 1, "after the queued compaction ran")
}

// TestPreSendWaitsWhenFewerThanAWorkerRoundAhead: the bound is the pool's
// size, not "anything queued": with two workers, one busy, the other busy
// too, and one waited compaction queued, a pre-send check over the window
// has one job ahead of it, fewer than two workers, so it waits and
// comes back compacted.
func TestPreSendWaitsWhenFewerThanAWorkerRoundAhead(t *testing.T) {
	p := newPriorityPool(t, workers.Options{Size: 2, Queue: 4, DrainTimeout: time.Second}, "busy1", "busy2")
	h := p.h
	p.small("waited")
	waitedDone := p.waited("waited", 1)
	p.agent("agent", overWindow)
	got := p.contextAsync("agent")
	p.await("the pre-send compaction was not queued as waited work", func() bool { return h.pool.Stats().QueuedWaited == 2 })
	select {
	case a := <-got:
		t.Fatalf("the pre-send check did not wait: compacted %v, diagnostic %q", a != nil && a.Compacted, a.Diagnostic)
	case <-time.After(50 * time.Millisecond):
	}
	close(p.release)
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

// TestPreSendWaitedSlotsGoToOverWindowReads (docs/decisions.md
// "A pre-send read waits at most one round of the pool"): with both workers
// busy, a pre-send check past the midpoint but still within the window is
// served at once, uncompacted, and its compaction takes no waited slot;
// then two checks over the window both wait (0 and 1 waited jobs ahead,
// fewer than 2 workers: the fitting read's job is not counted) and come
// back compacted once the workers free.
func TestPreSendWaitedSlotsGoToOverWindowReads(t *testing.T) {
	p := newPriorityPool(t, workers.Options{Size: 2, Queue: 8, DrainTimeout: time.Second}, "busy1", "busy2")
	h, ctx := p.h, context.Background()
	p.agent("fit", func(tok, thr, lim uint64) bool { return tok >= thr+(lim-thr)/2 })
	if in, _ := h.e.Session(ctx, "fit"); uint64(in.Tokens) > uint64(in.ContextLimit) {
		t.Fatalf("setup: fit has %d tokens, over its window %d", in.Tokens, in.ContextLimit)
	}
	for _, id := range []string{"over1", "over2"} {
		p.agent(id, overWindow)
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

	var got []<-chan *Assembled
	for i, id := range []string{"over1", "over2"} {
		got = append(got, p.contextAsync(id))
		p.await(id+"'s compaction was not queued as waited work", func() bool { return h.pool.Stats().QueuedWaited == i+1 })
	}
	select {
	case a := <-got[0]:
		t.Fatalf("an over-window read did not wait: compacted %v, diagnostic %q", a != nil && a.Compacted, a.Diagnostic)
	case a := <-got[1]:
		t.Fatalf("an over-window read did not wait: compacted %v, diagnostic %q", a != nil && a.Compacted, a.Diagnostic)
	case <-time.After(300 * time.Millisecond): // past the fitting read's grace
	}
	close(p.release)
	for _, g := range got {
		a := <-g
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
	p.checkpoints("fit", 1, "after its queued compaction")
}
