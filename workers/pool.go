// Package workers owns the bounded compaction pool (DESIGN.md §1, §8a): a
// fixed number of workers, a bounded queue that rejects instead of growing,
// at most one job per session at a time (a second request joins the first),
// and a graceful drain on shutdown. It knows nothing of providers.
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
	done chan struct{}
	err  error
	fn   Func
	key  string
}

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
	opts  Options
	queue chan *jobState

	mu      sync.Mutex
	active  map[string]*jobState // queued or running, by session
	running int
	closed  bool
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
	return &Pool{
		opts:   opts,
		queue:  make(chan *jobState, opts.Queue),
		active: make(map[string]*jobState),
	}, nil
}

// Submit queues fn as session's job, or joins the job session already has
// queued or running (the returned Ticket then has Joined set and fn is not
// used). Jobs are keyed by session alone so that running one twice is
// impossible (DESIGN.md §8a). It returns ErrQueueFull when the queue is at
// its bound and ErrClosed once the pool is shutting down; it never blocks.
func (p *Pool) Submit(session string, fn Func) (*Ticket, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	if st, ok := p.active[session]; ok {
		return &Ticket{Session: session, Joined: true, state: st}, nil
	}
	st := &jobState{done: make(chan struct{}), fn: fn, key: session}
	select {
	case p.queue <- st:
	default:
		return nil, ErrQueueFull
	}
	p.active[session] = st
	return &Ticket{Session: session, state: st}, nil
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
	// Queued is the number of jobs waiting to start.
	Queued int
	// Running is the number of jobs running.
	Running int
}

// Stats returns the pool's current queue depth and running count.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{Queued: len(p.queue), Running: p.running}
}

// Run starts the workers and blocks until ctx is cancelled; then it stops
// accepting jobs, lets running jobs finish within DrainTimeout (cancelling
// their contexts after it), resolves jobs that never started with ErrClosed,
// and returns nil. It must be called once.
func (p *Pool) Run(ctx context.Context) error {
	// Jobs run under jobCtx, which outlives ctx by the drain timeout.
	jobCtx, cancelJobs := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelJobs()

	stop := make(chan struct{})
	var g errgroup.Group
	for range p.opts.Size {
		g.Go(func() error {
			for {
				select {
				case <-stop:
					return nil
				case st := <-p.queue:
					p.run(jobCtx, st)
				}
			}
		})
	}

	<-ctx.Done()
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	close(stop)

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
	for {
		select {
		case st := <-p.queue:
			p.finish(st, ErrClosed)
		default:
			return nil
		}
	}
}

func (p *Pool) run(ctx context.Context, st *jobState) {
	p.mu.Lock()
	p.running++
	p.mu.Unlock()
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
