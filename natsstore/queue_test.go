package natsstore_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/natsstore"
	"github.com/ctxd/ctxd/workers"
)

// TestQueueDedupAndRedelivery: a job queued twice at one position (by two
// nodes) is one job; the node running it dies without acknowledging; the
// job goes to the other node after AckWait and runs there once; the waiting
// node's ticket ends then.
func TestQueueDedupAndRedelivery(t *testing.T) {
	ctx := context.Background()
	c := sharedCluster(t)
	ackWait := func(o *natsstore.Options) { o.AckWait = 2 * time.Second }
	prefix := newPrefix("q")
	n1 := openOn(t, c, prefix, 3, ackWait)
	n2 := openOn(t, c, prefix, 3, ackWait)
	const id = "sess-q"
	if _, err := n1.Log().CreateSession(ctx, id, checkpoint.Meta{}); err != nil {
		t.Fatal(err)
	}
	q1, err := n1.Queue(1)
	if err != nil {
		t.Fatal(err)
	}
	q2, err := n2.Queue(1)
	if err != nil {
		t.Fatal(err)
	}
	var runs1, runs2 atomic.Int32
	started1 := make(chan struct{}, 1)
	q1.SetJobs(func(session, sig string) workers.Func {
		return func(ctx context.Context) error {
			runs1.Add(1)
			started1 <- struct{}{}
			<-ctx.Done() // a slow summarizer: the node dies before it answers
			return ctx.Err()
		}
	})
	q2.SetJobs(func(session, sig string) workers.Func {
		return func(ctx context.Context) error {
			if session != id || sig != "manual" {
				t.Errorf("job %q %q", session, sig)
			}
			runs2.Add(1)
			return nil
		}
	})
	t1, err := q1.SubmitJob(id, "manual", workers.Waited, nil)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := q1.SubmitJob(id, "manual", workers.Waited, nil); err != nil || !again.Joined {
		t.Fatalf("second submit on the same node: %+v %v", again, err)
	}
	t2, err := q2.SubmitJob(id, "manual", workers.Waited, nil) // same position: a duplicate
	if err != nil || !t2.Joined {
		t.Fatalf("submit on node 2 did not join: %+v %v", t2, err)
	}
	if q2.Active(id) == nil {
		t.Fatal("node 2 does not see its waited job as active")
	}

	ctx1, kill1 := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { q1.Run(ctx1) })
	select {
	case <-started1:
	case <-time.After(20 * time.Second):
		t.Fatal("node 1 never took the job")
	}
	select {
	case <-t2.Started(): // node 1's start note reached node 2
	case <-time.After(5 * time.Second):
		t.Fatal("node 2 did not learn the job started")
	}
	// A compaction asked at a later position while the job runs joins it:
	// one job per session in the fleet (docs/design.md §8a).
	if _, err := n2.Log().Append(ctx, id, []checkpoint.Event{{Kind: checkpoint.KindDiagnostic, Data: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	q2b, err := n2.Queue(1) // another node's queue, without Run
	if err != nil {
		t.Fatal(err)
	}
	t3, err := q2b.SubmitJob(id, "manual", workers.Waited, nil)
	if err != nil || !t3.Joined {
		t.Fatalf("a second job of the session while one runs: %+v %v", t3, err)
	}

	// Node 1 dies: its connection drops before it can hand the job back.
	n1.Conn().Close()
	kill1()
	wg.Wait()
	if t1.Err() == nil {
		t.Fatal("node 1's ticket ended without error though its node stopped")
	}

	ctx2, stop2 := context.WithCancel(ctx)
	defer stop2()
	wg.Go(func() { q2.Run(ctx2) })
	begin := time.Now()
	if err := t2.Wait(withTimeout(t, 30*time.Second)); err != nil {
		t.Fatalf("node 2's wait: %v", err)
	}
	if err := t3.Wait(withTimeout(t, 30*time.Second)); err != nil {
		t.Fatalf("the joined wait: %v", err)
	}
	if runs1.Load() != 1 || runs2.Load() != 1 {
		t.Fatalf("runs: node 1 %d, node 2 %d; want 1 and 1", runs1.Load(), runs2.Load())
	}
	t.Logf("redelivered and run on node 2 in %v", time.Since(begin).Round(time.Millisecond))
	stop2()
	wg.Wait()
}

func withTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
