package workers

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// startPool runs a pool until the test ends. done is closed when Run has
// returned; runErr is its result.
func startPool(t *testing.T, opts Options) (p *Pool, cancel context.CancelFunc, done <-chan struct{}) {
	t.Helper()
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	finished := make(chan struct{})
	go func() {
		if err := p.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
		close(finished)
	}()
	t.Cleanup(func() { cancel(); <-finished })
	return p, cancel, finished
}

func TestNewRejectsBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"size 0", Options{Size: 0, Queue: 1}},
		{"queue 0", Options{Size: 1, Queue: 0}},
		{"negative", Options{Size: -1, Queue: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.opts); err == nil {
				t.Fatal("New accepted", tc.opts)
			}
		})
	}
}

func TestSubmitRunsAndReturnsResult(t *testing.T) {
	p, _, _ := startPool(t, Options{Size: 2, Queue: 4})
	want := errors.New("boom")
	tk, err := p.Submit("s1", func(context.Context) error { return want })
	if err != nil {
		t.Fatal(err)
	}
	if got := tk.Err(); !errors.Is(got, want) {
		t.Fatalf("Err = %v, want %v", got, want)
	}
}

func TestSecondRequestForSessionJoinsTheRunningOne(t *testing.T) {
	p, _, _ := startPool(t, Options{Size: 2, Queue: 4})
	release := make(chan struct{})
	started := make(chan struct{})
	var runs atomic.Int32
	fn := func(context.Context) error {
		runs.Add(1)
		close(started)
		<-release
		return nil
	}
	first, err := p.Submit("s1", fn)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	second, err := p.Submit("s1", func(context.Context) error { runs.Add(1); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if !second.Joined || first.Joined {
		t.Fatalf("Joined: first %v second %v, want false true", first.Joined, second.Joined)
	}
	close(release)
	if err := second.Err(); err != nil {
		t.Fatal(err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("ran %d jobs, want 1", n)
	}
	// Once finished, the session can be compacted again.
	third, err := p.Submit("s1", func(context.Context) error { runs.Add(1); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if third.Joined {
		t.Fatal("a job after the first finished joined it")
	}
	if err := third.Err(); err != nil {
		t.Fatal(err)
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("ran %d jobs, want 2", n)
	}
}

func TestQueueFullRejectsInsteadOfGrowing(t *testing.T) {
	p, _, _ := startPool(t, Options{Size: 1, Queue: 2})
	release := make(chan struct{})
	started := make(chan struct{})
	block := func(context.Context) error { <-release; return nil }
	if _, err := p.Submit("running", func(ctx context.Context) error { close(started); return block(ctx) }); err != nil {
		t.Fatal(err)
	}
	<-started // the worker holds it; the queue is empty again
	for i := range 2 {
		if _, err := p.Submit(fmt.Sprintf("q%d", i), block); err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
	}
	if st := p.Stats(); st.Queued != 2 || st.Running != 1 {
		t.Fatalf("Stats = %+v, want 2 queued 1 running", st)
	}
	if _, err := p.Submit("overflow", block); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("Submit on a full queue = %v, want ErrQueueFull", err)
	}
	// Joining a queued session is not a new job and still works.
	if tk, err := p.Submit("q0", block); err != nil || !tk.Joined {
		t.Fatalf("join queued: %v joined=%v", err, tk != nil && tk.Joined)
	}
	close(release)
}

func TestOneJobPerSessionAtATime(t *testing.T) {
	p, _, _ := startPool(t, Options{Size: 4, Queue: 64})
	var inFlight, maxInFlight atomic.Int32
	fn := func(context.Context) error {
		n := inFlight.Add(1)
		for {
			m := maxInFlight.Load()
			if n <= m || maxInFlight.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(time.Millisecond) // widen the window for overlap, not a timing assertion
		inFlight.Add(-1)
		return nil
	}
	var tickets []*Ticket
	for range 50 {
		tk, err := p.Submit("same", fn)
		if err != nil {
			t.Fatal(err)
		}
		tickets = append(tickets, tk)
	}
	for _, tk := range tickets {
		if err := tk.Err(); err != nil {
			t.Fatal(err)
		}
	}
	if m := maxInFlight.Load(); m != 1 {
		t.Fatalf("%d jobs of one session ran at once, want 1", m)
	}
}

func TestShutdownDrainsRunningJobs(t *testing.T) {
	p, cancel, done := startPool(t, Options{Size: 1, Queue: 4, DrainTimeout: time.Minute})
	started := make(chan struct{})
	release := make(chan struct{})
	running, err := p.Submit("a", func(ctx context.Context) error {
		close(started)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	<-started
	queued, err := p.Submit("b", func(context.Context) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	// Run waits for the running job, which is still not cancelled.
	select {
	case <-done:
		t.Fatal("Run returned before the running job finished")
	case <-running.Done():
		t.Fatal("running job finished before release")
	default:
	}
	close(release)
	<-done
	if err := running.Err(); err != nil {
		t.Fatalf("running job: %v, want nil (drained)", err)
	}
	// The queued job either ran before the workers stopped or was abandoned.
	if err := queued.Err(); err != nil && !errors.Is(err, ErrClosed) {
		t.Fatalf("queued job: %v", err)
	}
	if _, err := p.Submit("c", func(context.Context) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Submit after shutdown = %v, want ErrClosed", err)
	}
}

func TestShutdownCancelsJobsPastTheDrainDeadline(t *testing.T) {
	p, cancel, done := startPool(t, Options{Size: 1, Queue: 1, DrainTimeout: 0})
	started := make(chan struct{})
	tk, err := p.Submit("stuck", func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	<-started
	cancel()
	<-done
	if err := tk.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("stuck job: %v, want context.Canceled", err)
	}
}

func TestPanickingJobBecomesAnError(t *testing.T) {
	p, _, _ := startPool(t, Options{Size: 1, Queue: 1})
	tk, err := p.Submit("p", func(context.Context) error { panic("bad") })
	if err != nil {
		t.Fatal(err)
	}
	if err := tk.Err(); err == nil {
		t.Fatal("panic was not reported")
	}
	// The pool still works.
	tk, err = p.Submit("p", func(context.Context) error { return nil })
	if err != nil || tk.Err() != nil {
		t.Fatalf("pool broken after panic: %v", err)
	}
}

func TestWaitReturnsContextErrorWithoutCancellingTheJob(t *testing.T) {
	p, _, _ := startPool(t, Options{Size: 1, Queue: 1})
	release := make(chan struct{})
	tk, err := p.Submit("w", func(context.Context) error { <-release; return nil })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := tk.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
	close(release)
	if err := tk.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestActiveReportsTheQueuedOrRunningJob(t *testing.T) {
	p, _, _ := startPool(t, Options{Size: 1, Queue: 1})
	if p.Active("s") != nil {
		t.Fatal("Active before any job")
	}
	release := make(chan struct{})
	tk, err := p.Submit("s", func(context.Context) error { <-release; return nil })
	if err != nil {
		t.Fatal(err)
	}
	a := p.Active("s")
	if a == nil || a.Done() != tk.Done() {
		t.Fatal("Active does not return the running job")
	}
	close(release)
	<-tk.Done()
	if p.Active("s") != nil {
		t.Fatal("Active after the job finished")
	}
}
