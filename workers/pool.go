// Package workers owns the bounded compaction pool (docs/design.md §1, §8a): a
// fixed number of workers, a bounded queue that rejects instead of growing,
// at most one job per session at a time (a second request joins the first),
// and a graceful drain on shutdown. It knows nothing of providers.
//
// Jobs have a priority (docs/decisions.md "A pre-send read waits at most
// one round of the pool"): a job some request waits on (Waited: a
// pre-send check, a compaction asked for with wait=true, the proxy) starts
// before every queued Background job (a post-check's, nobody waiting), takes
// over a queued Background job of the same session, and, when the queue is
// full, takes the place of the newest queued Background job, which then
// ends with ErrYielded. Background work yields; waited work is refused only
// when the queue is full of waited work.
package workers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// ErrQueueFull is returned by Submit when the queue holds its bound of
// waiting jobs. Callers surface it as "unavailable"; the pool never grows.
var ErrQueueFull = errors.New("workers: compaction queue is full")

// ErrClosed is returned by Submit after Run has returned or begun to drain,
// and is the result of a queued job that never started before shutdown.
var ErrClosed = errors.New("workers: pool is shut down")

// ErrYielded is the result of a queued Background job that gave its place
// in a full queue to a Waited job; it never ran.
var ErrYielded = errors.New("workers: background job yielded its place to a job a request waits on")

// Priority orders queued jobs.
type Priority int

const (
	// Background is a job nobody waits on: it starts after every queued
	// Waited job and yields its queue place to one.
	Background Priority = iota
	// Waited is a job a request waits on.
	Waited
	// BackgroundFirst is a job a request would take if a worker is free but
	// will not wait for (a pre-send check whose context still fits the
	// window): it is queued as Background work, first among the
	// Background jobs (a queued Background job of the same session moves to
	// the front), and, like a Waited job, takes the place of the newest
	// queued Background job when the queue is full. It is never counted by
	// Ahead.
	BackgroundFirst
)

func (p Priority) String() string {
	switch p {
	case Waited:
		return "waited"
	case BackgroundFirst:
		return "background-first"
	}
	return "background"
}

// Func is the work of one job. Its context is cancelled when the pool's
// drain deadline passes during shutdown.
type Func func(ctx context.Context) error

// Ticket is a submitted job. Several Submit calls for the same session while
// its job is queued or running share one Ticket.
type Ticket struct {
	// Session is the key the job was submitted under.
	Session string
	// Joined reports, on the value returned to a caller, whether that call
	// joined a job already queued or running instead of creating one.
	Joined bool

	state *jobState
}

type jobState struct {
	started chan struct{} // closed when a worker takes the job
	done    chan struct{}
	err     error
	fn      Func
	key     string
	prio    Priority // guarded by Pool.mu
	// queued is true while the job waits to start (guarded by Pool.mu).
	queued bool
	// waiters counts the Waited requests for the job that have not let go
	// of it (Pool.Unwait); guarded by Pool.mu.
	waiters int
}

// Started is closed when a worker has taken the job (it is running or has
// run); a job that never ran (yielded, abandoned at shutdown) never closes
// it, so select on Done too.
func (t *Ticket) Started() <-chan struct{} { return t.state.started }

// Done is closed when the job has finished (or was abandoned at shutdown).
func (t *Ticket) Done() <-chan struct{} { return t.state.done }

// Err is the job's result; valid once Done is closed.
func (t *Ticket) Err() error {
	<-t.state.done
	return t.state.err
}

// Wait blocks until the job finishes or ctx ends, and returns the job's
// error, or ctx's error when ctx ended first (the job keeps running).
func (t *Ticket) Wait(ctx context.Context) error {
	select {
	case <-t.state.done:
		return t.state.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Options configure a Pool.
type Options struct {
	// Size is the number of jobs that run at once; at least 1.
	Size int
	// Queue bounds the jobs waiting to start; at least 1.
	Queue int
	// DrainTimeout bounds how long Run waits for running jobs once its
	// context is cancelled; after it, their contexts are cancelled and Run
	// waits for them to return. 0 cancels them at once.
	DrainTimeout time.Duration
}

// Pool is a bounded worker pool keyed by session. The zero value is not
// usable; create one with New and start it with Run.
type Pool struct {
	opts Options

	mu         sync.Mutex
	cond       *sync.Cond           // signalled when a job is queued or the pool closes
	waited     []*jobState          // queued Waited jobs, oldest first
	background []*jobState          // queued Background jobs, oldest first
	active     map[string]*jobState // queued or running, by session
	running    int
	closed     bool
	stopped    bool // workers take no more jobs
}

// New returns a pool with opts. It returns an error when Size or Queue is
// below 1.
func New(opts Options) (*Pool, error) {
	if opts.Size < 1 {
		return nil, fmt.Errorf("workers: size must be at least 1, got %d", opts.Size)
	}
	if opts.Queue < 1 {
		return nil, fmt.Errorf("workers: queue must be at least 1, got %d", opts.Queue)
	}
	p := &Pool{opts: opts, active: make(map[string]*jobState)}
	p.cond = sync.NewCond(&p.mu)
	return p, nil
}

// Submit queues fn as session's Background job: SubmitPriority(session,
// Background, fn).
func (p *Pool) Submit(session string, fn Func) (*Ticket, error) {
	return p.SubmitPriority(session, Background, fn)
}

// SubmitPriority queues fn as session's job with priority prio, or joins
// the job session already has queued or running (the returned Ticket then
// has Joined set and fn is not used); a Waited request raises a queued
// Background job of the session to Waited (it takes it over). Jobs are keyed
// by session alone so that running one twice is impossible (docs/design.md
// §8a). A BackgroundFirst job is queued (or a queued Background job of the
// session moved) first among the Background jobs. When the queue holds
// Queue jobs, a Waited or BackgroundFirst job takes the place of the newest
// queued Background job (which ends with ErrYielded); when there is none,
// or for a Background job, it returns ErrQueueFull. It returns
// ErrClosed once the pool is shutting down; it never blocks.
func (p *Pool) SubmitPriority(session string, prio Priority, fn Func) (*Ticket, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	if st, ok := p.active[session]; ok {
		if prio == Waited {
			st.waiters++
			if st.prio == Background {
				st.prio = Waited
				if st.queued {
					p.background = remove(p.background, st)
					p.waited = append(p.waited, st)
				}
			}
		} else if prio == BackgroundFirst && st.prio == Background && st.queued {
			p.background = append([]*jobState{st}, remove(p.background, st)...)
		}
		return &Ticket{Session: session, Joined: true, state: st}, nil
	}
	if len(p.waited)+len(p.background) >= p.opts.Queue {
		if prio == Background || len(p.background) == 0 {
			return nil, ErrQueueFull
		}
		last := p.background[len(p.background)-1]
		p.background = p.background[:len(p.background)-1]
		last.queued = false
		delete(p.active, last.key)
		last.err = ErrYielded
		close(last.done)
	}
	st := &jobState{started: make(chan struct{}), done: make(chan struct{}), fn: fn, key: session, prio: prio, queued: true}
	switch prio {
	case Waited:
		st.waiters = 1
		p.waited = append(p.waited, st)
	case BackgroundFirst:
		st.prio = Background
		p.background = append([]*jobState{st}, p.background...)
	default:
		p.background = append(p.background, st)
	}
	p.active[session] = st
	p.cond.Signal()
	return &Ticket{Session: session, state: st}, nil
}

// Unwait tells the pool that a Waited request for t's job (its own
// SubmitPriority or a join) no longer waits on it. When no request waits
// any more and the job has not started, it becomes Background work again,
// first among the background jobs (it was asked for before them): a
// request that does wait goes ahead of it. Unwait once per
// Waited request, at most.
func (p *Pool) Unwait(t *Ticket) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := t.state
	if st.waiters > 0 {
		st.waiters--
	}
	if st.waiters == 0 && st.prio == Waited && st.queued {
		st.prio = Background
		p.waited = remove(p.waited, st)
		p.background = append([]*jobState{st}, p.background...)
	}
}

func remove(q []*jobState, st *jobState) []*jobState {
	for i, x := range q {
		if x == st {
			return append(q[:i], q[i+1:]...)
		}
	}
	return q
}

// Size returns the number of jobs that run at once (Options.Size).
func (p *Pool) Size() int { return p.opts.Size }

// Ahead returns how many Waited jobs are queued ahead of t's job and
// whether t's job is still queued (not yet taken by a worker). A job that
// runs, has run, or is queued as Background reports 0 ahead; only a queued
// Waited job has Waited jobs ahead of it. Since every worker takes the
// oldest Waited job first, a Waited job with fewer than Size jobs ahead of
// it starts at the latest when one of the running jobs ends.
func (p *Pool) Ahead(t *Ticket) (ahead int, queued bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := t.state
	if !st.queued {
		return 0, false
	}
	if st.prio != Waited {
		return 0, true
	}
	for i, x := range p.waited {
		if x == st {
			return i, true
		}
	}
	return 0, true
}

// Active returns the ticket of session's job while one is queued or running,
// or nil.
func (p *Pool) Active(session string) *Ticket {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st, ok := p.active[session]; ok {
		return &Ticket{Session: session, Joined: true, state: st}
	}
	return nil
}

// Stats is a point-in-time view of the pool.
type Stats struct {
	// Queued is the number of jobs waiting to start, QueuedWaited those of
	// them a request waits on.
	Queued, QueuedWaited int
	// Running is the number of jobs running.
	Running int
}

// Stats returns the pool's current queue depth and running count.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{Queued: len(p.waited) + len(p.background), QueuedWaited: len(p.waited), Running: p.running}
}

// next blocks until a job is queued and returns it, Waited jobs first, or
// nil once the workers are stopped.
func (p *Pool) next() *jobState {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if p.stopped {
			return nil
		}
		var st *jobState
		switch {
		case len(p.waited) > 0:
			st, p.waited = p.waited[0], p.waited[1:]
		case len(p.background) > 0:
			st, p.background = p.background[0], p.background[1:]
		}
		if st != nil {
			st.queued = false
			p.running++
			close(st.started)
			return st
		}
		p.cond.Wait()
	}
}

// Run starts the workers and blocks until ctx is cancelled; then it stops
// accepting jobs, lets running jobs finish within DrainTimeout (cancelling
// their contexts after it), resolves jobs that never started with ErrClosed,
// and returns nil. It must be called once.
func (p *Pool) Run(ctx context.Context) error {
	// Jobs run under jobCtx, which outlives ctx by the drain timeout.
	jobCtx, cancelJobs := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelJobs()

	var g errgroup.Group
	for range p.opts.Size {
		g.Go(func() error {
			for st := p.next(); st != nil; st = p.next() {
				p.run(jobCtx, st)
			}
			return nil
		})
	}

	<-ctx.Done()
	p.mu.Lock()
	p.closed = true
	p.stopped = true
	p.cond.Broadcast()
	p.mu.Unlock()

	drained := make(chan struct{})
	go func() { _ = g.Wait(); close(drained) }()
	timer := time.NewTimer(p.opts.DrainTimeout)
	defer timer.Stop()
	select {
	case <-drained:
	case <-timer.C:
		cancelJobs()
		<-drained
	}

	// Whatever is still queued never started.
	p.mu.Lock()
	left := append(p.waited, p.background...)
	p.waited, p.background = nil, nil
	for _, st := range left {
		st.queued = false
	}
	p.mu.Unlock()
	for _, st := range left {
		p.finish(st, ErrClosed)
	}
	return nil
}

func (p *Pool) run(ctx context.Context, st *jobState) {
	err := safeCall(ctx, st.fn)
	p.mu.Lock()
	p.running--
	p.mu.Unlock()
	p.finish(st, err)
}

func (p *Pool) finish(st *jobState, err error) {
	p.mu.Lock()
	if p.active[st.key] == st {
		delete(p.active, st.key)
	}
	p.mu.Unlock()
	st.err = err
	close(st.done)
}

// safeCall runs fn and turns a panic into an error, so one bad job cannot
// take the daemon down.
func safeCall(ctx context.Context, fn Func) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("workers: job panicked: %v", r)
		}
	}()
	return fn(ctx)
}

// NewTicket returns a Ticket for a job that runs outside any Pool (a queue
// shared by several nodes, docs/design.md §9), with start, which closes Started,
// and finish, which records err and closes Done. Each may be called more
// than once; only the first call counts.
func NewTicket(session string) (t *Ticket, start func(), finish func(err error)) {
	st := &jobState{started: make(chan struct{}), done: make(chan struct{}), key: session}
	var startOnce, finishOnce sync.Once
	start = func() { startOnce.Do(func() { close(st.started) }) }
	finish = func(err error) {
		finishOnce.Do(func() {
			st.err = err
			close(st.done)
		})
	}
	return &Ticket{Session: session, state: st}, start, finish
}

// JoinedCopy returns a copy of t marked as joined (Ticket.Joined), for a
// caller that joins a job another caller submitted.
func (t *Ticket) JoinedCopy() *Ticket {
	c := *t
	c.Joined = true
	return &c
}
