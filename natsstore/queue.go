package natsstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxd/ctxd/workers"
)

// Queue is the compaction queue shared by every node of a fleet (docs/design.md
// §9), an engine.SharedQueue: a job is a message of the work-queue stream
// <P>_JOBS, on a subject per session, taken by whichever node's Run pulls
// it from the one durable consumer. Its message id is (session, the
// session's last seq when it was queued), so two nodes queueing the same
// compaction queue one job; and the stream keeps at most one message per
// subject, so a session has at most one job queued or running in the whole
// fleet (docs/design.md §8a: compactions of one session are serialized) — a
// second submission joins it. A node
// signals progress while it runs a job (every AckWait/4); a node that dies
// stops signalling and JetStream gives the job to another node after
// AckWait. Nodes tell each other that a job started and finished on core
// NATS subjects, so a request waiting on a compaction another node runs
// returns when it ends. Priorities are not kept: jobs start in order.
type Queue struct {
	st   *Store
	size int

	mu      sync.Mutex
	tickets map[string]*qticket // by session: the job this node waits on or runs
	recent  map[string]string   // job key → error text, for jobs finished lately
	order   []string            // keys of recent, oldest first
	jobs    func(session, sig string) workers.Func
	closed  bool
	sub     *nats.Subscription
	// running is the sessions whose job a node said it runs, with when
	// it last said so (its start note, repeated with each progress
	// signal); an entry older than the ack wait is a node that stopped.
	running map[string]time.Time
}

type qticket struct {
	key    string
	alive  chan struct{} // signalled when a node says it runs the job
	t      *workers.Ticket
	start  func()
	finish func(error)
}

// job is a queued compaction.
type job struct {
	Session string `json:"session"`
	Signal  string `json:"signal"`
	Key     string `json:"key"`
}

// note is a job's start or end, published to every node.
type note struct {
	Session string `json:"session"`
	Key     string `json:"key"`
	Done    bool   `json:"done,omitempty"`
	Err     string `json:"err,omitempty"`
}

// maxRecent bounds the finished job keys a node remembers.
const maxRecent = 4096

// errRemote is a job's failure on another node, by its text.
type errRemote struct{ msg string }

func (e *errRemote) Error() string { return e.msg }

// Queue returns the fleet's compaction queue; size is how many jobs this
// node runs at once (at least 1). Start taking jobs with Run.
func (st *Store) Queue(size int) (*Queue, error) {
	if size < 1 {
		return nil, fmt.Errorf("%w: queue size %d: at least 1", ErrInvalidOptions, size)
	}
	q := &Queue{st: st, size: size, tickets: map[string]*qticket{}, recent: map[string]string{}, running: map[string]time.Time{}}
	sub, err := st.nc.Subscribe(st.prefix+".jobnote.>", q.onNote)
	if err != nil {
		return nil, fmt.Errorf("subscribe to job notes: %w", err)
	}
	q.sub = sub
	return q, nil
}

// SetJobs implements engine.SharedQueue.
func (q *Queue) SetJobs(fn func(session, sig string) workers.Func) {
	q.mu.Lock()
	q.jobs = fn
	q.mu.Unlock()
}

// SubmitPriority queues fn's session's job under the signal "manual"; the
// engine uses SubmitJob.
func (q *Queue) SubmitPriority(session string, prio workers.Priority, fn workers.Func) (*workers.Ticket, error) {
	return q.SubmitJob(session, "manual", prio, fn)
}

// SubmitJob implements engine.SharedQueue. fn is not kept: the node that
// takes the job builds its work with the SetJobs function. Errors:
// workers.ErrClosed, the log's (reading the last seq), JetStream's.
func (q *Queue) SubmitJob(session, sig string, _ workers.Priority, _ workers.Func) (*workers.Ticket, error) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil, workers.ErrClosed
	}
	if tk := q.tickets[session]; tk != nil {
		q.mu.Unlock()
		return tk.t.JoinedCopy(), nil
	}
	q.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := q.st.up(); err != nil {
		return nil, err
	}
	last, err := q.st.log.LastSeq(ctx, session)
	if err != nil {
		return nil, err
	}
	key := fmt.Sprintf("%s/%d", hexID(session), last)
	q.mu.Lock()
	if tk := q.tickets[session]; tk != nil {
		q.mu.Unlock()
		return tk.t.JoinedCopy(), nil
	}
	t, start, finish := workers.NewTicket(session)
	tk := &qticket{key: key, t: t, start: start, finish: finish, alive: make(chan struct{}, 1)}
	q.tickets[session] = tk
	q.mu.Unlock()

	data, _ := json.Marshal(job{Session: session, Signal: sig, Key: key})
	ack, err := q.st.js.Publish(ctx, q.st.prefix+".jobs."+hexID(session), data, jetstream.WithMsgID(key))
	switch {
	case perSubjectFull(err):
		// Another job of the session is queued or running somewhere: wait
		// for its end, whatever its key.
		q.mu.Lock()
		tk.key = ""
		q.mu.Unlock()
		t.Joined = true
		go q.expire(session, tk)
	case err != nil:
		q.end(session, tk, err)
		return nil, fmt.Errorf("queue the compaction of session %q: %w", session, err)
	case ack.Duplicate:
		// The same job was queued at this position already: it is queued,
		// running, or finished (then its end is remembered, unless this
		// node started after it).
		t.Joined = true
		q.mu.Lock()
		msg, done := q.recent[key]
		q.mu.Unlock()
		if done {
			q.end(session, tk, remoteErr(msg))
		} else {
			go q.expire(session, tk)
		}
	}
	return t, nil
}

// perSubjectFull reports a job refused because its session has one queued
// or running (the stream's one message per subject).
func perSubjectFull(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.ErrorCode(10077) &&
		strings.Contains(apiErr.Description, "per subject")
}

// expire ends a ticket for a duplicate job whose end this node may have
// missed: when no node says it runs the job for twice AckWait (a
// redelivery takes at most AckWait).
func (q *Queue) expire(session string, tk *qticket) {
	t := time.NewTimer(2 * q.st.opts.AckWait)
	defer t.Stop()
	for {
		select {
		case <-tk.t.Done():
			return
		case <-tk.alive:
			t.Reset(2 * q.st.opts.AckWait)
		case <-t.C:
			q.end(session, tk, nil)
			return
		}
	}
}

func remoteErr(msg string) error {
	if msg == "" {
		return nil
	}
	return &errRemote{msg}
}

func (tk *qticket) touch() {
	select {
	case tk.alive <- struct{}{}:
	default:
	}
}

// end finishes tk with err and forgets it.
func (q *Queue) end(session string, tk *qticket, err error) {
	q.mu.Lock()
	if q.tickets[session] == tk {
		delete(q.tickets, session)
	}
	q.mu.Unlock()
	tk.start()
	tk.finish(err)
}

func (q *Queue) onNote(m *nats.Msg) {
	var n note
	if json.Unmarshal(m.Data, &n) != nil {
		return
	}
	q.mu.Lock()
	tk := q.tickets[n.Session]
	if n.Done {
		delete(q.running, n.Session)
	} else {
		q.running[n.Session] = q.st.opts.Now()
		if len(q.running) > maxRecent {
			q.dropStaleLocked()
		}
	}
	if n.Done {
		if _, ok := q.recent[n.Key]; !ok {
			q.recent[n.Key] = n.Err
			q.order = append(q.order, n.Key)
			if len(q.order) > maxRecent {
				delete(q.recent, q.order[0])
				q.order = q.order[1:]
			}
		}
	}
	q.mu.Unlock()
	if tk == nil || (tk.key != n.Key && tk.key != "") {
		return
	}
	if n.Done {
		q.end(n.Session, tk, remoteErr(n.Err))
		return
	}
	tk.start()
	tk.touch()
}

func (q *Queue) publishNote(n note) {
	data, _ := json.Marshal(n)
	if err := q.st.nc.Publish(q.st.prefix+".jobnote."+hexID(n.Session), data); err != nil {
		q.st.opts.Logger.Warn("compaction job note not sent", "session", n.Session, "err", err)
	}
}

// Running reports whether a node of the fleet runs session's compaction
// now: it said so within the ack wait (its start note, repeated with each
// progress signal). For `session show` on every node; a node that died
// stops being counted after the ack wait, when its job moves.
func (q *Queue) Running(session string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	at, ok := q.running[session]
	return ok && q.st.opts.Now().Sub(at) <= q.st.opts.AckWait
}

// dropStaleLocked forgets the running entries older than the ack wait.
// q.mu is held.
func (q *Queue) dropStaleLocked() {
	now := q.st.opts.Now()
	for id, at := range q.running {
		if now.Sub(at) > q.st.opts.AckWait {
			delete(q.running, id)
		}
	}
}

// Active implements engine.Queue: the job of session this node waits on or
// runs, nil when none.
func (q *Queue) Active(session string) *workers.Ticket {
	q.mu.Lock()
	defer q.mu.Unlock()
	if tk := q.tickets[session]; tk != nil {
		return tk.t
	}
	return nil
}

// Stats returns this node's view for GET /v1/status: Running is the jobs
// it runs, Queued those it waits on that run elsewhere or not yet (the
// fleet's queue depth is the consumer's, in the servers' monitoring).
func (q *Queue) Stats() workers.Stats {
	q.mu.Lock()
	defer q.mu.Unlock()
	var st workers.Stats
	for _, tk := range q.tickets {
		select {
		case <-tk.t.Started():
			st.Running++
		default:
			st.Queued++
		}
	}
	return st
}

// Size implements engine.Queue: the jobs this node runs at once.
func (q *Queue) Size() int { return q.size }

// Ahead implements engine.Queue with the fleet's backlog, so that a
// pre-send read waits at most one round on both backends (docs/decisions.md
// "A pre-send read waits at most one round of the pool"): while t's job
// has not started anywhere, every other job the shared consumer has not
// delivered yet counts as ahead of it (the stream keeps no priorities:
// jobs start in order, so background jobs count too). The engine then waits
// only when fewer than Size jobs are ahead. When the backlog cannot be read
// within fleetInfoTimeout, Ahead reports Size jobs ahead: a request never
// waits on a queue it cannot see.
func (q *Queue) Ahead(t *workers.Ticket) (int, bool) {
	select {
	case <-t.Started():
		return 0, false
	case <-t.Done():
		return 0, false
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), fleetInfoTimeout)
	defer cancel()
	fs, err := q.Fleet(ctx)
	if err != nil {
		return q.size, true
	}
	ahead := int(fs.Backlog)
	if ahead > 0 {
		ahead-- // t's own job, not delivered yet
	}
	return ahead, true
}

// fleetInfoTimeout bounds the read of the fleet's backlog on the
// pre-send path.
const fleetInfoTimeout = 2 * time.Second

// FleetStats is the fleet's compaction queue as the shared consumer has
// it (GET /v1/status): the same numbers on every node.
type FleetStats struct {
	// Backlog is the jobs queued and not yet taken by any node.
	Backlog uint64
	// Held is the jobs taken by a node and not yet finished: running, or
	// held by a node that died until their ack wait ends.
	Held int
	// Redelivered is the held jobs that were given to a node more than
	// once (their first node died or handed them back).
	Redelivered int
	// FreeWorkers is the workers of live nodes waiting for a job.
	FreeWorkers int
	// AckWait is how long a node may hold a job without a progress signal.
	AckWait time.Duration
}

// Fleet reads the shared consumer's state. Errors: ErrUnavailable while
// the connection is down, JetStream's.
//
// The consumer's count of jobs not delivered is its leader's, taken from
// that server's copy of the stream, which can trail the stream's leader
// (the one that acknowledged a job's publication) on a loaded machine:
// right after a job is queued it may be missing there. So the backlog is
// also read as the stream leader's jobs minus those the consumer holds —
// never fewer than those queued (a job leaves the stream after its
// acknowledgement), at most the few just acknowledged more — and the
// larger reading is reported: a pre-send read that under-counts the
// queue ahead of it would wait on it (Ahead).
func (q *Queue) Fleet(ctx context.Context) (FleetStats, error) {
	if err := q.st.up(); err != nil {
		return FleetStats{}, err
	}
	// The stream first: a job delivered between the two reads is then
	// counted held and not queued, never neither.
	si, err := q.st.jobs.Info(ctx)
	if err != nil {
		return FleetStats{}, fmt.Errorf("compaction stream: %w", err)
	}
	cons, err := q.st.jobs.Consumer(ctx, q.st.consumerName())
	if err != nil {
		return FleetStats{}, fmt.Errorf("compaction consumer: %w", err)
	}
	info := cons.CachedInfo()
	backlog := info.NumPending
	if held := uint64(info.NumAckPending); si.State.Msgs > held {
		backlog = max(backlog, si.State.Msgs-held)
	}
	return FleetStats{
		Backlog:     backlog,
		Held:        info.NumAckPending,
		Redelivered: info.NumRedelivered,
		FreeWorkers: info.NumWaiting,
		AckWait:     info.Config.AckWait,
	}, nil
}

// Unwait implements engine.Queue; jobs keep no priority, so it does
// nothing.
func (q *Queue) Unwait(*workers.Ticket) {}

// Run takes jobs from the shared consumer, up to the queue's size at once,
// until ctx is cancelled; then it waits for the running jobs, whose
// contexts are cancelled, and hands them back (a negative acknowledgement:
// another node takes them at once). It returns nil after a cancellation.
func (q *Queue) Run(ctx context.Context) error {
	cons, err := q.st.jobs.Consumer(ctx, q.st.consumerName())
	if err != nil {
		return fmt.Errorf("compaction consumer: %w", err)
	}
	sem := make(chan struct{}, q.size)
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		q.mu.Lock()
		q.closed = true
		pending := q.tickets
		q.tickets = map[string]*qticket{}
		q.mu.Unlock()
		for _, tk := range pending {
			tk.finish(workers.ErrClosed)
		}
		_ = q.sub.Unsubscribe()
	}()
	for {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		fctx, cancel := context.WithTimeout(ctx, time.Second)
		batch, err := cons.Fetch(1, jetstream.FetchContext(fctx))
		if err != nil {
			cancel()
			<-sem
			if ctx.Err() != nil {
				return nil
			}
			if q.st.nc.IsConnected() {
				// An outage is logged once, by the connection's handlers
				// (Store.Status), not every second here.
				q.st.opts.Logger.Warn("fetching compaction jobs", "err", err)
			}
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
				return nil
			}
			continue
		}
		got := false
		for m := range batch.Messages() { // ends within fctx's second
			got = true
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				q.handle(ctx, m)
			}()
		}
		cancel()
		if !got {
			<-sem
		}
	}
}

// handle runs one job taken from the queue.
func (q *Queue) handle(ctx context.Context, m jetstream.Msg) {
	var j job
	if err := json.Unmarshal(m.Data(), &j); err != nil || j.Session == "" {
		q.st.opts.Logger.Warn("dropping a malformed compaction job", "err", err)
		_ = m.Term()
		return
	}
	q.mu.Lock()
	jobs := q.jobs
	tk := q.tickets[j.Session]
	if tk == nil || (tk.key != j.Key && tk.key != "") {
		t, start, finish := workers.NewTicket(j.Session)
		if tk == nil {
			tk = &qticket{key: j.Key, t: t, start: start, finish: finish, alive: make(chan struct{}, 1)}
			q.tickets[j.Session] = tk
		} else {
			tk = &qticket{key: j.Key, t: t, start: start, finish: finish, alive: make(chan struct{}, 1)} // not this node's waiters' job
		}
	}
	q.mu.Unlock()
	if jobs == nil {
		_ = m.Nak()
		return
	}
	tk.start()
	tk.touch()
	q.publishNote(note{Session: j.Session, Key: j.Key})

	// Tell JetStream the job is alive while it runs.
	hb, stop := context.WithCancel(context.Background())
	go func() {
		t := time.NewTicker(q.st.opts.AckWait / 4)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				_ = m.InProgress()
				// Every node learns the job still runs (Running).
				q.publishNote(note{Session: j.Session, Key: j.Key})
			case <-hb.Done():
				return
			}
		}
	}()
	err := safeRun(ctx, jobs(j.Session, j.Signal))
	stop()
	if ctx.Err() != nil && err != nil {
		// This node is stopping: another takes the job now.
		_ = m.Nak()
		q.end(j.Session, tk, err)
		return
	}
	if aerr := m.DoubleAck(context.WithoutCancel(ctx)); aerr != nil {
		q.st.opts.Logger.Warn("compaction job not acknowledged; it may run again", "session", j.Session, "err", aerr)
	}
	n := note{Session: j.Session, Key: j.Key, Done: true}
	if err != nil {
		n.Err = err.Error()
	}
	q.publishNote(n)
	q.end(j.Session, tk, err)
}

// safeRun runs fn, turning a panic into an error.
func safeRun(ctx context.Context, fn workers.Func) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("compaction job panicked: %v", r)
		}
	}()
	return fn(ctx)
}

// Conn returns the store's NATS connection (for status, and for tests that
// cut a node off).
func (st *Store) Conn() *nats.Conn { return st.nc }
