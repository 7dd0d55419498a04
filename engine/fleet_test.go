package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/natsstore"
	"github.com/ctxd/ctxd/natsstore/natstest"
	"github.com/ctxd/ctxd/summarizer"
	"github.com/ctxd/ctxd/trigger"
)

// node is one ctxd node of a fleet (docs/design.md §9): an engine on the NATS
// store with the shared compaction queue.
type node struct {
	e      *Engine
	st     *natsstore.Store
	q      *natsstore.Queue
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

var fleetN atomic.Int64

// newNode starts a node on the cluster's fleet prefix with R3 streams.
func newNode(t testing.TB, c *natstest.Cluster, prefix string, cfg config.Config, ackWait time.Duration) *node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), natstest.Scale(30*time.Second))
	defer cancel()
	st, err := natstest.OpenStore(c, natsstore.Options{Prefix: prefix, Replicas: 3, AckWait: ackWait, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	secret, err := st.Secret(ctx)
	if err != nil {
		t.Fatal(err)
	}
	arts, err := st.Artifacts(secret)
	if err != nil {
		t.Fatal(err)
	}
	q, err := st.Queue(2)
	if err != nil {
		t.Fatal(err)
	}
	sum := summarizer.New(summarizer.Options{Logger: quietLogger(), RetryWaitMin: time.Millisecond, RetryWaitMax: 5 * time.Millisecond})
	e, err := New(Options{Config: cfg, Log: st.Log(), Artifacts: arts, Summarizer: sum, Pool: q, Shared: true, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	n := &node{e: e, st: st, q: q, done: make(chan struct{})}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	t.Cleanup(n.stop)
	return n
}

// run starts taking compaction jobs.
func (n *node) run() {
	go func() { _ = n.q.Run(n.ctx); close(n.done) }()
}

// stop shuts the node down (idempotent).
func (n *node) stop() {
	n.cancel()
	select {
	case <-n.done:
	case <-time.After(30 * time.Second):
	}
	_ = n.st.Close()
}

// kill cuts the node off as a crash would: the connection drops before
// anything is handed back.
func (n *node) kill() {
	n.st.Conn().Close()
	n.cancel()
}

func fleetCluster(t *testing.T) (*natstest.Cluster, string) {
	t.Helper()
	c, err := natstest.Shared()
	if err != nil {
		t.Fatal(err)
	}
	return c, fmt.Sprintf("fleet%d", fleetN.Add(1))
}

// runningPair starts two nodes of a fresh fleet on the shared cluster,
// with the test configuration and a one-minute ack wait, both taking
// compaction jobs.
func runningPair(t *testing.T) (a, b *node) {
	t.Helper()
	c, prefix := fleetCluster(t)
	a = newNode(t, c, prefix, testConfig(), time.Minute)
	b = newNode(t, c, prefix, testConfig(), time.Minute)
	a.run()
	b.run()
	return a, b
}

// contextBytes is the assembled context as JSON: what an agent receives.
func contextBytes(t *testing.T, n *node, id string) []byte {
	t.Helper()
	a, err := n.e.Context(context.Background(), id, ContextOptions{NoPreSend: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFleetTwoNodesServeOneSession: two nodes on one R3 cluster serve one
// session alternately — appends from both, each node catching up on the
// other's — and assemble byte-identical contexts after every step; a
// compaction asked on one node is run once by the fleet: one checkpoint,
// seen by both.
func TestFleetTwoNodesServeOneSession(t *testing.T) {
	a, b := runningPair(t)
	ctx := context.Background()
	if _, err := a.e.CreateSession(ctx, CreateParams{ID: "s", Model: "test-model", ContextLimit: 20000, System: "You are a test agent."}); err != nil {
		t.Fatal(err)
	}
	nodes := []*node{a, b}
	for i := range 12 {
		n := nodes[i%2]
		msgs := []history.Message{user(fmt.Sprintf("step %d: %s", i, words(800))), assistant(fmt.Sprintf("done %d", i))}
		res, err := n.e.Append(ctx, "s", msgs)
		if err != nil {
			t.Fatalf("append %d on node %d: %v", i, i%2, err)
		}
		if want := uint64(2*i + 1); res.FirstSeq != want {
			t.Fatalf("append %d on node %d got seq %d, want %d", i, i%2, res.FirstSeq, want)
		}
		ca, cb := contextBytes(t, a, "s"), contextBytes(t, b, "s")
		if !bytes.Equal(ca, cb) {
			t.Fatalf("after append %d the nodes' contexts differ:\n%s\n%s", i, ca, cb)
		}
	}
	// Both nodes append at once: one wins each position, the other
	// reloads and retries; nothing is lost.
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			for j := range 5 {
				if _, err := n.e.Append(ctx, "s", []history.Message{user(fmt.Sprintf("race %d-%d", i, j)), assistant("ok")}); err != nil {
					t.Errorf("racing append on node %d: %v", i, err)
				}
			}
		})
	}
	wg.Wait()
	ca, cb := contextBytes(t, a, "s"), contextBytes(t, b, "s")
	if !bytes.Equal(ca, cb) {
		t.Fatalf("after racing appends the contexts differ")
	}
	var got Assembled
	_ = json.Unmarshal(ca, &got)
	if len(got.Messages) != 24+20 || got.LastSeq != 44 {
		t.Fatalf("context has %d messages, last seq %d; want 44 and 44", len(got.Messages), got.LastSeq)
	}

	res, err := b.e.Compact(ctx, "s", trigger.Manual, true)
	if err != nil || res.Checkpoint == nil {
		t.Fatalf("compact on node b: %+v %v", res, err)
	}
	for _, n := range nodes {
		cps, err := n.e.Checkpoints(ctx, "s")
		if err != nil || len(cps) != 1 {
			t.Fatalf("checkpoints: %d %v; want 1", len(cps), err)
		}
	}
	ca, cb = contextBytes(t, a, "s"), contextBytes(t, b, "s")
	if !bytes.Equal(ca, cb) {
		t.Fatalf("after the compaction the contexts differ:\n%s\n%s", ca, cb)
	}
	_ = json.Unmarshal(ca, &got)
	if got.CheckpointSeq != res.Checkpoint.Seq {
		t.Fatalf("node a serves checkpoint %d, want %d", got.CheckpointSeq, res.Checkpoint.Seq)
	}
	// Appends go on from either node after the checkpoint.
	if _, err := a.e.Append(ctx, "s", []history.Message{user("after"), assistant("ok")}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(contextBytes(t, a, "s"), contextBytes(t, b, "s")) {
		t.Fatal("after the last append the contexts differ")
	}
}

// TestFleetNodeDiesMidCompaction: node a takes a compaction job and dies
// while its (slow) summarizer call runs; JetStream redelivers the job to
// node b after the default ack wait (30 s), b compacts within 60 s of the
// death, and the session has exactly one checkpoint.
func TestFleetNodeDiesMidCompaction(t *testing.T) {
	c, prefix := fleetCluster(t)
	slow := newFakeAnthropic(t, okSummary("slow summary never sent"))
	slow.release = make(chan struct{}) // never released: the node dies first
	fast := newFakeAnthropic(t, okSummary("## Goal\nSummary by node b: the session's task, the files it read and changed, the commands it ran and their outcome, and what is left to do next."))
	cfgA, cfgB := testConfig(), testConfig()
	cfgA.Summarizer.Bindings = []config.Binding{slow.binding()}
	cfgB.Summarizer.Bindings = []config.Binding{fast.binding()}
	a := newNode(t, c, prefix, cfgA, 0) // storage.nats.ack_wait_ms's default
	b := newNode(t, c, prefix, cfgB, 0)
	ctx := context.Background()
	if _, err := a.e.CreateSession(ctx, CreateParams{ID: "s", Model: "test-model", ContextLimit: 20000, System: "You are a test agent."}); err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		if _, err := a.e.Append(ctx, "s", []history.Message{user(fmt.Sprintf("step %d: %s", i, words(1200))), assistant("ok")}); err != nil {
			t.Fatal(err)
		}
	}
	a.run() // only a takes jobs for now
	if _, err := a.e.Compact(ctx, "s", trigger.Manual, false); err != nil {
		t.Fatal(err)
	}
	select {
	case <-slow.received:
	case <-time.After(30 * time.Second):
		t.Fatal("node a never called its summarizer")
	}
	a.kill()
	killed := time.Now()
	b.run()

	deadline := time.Now().Add(60 * time.Second)
	for fast.count() == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if fast.count() == 0 {
		t.Fatal("the job was not redelivered to node b")
	}
	var cps int
	for time.Now().Before(deadline) {
		list, err := b.e.Checkpoints(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		if cps = len(list); cps > 0 {
			if list[0].Binding != "fake" {
				t.Fatalf("checkpoint by binding %q", list[0].Binding)
			}
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if cps == 0 {
		t.Fatal("node b did not finish the compaction within 60 s of node a's death")
	}
	t.Logf("redelivered to node b and checkpointed %v after node a died", time.Since(killed).Round(time.Millisecond))
	time.Sleep(2 * time.Second) // no second run turns up
	list, err := b.e.Checkpoints(ctx, "s")
	if err != nil || len(list) != 1 || slow.count() != 1 || fast.count() != 1 {
		t.Fatalf("%d checkpoints (%v), summarizer calls a %d b %d; want 1, 1, 1", len(list), err, slow.count(), fast.count())
	}
	ctxB := contextBytes(t, b, "s")
	if !bytes.Contains(ctxB, []byte("Summary by node b:")) {
		t.Fatalf("node b's context lacks the summary: %s", ctxB)
	}
}

// TestFleetLoadDuringOtherNodesCompaction: a node loading a session while
// another node is compacting it (compaction_started, no end yet) writes no
// compaction_failed "restart" into the shared log: the
// compaction is the other node's, and a dead node's job is redelivered.
func TestFleetLoadDuringOtherNodesCompaction(t *testing.T) {
	a, b := runningPair(t)
	ctx := context.Background()
	if _, err := a.e.CreateSession(ctx, CreateParams{ID: "s", Model: "test-model", ContextLimit: 20000}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.e.Append(ctx, "s", []history.Message{user("q"), assistant("a")}); err != nil {
		t.Fatal(err)
	}
	// Node a is in the middle of a compaction of s.
	if _, err := a.st.Log().Append(ctx, "s", []checkpoint.Event{{Kind: checkpoint.KindCompactionStarted, Data: json.RawMessage(`{"reason":"auto","snapshot_seq":2}`)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.e.Session(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	var kinds []checkpoint.Kind
	if err := b.e.Events(ctx, "s", 1, false, func(ev checkpoint.Event) error {
		kinds = append(kinds, ev.Kind)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, k := range kinds {
		if k == checkpoint.KindCompactionFailed {
			t.Fatalf("loading on node b recorded a compaction failure: %v", kinds)
		}
	}
	if len(kinds) == 0 || kinds[len(kinds)-1] != checkpoint.KindCompactionStarted {
		t.Fatalf("events %v, want the other node's compaction_started last", kinds)
	}
}

// TestFleetCleanStopHandsBack: a node stopped cleanly (SIGTERM) during a
// compaction hands the job back: the log says "handback", not a
// failure counted toward the circuit ("consecutive").
func TestFleetCleanStopHandsBack(t *testing.T) {
	c, prefix := fleetCluster(t)
	slow := newFakeAnthropic(t, okSummary("slow summary never sent"))
	slow.release = make(chan struct{}) // never released: the node stops first
	cfg := testConfig()
	cfg.Summarizer.Bindings = []config.Binding{slow.binding()}
	a := newNode(t, c, prefix, cfg, time.Minute)
	b := newNode(t, c, prefix, testConfig(), time.Minute)
	defer b.run() // its stop waits for its queue
	ctx := context.Background()
	if _, err := a.e.CreateSession(ctx, CreateParams{ID: "s", Model: "test-model", ContextLimit: 20000}); err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		if _, err := a.e.Append(ctx, "s", []history.Message{user(fmt.Sprintf("step %d: %s", i, words(1200))), assistant("ok")}); err != nil {
			t.Fatal(err)
		}
	}
	a.run()
	if _, err := a.e.Compact(ctx, "s", trigger.Manual, false); err != nil {
		t.Fatal(err)
	}
	select {
	case <-slow.received:
	case <-time.After(30 * time.Second):
		t.Fatal("node a never called its summarizer")
	}
	a.stop()
	var failed []map[string]any
	if err := b.e.Events(ctx, "s", 1, false, func(ev checkpoint.Event) error {
		if ev.Kind == checkpoint.KindCompactionFailed {
			var d map[string]any
			_ = json.Unmarshal(ev.Data, &d)
			failed = append(failed, d)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(failed) != 1 || failed[0]["reason"] != "handback" || failed[0]["consecutive"] != nil {
		t.Fatalf("compaction_failed events %v, want one with reason handback and no consecutive count", failed)
	}
}

// TestFleetPreSendWaitIsBounded (docs/decisions.md "A pre-send read waits
// at most one round of the pool"): on the fleet's shared queue, with both
// workers of the only running node busy on slow summaries and two more
// jobs queued behind them, a pre-send read whose context is over the window
// is answered at once, uncompacted, saying its compaction is queued behind
// others — as on one node — instead of waiting for the backlog; its job
// stays queued and runs once the workers free.
func TestFleetPreSendWaitIsBounded(t *testing.T) {
	c, prefix := fleetCluster(t)
	f := newFakeAnthropic(t, okSummary("## Goal\nA test summary."))
	release := make(chan struct{})
	f.release = release
	cfg := testConfig()
	cfg.ContextCompaction.KeepRecentTokens = 0
	cfg.Summarizer.Bindings = []config.Binding{f.binding()}
	a := newNode(t, c, prefix, cfg, time.Minute)
	defer close(release)
	ctx := context.Background()
	small := func(id string) {
		if _, err := a.e.CreateSession(ctx, CreateParams{ID: id, Model: "test-model", ContextLimit: 200000}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.e.Append(ctx, id, []history.Message{user("hello " + words(50)), assistant("hi " + words(50)), user("more " + words(50)), assistant("ok " + words(50))}); err != nil {
			t.Fatal(err)
		}
	}
	a.run()
	for _, id := range []string{"busy1", "busy2"} {
		small(id)
		if _, err := a.e.Compact(ctx, id, trigger.Manual, false); err != nil {
			t.Fatal(err)
		}
		select {
		case <-f.received:
		case <-time.After(natstest.Scale(30 * time.Second)):
			t.Fatalf("%s's compaction never reached the summarizer", id)
		}
	}
	for _, id := range []string{"bg1", "bg2"} {
		small(id)
		if _, err := a.e.Compact(ctx, id, trigger.Manual, false); err != nil {
			t.Fatal(err)
		}
	}

	if _, err := a.e.CreateSession(ctx, CreateParams{ID: "agent", Model: "test-model", ContextLimit: 40000}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.e.Append(ctx, "agent", []history.Message{user("go")}); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		in, err := a.e.Session(ctx, "agent")
		if err != nil {
			t.Fatal(err)
		}
		if in.Tokens > in.ContextLimit {
			break
		}
		cid := fmt.Sprintf("c%d", i)
		if _, err := a.e.Append(ctx, "agent", []history.Message{calls(cid), result(cid, words(600))}); err != nil {
			t.Fatal(err)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, natstest.Scale(20*time.Second))
	defer cancel()
	start := time.Now()
	got, err := a.e.Context(rctx, "agent", ContextOptions{})
	waited := time.Since(start)
	if err != nil {
		t.Fatalf("pre-send read after %v: %v", waited, err)
	}
	if got.Compacted || !strings.Contains(got.Diagnostic, "queued behind others") {
		t.Fatalf("after %v: compacted %v, diagnostic %q", waited, got.Compacted, got.Diagnostic)
	}
	if bound := natstest.Scale(3 * time.Second); waited > bound {
		t.Fatalf("the pre-send read waited %v (bound %v)", waited, bound)
	}
	fs, err := a.q.Fleet(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fs.Held != 2 || fs.Backlog != 3 {
		t.Fatalf("fleet queue %+v: want 2 held (the busy jobs) and 3 queued (bg1, bg2, agent)", fs)
	}
	t.Logf("answered in %v; fleet queue %+v", waited.Round(time.Millisecond), fs)
}

// TestFleetListingsAgree: a session every node has in memory is changed
// through one node — appends, then a compaction — and each node's listing
// and Session describe it alike (messages, tokens, last seq, checkpoints)
// right after, without anything else touching it there (docs/design.md §9).
func TestFleetListingsAgree(t *testing.T) {
	c, prefix := fleetCluster(t)
	f := newFakeAnthropic(t, okSummary("## Goal\nA test summary."))
	cfg := testConfig()
	cfg.Summarizer.Bindings = []config.Binding{f.binding()}
	nodes := []*node{newNode(t, c, prefix, cfg, time.Minute), newNode(t, c, prefix, cfg, time.Minute), newNode(t, c, prefix, cfg, time.Minute)}
	for _, n := range nodes {
		n.run()
	}
	ctx := context.Background()
	a := nodes[0].e
	if _, err := a.CreateSession(ctx, CreateParams{ID: "s", Model: "test-model", ContextLimit: 20000}); err != nil {
		t.Fatal(err)
	}
	view := func(n *node) (listed, shown string) {
		t.Helper()
		page, _, err := n.e.ListSessionPage(ctx, "", 10)
		if err != nil || len(page) != 1 {
			t.Fatalf("listing: %d sessions, %v", len(page), err)
		}
		in, err := n.e.Session(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		f := func(in Info) string {
			return fmt.Sprintf("messages %d active %d tokens %d last_seq %d checkpoints %d", in.Messages, in.ActiveMessages, in.Tokens, in.LastSeq, in.Checkpoints)
		}
		return f(page[0]), f(in)
	}
	step := func(what string) {
		t.Helper()
		want, _ := view(nodes[0])
		for i, n := range nodes {
			listed, shown := view(n)
			if listed != want || shown != want {
				t.Fatalf("after %s: node %d lists %q and shows %q; node 0 lists %q", what, i, listed, shown, want)
			}
		}
	}
	step("creation") // every node has the session in memory from here on
	for i := range 6 {
		if _, err := a.Append(ctx, "s", []history.Message{user(fmt.Sprintf("step %d: %s", i, words(1200))), assistant("ok")}); err != nil {
			t.Fatal(err)
		}
	}
	step("appends through node 0")
	if _, err := a.Compact(ctx, "s", trigger.Manual, true); err != nil {
		t.Fatal(err)
	}
	step("a compaction through node 0")
	if _, err := nodes[2].e.Append(ctx, "s", []history.Message{user("from node 2"), assistant("ok")}); err != nil {
		t.Fatal(err)
	}
	step("an append through node 2")
}

// TestFleetLiveNodeKeepsItsJob: a compaction that runs longer than the
// ack wait on a live node stays there — the node renews its claim (an
// in-progress acknowledgement every ack_wait/4) — every node's Session
// says it runs meanwhile, and no other node runs it too: one summarizer
// call, one checkpoint.
func TestFleetLiveNodeKeepsItsJob(t *testing.T) {
	c, prefix := fleetCluster(t)
	slow := newFakeAnthropic(t, okSummary("Summary by node a."))
	release := make(chan struct{})
	slow.release = release
	other := newFakeAnthropic(t, okSummary("Summary by node b."))
	cfgA, cfgB := testConfig(), testConfig()
	cfgA.Summarizer.Bindings = []config.Binding{slow.binding()}
	cfgB.Summarizer.Bindings = []config.Binding{other.binding()}
	const ackWait = 2 * time.Second
	a := newNode(t, c, prefix, cfgA, ackWait)
	b := newNode(t, c, prefix, cfgB, ackWait)
	ctx := context.Background()
	if _, err := a.e.CreateSession(ctx, CreateParams{ID: "s", Model: "test-model", ContextLimit: 20000}); err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		if _, err := a.e.Append(ctx, "s", []history.Message{user(fmt.Sprintf("step %d: %s", i, words(1200))), assistant("ok")}); err != nil {
			t.Fatal(err)
		}
	}
	a.run()
	if _, err := a.e.Compact(ctx, "s", trigger.Manual, false); err != nil {
		t.Fatal(err)
	}
	select {
	case <-slow.received:
	case <-time.After(natstest.Scale(30 * time.Second)):
		t.Fatal("node a never called its summarizer")
	}
	b.run()
	time.Sleep(3 * ackWait) // the summarizer call outlives the ack wait
	// Every node says the compaction runs, not that the session is idle.
	for name, n := range map[string]*node{"a": a, "b": b} {
		if in, err := n.e.Session(ctx, "s"); err != nil || in.Compaction != "running" {
			t.Errorf("node %s shows compaction %q (%v) while node a runs it", name, in.Compaction, err)
		}
	}
	close(release)
	deadline := time.Now().Add(natstest.Scale(30 * time.Second))
	for {
		list, err := a.e.Checkpoints(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		if len(list) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no checkpoint after the summarizer answered")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(ackWait)
	list, err := b.e.Checkpoints(ctx, "s")
	if err != nil || len(list) != 1 || slow.count() != 1 || other.count() != 0 {
		t.Fatalf("%d checkpoints (%v), summarizer calls a %d b %d; want 1, 1, 0", len(list), err, slow.count(), other.count())
	}
}
