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

// blockWorkers occupies every worker of p with a job that runs until the
// returned release is called.
func blockWorkers(t *testing.T, p *Pool, n int) (release func()) {
	t.Helper()
	gate := make(chan struct{})
	started := make(chan struct{}, n)
	for i := range n {
		if _, err := p.Submit(fmt.Sprintf("blocker-%d", i), func(context.Context) error {
			started <- struct{}{}
			<-gate
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		<-started
	}
	return func() { close(gate) }
}

// recorder returns a job that appends name to the shared order.
func recorder(order chan<- string, name string) Func {
	return func(context.Context) error { order <- name; return nil }
}

func TestWaitedJobsStartBeforeQueuedBackgroundOnes(t *testing.T) {
	p, _, _ := startPool(t, Options{Size: 1, Queue: 8})
	release := blockWorkers(t, p, 1)
	order := make(chan string, 8)
	for _, s := range []string{"b1", "b2"} {
		if _, err := p.Submit(s, recorder(order, s)); err != nil {
			t.Fatal(err)
		}
	}
	w, err := p.SubmitPriority("w1", Waited, recorder(order, "w1"))
	if err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Queued != 3 || st.QueuedWaited != 1 || st.Running != 1 {
		t.Fatalf("stats %+v", st)
	}
	release()
	if err := w.Err(); err != nil {
		t.Fatal(err)
	}
	got := []string{<-order, <-order, <-order}
	if fmt.Sprint(got) != "[w1 b1 b2]" {
		t.Fatalf("start order %v, want [w1 b1 b2]", got)
	}
}

func TestWaitedRequestTakesOverAQueuedBackgroundJob(t *testing.T) {
	p, _, _ := startPool(t, Options{Size: 1, Queue: 8})
	release := blockWorkers(t, p, 1)
	order := make(chan string, 8)
	if _, err := p.Submit("b1", recorder(order, "b1")); err != nil {
		t.Fatal(err)
	}
	bg, err := p.Submit("s", recorder(order, "s (background fn)"))
	if err != nil {
		t.Fatal(err)
	}
	w, err := p.SubmitPriority("s", Waited, recorder(order, "s (waited fn)"))
	if err != nil || !w.Joined {
		t.Fatalf("waited request: joined %v, %v", w != nil && w.Joined, err)
	}
	if st := p.Stats(); st.Queued != 2 || st.QueuedWaited != 1 {
		t.Fatalf("stats %+v", st)
	}
	release()
	if err := w.Err(); err != nil || bg.Err() != nil {
		t.Fatal(err, bg.Err())
	}
	got := []string{<-order, <-order}
	if fmt.Sprint(got) != "[s (background fn) b1]" {
		t.Fatalf("start order %v: the session's job should run once, first", got)
	}
}

func TestFullQueueRefusesBackgroundAndYieldsToWaited(t *testing.T) {
	p, _, _ := startPool(t, Options{Size: 1, Queue: 2})
	release := blockWorkers(t, p, 1)
	defer release()
	noop := func(context.Context) error { return nil }
	b1, err := p.Submit("b1", noop)
	if err != nil {
		t.Fatal(err)
	}
	b2, err := p.Submit("b2", noop)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Submit("b3", noop); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("background into a full queue: %v", err)
	}
	// A waited job takes the newest background job's place.
	if _, err := p.SubmitPriority("w1", Waited, noop); err != nil {
		t.Fatal(err)
	}
	if err := b2.Err(); !errors.Is(err, ErrYielded) {
		t.Fatalf("b2: %v, want ErrYielded", err)
	}
	if p.Active("b2") != nil {
		t.Fatal("a yielded job is still active")
	}
	if _, err := p.SubmitPriority("w2", Waited, noop); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b1.Done():
		if !errors.Is(b1.Err(), ErrYielded) {
			t.Fatalf("b1: %v", b1.Err())
		}
	default:
		t.Fatal("b1 should have yielded to w2")
	}
	// Full of waited jobs: refused, never grown.
	if _, err := p.SubmitPriority("w3", Waited, noop); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("waited into a queue full of waited jobs: %v", err)
	}
	if st := p.Stats(); st.Queued != 2 || st.QueuedWaited != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestUnwaitedJobGoesBackBehindWaitedOnes(t *testing.T) {
	p, _, _ := startPool(t, Options{Size: 1, Queue: 8})
	release := blockWorkers(t, p, 1)
	order := make(chan string, 8)
	if _, err := p.Submit("b1", recorder(order, "b1")); err != nil {
		t.Fatal(err)
	}
	d, err := p.SubmitPriority("d", Waited, recorder(order, "d"))
	if err != nil {
		t.Fatal(err)
	}
	j, err := p.SubmitPriority("d", Waited, nil) // a second waiter joins
	if err != nil || !j.Joined {
		t.Fatal(err)
	}
	if _, err := p.SubmitPriority("w", Waited, recorder(order, "w")); err != nil {
		t.Fatal(err)
	}
	p.Unwait(d)
	if st := p.Stats(); st.QueuedWaited != 2 {
		t.Fatalf("one waiter left: %+v", st)
	}
	p.Unwait(j)
	if st := p.Stats(); st.QueuedWaited != 1 || st.Queued != 3 {
		t.Fatalf("no waiter left: %+v", st)
	}
	release()
	if err := d.Err(); err != nil {
		t.Fatal(err)
	}
	got := []string{<-order, <-order, <-order}
	if fmt.Sprint(got) != "[w d b1]" {
		t.Fatalf("start order %v, want [w d b1]", got)
	}
}

// TestAheadCountsQueuedWaitedJobsBefore: Ahead is the number
// of Waited jobs queued before a job; a Background job or one a worker
// took has none, and an Unwait moves the job out of the count.
func TestAheadCountsQueuedWaitedJobsBefore(t *testing.T) {
	p, err := New(Options{Size: 2, Queue: 8})
	if err != nil {
		t.Fatal(err)
	}
	noop := func(context.Context) error { return nil }
	var tk []*Ticket
	for _, s := range []string{"a", "b", "c"} {
		x, err := p.SubmitPriority(s, Waited, noop)
		if err != nil {
			t.Fatal(err)
		}
		tk = append(tk, x)
	}
	bg, err := p.Submit("d", noop)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{0, 1, 2} {
		if n, q := p.Ahead(tk[i]); n != want || !q {
			t.Fatalf("Ahead(%s) = %d, %v; want %d, true", tk[i].Session, n, q, want)
		}
	}
	if n, q := p.Ahead(bg); n != 0 || !q {
		t.Fatalf("Ahead(background) = %d, %v; want 0, true", n, q)
	}
	p.Unwait(tk[1])
	if n, _ := p.Ahead(tk[2]); n != 1 {
		t.Fatalf("after b's Unwait, Ahead(c) = %d, want 1", n)
	}
	if n, q := p.Ahead(tk[1]); n != 0 || !q {
		t.Fatalf("Ahead(b) as background = %d, %v; want 0, true", n, q)
	}
	if p.Size() != 2 {
		t.Fatalf("Size() = %d", p.Size())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = p.Run(ctx); close(done) }()
	if err := tk[0].Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n, q := p.Ahead(tk[0]); n != 0 || q {
		t.Fatalf("Ahead of a job that ran = %d, %v; want 0, false", n, q)
	}
	cancel()
	<-done
}

// TestBackgroundFirstQueuesAheadOfBackgroundBehindWaited: a
// BackgroundFirst job starts after the queued Waited jobs and before the
// other Background ones, moves a queued Background job of its session to
// the front, is never counted by Ahead, and in a full queue takes the
// place of the newest Background job.
func TestBackgroundFirstQueuesAheadOfBackgroundBehindWaited(t *testing.T) {
	p, _, _ := startPool(t, Options{Size: 1, Queue: 3})
	release := blockWorkers(t, p, 1)
	order := make(chan string, 8)
	tickets := map[string]*Ticket{}
	for _, s := range []string{"b1", "b2"} {
		tk, err := p.Submit(s, recorder(order, s))
		if err != nil {
			t.Fatal(err)
		}
		tickets[s] = tk
	}
	if _, err := p.SubmitPriority("w", Waited, recorder(order, "w")); err != nil {
		t.Fatal(err)
	}
	j, err := p.SubmitPriority("b2", BackgroundFirst, nil)
	if err != nil || !j.Joined {
		t.Fatalf("joining b2: joined %v, %v", j != nil && j.Joined, err)
	}
	// The queue (3) is full: f takes the place of b1, the newest background
	// job once b2 moved to the front.
	f, err := p.SubmitPriority("f", BackgroundFirst, recorder(order, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if err := tickets["b1"].Err(); !errors.Is(err, ErrYielded) {
		t.Fatalf("b1: %v, want ErrYielded", err)
	}
	if st := p.Stats(); st.Queued != 3 || st.QueuedWaited != 1 {
		t.Fatalf("stats %+v, want w, f, b2 queued and only w waited", st)
	}
	if n, q := p.Ahead(f); n != 0 || !q {
		t.Fatalf("Ahead(f) = %d, %v; want 0, true", n, q)
	}
	if _, err := p.Submit("b3", recorder(order, "b3")); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("background job into a full queue: %v, want ErrQueueFull", err)
	}
	// g takes b2's place (the queue is [f b2] in background order).
	g, err := p.SubmitPriority("g", BackgroundFirst, recorder(order, "g"))
	if err != nil {
		t.Fatalf("a full queue with background work: %v", err)
	}
	if err := tickets["b2"].Err(); !errors.Is(err, ErrYielded) {
		t.Fatalf("b2: %v, want ErrYielded", err)
	}
	release()
	if err := f.Err(); err != nil {
		t.Fatal(err)
	}
	got := []string{<-order, <-order, <-order}
	if fmt.Sprint(got) != "[w g f]" {
		t.Fatalf("start order %v, want [w g f]", got)
	}
	if err := g.Err(); err != nil {
		t.Fatal(err)
	}
}
