package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/offload"
	"github.com/ctxd/ctxd/trigger"
	"github.com/ctxd/ctxd/workers"
)

// A staged append (docs/design.md §10 "Recorded when accepted";
// docs/decisions.md "A request is durable once the upstream accepted it"):
// the provider proxy's request is applied to the loaded session at once —
// the context built for the request, and every later read, include it —
// while its durable write waits until the upstream accepts the request
// (Staged.Commit), or is dropped when it refuses it (Staged.Discard): a
// refused request leaves the log exactly as it was, and the slow write is
// off the path between the client's last byte and the upstream's first.
//
// Nothing the append causes costs before it is earned: a context-edit
// pass or a diagnostic derived while it is staged joins its events
// (appendLog), written with them at the commit and discarded with them,
// and neither its post-check nor a pre-send check queues a compaction or
// a speculative summary, which could call the summarizer with the
// operator's key: they are deferred to the commit (afterCommit).
//
// The log stays one sequence: every other write of the session's log while
// an append is staged (a compaction queued before it, the answer's record)
// writes the staged events first (stagingLog), so nothing durable ever
// follows or covers a message that is not. Such an append is then durable,
// and Discard leaves it.

// ErrDiscarded: the staged append was discarded (Staged.Commit).
var ErrDiscarded = errors.New("staged append discarded")

// stageState is where a staged append stands.
type stageState int

const (
	stagePending stageState = iota
	stageWriting
	stageCommitted
	stageDiscarded
	stageFailed
)

// Staged is an append applied in memory and not yet written (Engine.Stage).
// Its methods are safe for concurrent use; exactly one of Commit and
// Discard takes effect.
type Staged struct {
	e  *Engine
	id string
	// s is the loaded copy the append was applied to.
	s *session
	// base is the log's last seq the events follow; events are the
	// append's, with seqs base+1… once written.
	base   uint64
	events []checkpoint.Event
	// files are the offload files written for the append's results;
	// pending their durable half (the file's sync, the artifact), done by
	// the write before its events (offload.Offloader.Stage).
	files   []string
	pending []*offload.Pending
	res     AppendResult
	// create is the session's creation when it was created in memory only
	// (CreateParams.Staged): the write stores it before the events.
	create *unstored

	// Guarded by Engine.stageMu.
	state stageState
	err   error
	done  chan struct{} // closed when the write ended
	// deferred: a check while the append was pending found work (a
	// compaction, a speculative summary) it did not queue; the first
	// Commit runs the check again (afterCommit, once: every Commit
	// returns after it).
	deferred bool
	after    sync.Once
}

// Result is what the append stored in memory, with the seqs its events
// have once committed.
func (st *Staged) Result() AppendResult { return st.res }

// Stage applies msgs to session id in memory as Append would — validated,
// abandoned rounds closed, oversized results offloaded, a context-edit
// pass — and returns without writing them: Commit writes them, Discard
// drops them. Until one of them, the session's context and figures
// include the append; its events, and those of a pass or diagnostic it
// caused, are not in the log yet (Events, LastSeq). While it is pending
// no check (its post-check, a pre-send check of Context) queues a
// compaction or a speculative summary: the first Commit runs the check
// again. Any other write of the session's log commits the staged append
// first, so a compaction queued before it finds it durable.
// opts.IdempotencyKey must be empty.
//
// Errors: Append's; ErrInvalid when opts has an idempotency key.
func (e *Engine) Stage(ctx context.Context, id string, msgs []history.Message, opts AppendOptions) (*Staged, error) {
	if opts.IdempotencyKey != "" {
		return nil, invalidField("Idempotency-Key", "not with a staged append")
	}
	for attempt := 0; ; attempt++ {
		st := &Staged{e: e, id: id, done: make(chan struct{})}
		res, err := e.appendWith(ctx, id, msgs, opts, st)
		if !errors.Is(err, errStale) || attempt == maxAppendAttempts {
			if errors.Is(err, errStale) {
				err = fmt.Errorf("%w: session %q: other writers kept appending; try again", ErrUnavailable, id)
			}
			if err != nil {
				return nil, err
			}
			st.res = res
			return st, nil
		}
	}
}

// Commit writes the staged append, once, and returns when it is durable
// (at once when it is already). A commit that finds the log moved on (a
// fleet's other node appended) fails, and the session is reloaded from
// the log at its next use: the append is lost, as after a crash. The
// first Commit that finds it durable runs the checks deferred while it
// was pending (afterCommit), and every Commit returns after them. Not
// called with the session's lock held.
//
// Errors: ErrDiscarded, the log's (ErrNotFound after a deletion).
func (st *Staged) Commit(ctx context.Context) error {
	if err := st.write(ctx); err != nil {
		return err
	}
	st.after.Do(func() { st.e.afterCommit(ctx, st) })
	return nil
}

// afterCommit runs the check deferred while st was pending (Staged.
// deferred), once: the upstream accepted the request, so the work it
// finds is earned — a compaction, or a speculative summary. The
// compaction is queued first among background work, as a pre-send check
// whose context fits the window queues it, and afterCommit waits, up to
// startGrace, until a worker takes it: its snapshot is then the session
// as the request left it, before the answer's record — which would open
// a tool round, under which no compaction runs. When another append of
// the session is staged by now, the check is deferred to its commit.
func (e *Engine) afterCommit(ctx context.Context, st *Staged) {
	e.stageMu.Lock()
	deferred := st.deferred
	st.deferred = false
	e.stageMu.Unlock()
	if !deferred {
		return
	}
	ctx = context.WithoutCancel(ctx)
	s, err := e.lock(ctx, st.id)
	if err != nil {
		return // deleted meanwhile
	}
	e.refresh(s)
	d := e.check(ctx, s, trigger.PostCheck)
	var t *workers.Ticket
	switch {
	case e.heldForStage(s, d):
	case !d.Compact:
		e.maybePrepare(s)
	default:
		if t, err = e.submitCheck(s, trigger.PostCheck, workers.BackgroundFirst); err != nil {
			e.log.Warn("compaction deferred to the commit not queued", "session", s.id, "err", err)
		}
	}
	e.saveRow(s)
	s.mu.Unlock()
	if t == nil {
		return
	}
	grace := time.NewTimer(startGrace)
	defer grace.Stop()
	select {
	case <-t.Started():
	case <-t.Done():
	case <-grace.C:
	}
}

// heldForStage reports whether s has a staged append not written yet:
// then a check's work is not queued — neither the compaction d decides
// nor a speculative summary — but deferred to the append's commit
// (afterCommit). Called with s.mu held, after the check.
func (e *Engine) heldForStage(s *session, d trigger.Decision) bool {
	return s.stage != nil && e.deferToCommit(s, s.stage, d, false)
}

// deferToCommit defers the work of check d of session s, if any, to st's
// commit, and reports whether it did: st is not written yet, or, when
// own (the append being staged: its Commit is still to come), not
// dropped either. Called with s.mu held.
func (e *Engine) deferToCommit(s *session, st *Staged, d trigger.Decision, own bool) bool {
	work := d.Compact || e.prepareWanted(s)
	e.stageMu.Lock()
	defer e.stageMu.Unlock()
	switch st.state {
	case stagePending, stageWriting:
	case stageCommitted:
		if !own {
			return false
		}
	default:
		return true // dropped with the append
	}
	st.deferred = st.deferred || work
	return true
}

// appendLog writes events after session s's log and returns the first
// one's seq, or, while an append of s is staged and not being written,
// joins them to it: they are written with it at its commit, at the seqs
// returned, and dropped with it when it is discarded (a context-edit pass
// or a diagnostic the staged messages caused is not stored before they
// are). Errors: the log's. Called with s.mu held.
func (e *Engine) appendLog(ctx context.Context, s *session, events []checkpoint.Event) (uint64, error) {
	if st := s.stage; st != nil {
		e.stageMu.Lock()
		if st.state == stagePending {
			seq := st.base + uint64(len(st.events)) + 1
			now := e.opts.Now().UTC()
			for i := range events {
				if events[i].Time.IsZero() {
					events[i].Time = now
				}
			}
			st.events = append(st.events, events...)
			e.stageMu.Unlock()
			return seq, nil
		}
		e.stageMu.Unlock()
	}
	return e.opts.Log.Append(ctx, s.id, events)
}

// Discard drops the staged append unless it is durable already (another
// write of the session's log committed it first, or Commit did): the
// loaded session is dropped and reloaded from the log at its next use,
// and the offload files written for the append are removed. It reports
// whether the append was dropped; false means it is stored.
func (st *Staged) Discard() bool {
	e := st.e
	st.s.mu.Lock()
	e.stageMu.Lock()
	state := st.state
	if state == stagePending {
		st.state = stageDiscarded
		st.err = ErrDiscarded
		e.unstageLocked(st)
		if st.create != nil && e.creating[st.id] == st.create {
			// Never stored: the session goes with the append.
			delete(e.creating, st.id)
		}
		close(st.done)
	}
	e.stageMu.Unlock()
	if state == stageWriting {
		st.s.mu.Unlock()
		<-st.done
		e.stageMu.Lock()
		state = st.state
		e.stageMu.Unlock()
		return state != stageCommitted
	}
	if state != stagePending {
		st.s.mu.Unlock()
		return state != stageCommitted
	}
	// The loaded copy holds the append: the log is the truth.
	st.s.evicted = true
	if st.s.stage == st {
		st.s.stage = nil
	}
	st.s.mu.Unlock()
	e.mu.Lock()
	if e.sessions[st.id] == st.s {
		delete(e.sessions, st.id)
	}
	e.mu.Unlock()
	st.removeFiles()
	return true
}

// removeFiles removes the offload files written for st, dropped with it,
// and, when st created its session in memory only (never stored), their
// directory once empty: nothing is left of a session that was never
// stored. Called once st is discarded, or its write failed, without
// st's session's mu.
func (st *Staged) removeFiles() {
	dirs := map[string]bool{}
	for _, f := range st.files {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			st.e.log.Warn("removing the offload file of a discarded append", "session", st.id, "path", f, "err", err)
		}
		dirs[filepath.Dir(f)] = true
	}
	if st.create == nil {
		return
	}
	for d := range dirs {
		// Only when empty: os.Remove leaves a directory holding anything.
		_ = os.Remove(d)
	}
}

// write commits st, or waits for the write under way. Never called with
// st's session's mu required: callers may hold it.
func (st *Staged) write(ctx context.Context) error {
	e := st.e
	e.stageMu.Lock()
	switch st.state {
	case stagePending:
		st.state = stageWriting
		e.stageMu.Unlock()
	case stageWriting:
		e.stageMu.Unlock()
		select {
		case <-st.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		e.stageMu.Lock()
		err := st.err
		e.stageMu.Unlock()
		return err
	default:
		err := st.err
		e.stageMu.Unlock()
		return err
	}
	// Not cancelled with the caller: other writers wait on this one.
	ctx = context.WithoutCancel(ctx)
	var err error
	if st.create != nil {
		// The session was created in memory only: stored first.
		err = e.storeUnstored(ctx, st.id, st.create)
	}
	if err == nil {
		err = st.finishOffloads(ctx)
	}
	if err == nil {
		_, err = e.inner.AppendAt(ctx, st.id, st.base, st.events)
	}
	if err != nil && st.create != nil && !st.create.stored() && !errors.Is(err, ErrExists) {
		// The session was never stored (nor is it another node's):
		// nothing refers to the append's files, which go as with a
		// discard, before anyone waiting on the write goes on.
		st.removeFiles()
	}
	e.stageMu.Lock()
	if err != nil {
		st.state, st.err = stageFailed, fmt.Errorf("committing a staged append: %w", mapLogErr(st.id, err))
	} else {
		st.state = stageCommitted
	}
	e.unstageLocked(st)
	close(st.done)
	err = st.err
	e.stageMu.Unlock()
	if err != nil {
		e.log.Warn("staged append not committed; the session is reloaded from the log", "session", st.id, "err", err)
	}
	return err
}

// finishOffloads makes the append's offloaded results durable (their
// files synced, their artifacts stored), side by side, before its events
// refer to them. Errors: the first write's that failed.
func (st *Staged) finishOffloads(ctx context.Context) error {
	if len(st.pending) == 1 {
		return st.pending[0].Finish(ctx)
	}
	errs := make([]error, len(st.pending))
	var wg sync.WaitGroup
	sem := make(chan struct{}, offloadWriters)
	for k, p := range st.pending {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[k] = p.Finish(ctx)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// stage registers st as session s's pending append: events follow base.
// Called with s.mu held, before the append is applied in memory.
func (e *Engine) stage(s *session, st *Staged, base uint64, events []checkpoint.Event, offloaded map[int]checkpoint.Event) {
	st.s, st.base, st.events = s, base, events
	for _, ev := range offloaded {
		if ev.Kind != checkpoint.KindOffload {
			continue
		}
		var r offload.Record
		if json.Unmarshal(ev.Data, &r) == nil && r.Path != "" {
			st.files = append(st.files, r.Path)
		}
	}
	e.stageMu.Lock()
	if e.staged == nil {
		e.staged = map[string]*Staged{}
	}
	e.staged[s.id] = st
	if u := e.creating[s.id]; u != nil && !u.failed {
		st.create = u
	}
	e.stageMu.Unlock()
	s.stage = st
}

// unstageLocked forgets st as its session's pending append. Called with
// e.stageMu held.
func (e *Engine) unstageLocked(st *Staged) {
	if e.staged[st.id] == st {
		delete(e.staged, st.id)
	}
}

// settleStaged commits session id's staged append, if one is pending.
// Errors: the staged write's.
func (e *Engine) settleStaged(ctx context.Context, id string) error {
	e.stageMu.Lock()
	st := e.staged[id]
	e.stageMu.Unlock()
	if st == nil {
		return nil
	}
	return st.write(ctx)
}

// settle commits session id's staged append, if one is pending, and
// stores the session when it was created in memory only, before another
// write of its log. Errors: the staged write's, storing the session's.
func (e *Engine) settle(ctx context.Context, id string) error {
	e.stageMu.Lock()
	st := e.staged[id]
	u := e.creating[id]
	e.stageMu.Unlock()
	switch {
	case st != nil:
		return st.write(ctx) // stores a session created in memory first
	case u != nil:
		return e.storeUnstored(ctx, id, u)
	}
	return nil
}

// stageLost reports whether s's staged append can no longer be written
// (discarded, or its write failed): the loaded copy holds what the log
// does not, and must be reloaded. A committed one is forgotten. Called
// with s.mu held.
func (e *Engine) stageLost(s *session) bool {
	st := s.stage
	if st == nil {
		return false
	}
	e.stageMu.Lock()
	state := st.state
	e.stageMu.Unlock()
	switch state {
	case stageCommitted:
		s.stage = nil
	case stageFailed, stageDiscarded:
		return true
	}
	return false
}

// stagePending reports whether s has a staged append not written yet.
// Called with s.mu held.
func (e *Engine) stagePending(s *session) bool {
	st := s.stage
	if st == nil {
		return false
	}
	e.stageMu.Lock()
	defer e.stageMu.Unlock()
	return st.state == stagePending || st.state == stageWriting
}

// durableSeq is the log's last seq as s knows it: its last seq less a
// staged append not written yet (while its write is under way, either).
// Called with s.mu held.
func (e *Engine) durableSeq(s *session, logLast uint64) uint64 {
	st := s.stage
	if st == nil {
		return s.lastSeq
	}
	e.stageMu.Lock()
	state := st.state
	e.stageMu.Unlock()
	if state == stagePending || (state == stageWriting && logLast == st.base) {
		return st.base
	}
	return s.lastSeq
}

// abandonStage fails s's pending staged append (the log moved on under
// it): its Commit fails, and no other writer waits on it. Called with s.mu
// held.
func (e *Engine) abandonStage(s *session) {
	st := s.stage
	if st == nil {
		return
	}
	e.stageMu.Lock()
	if st.state == stagePending {
		st.state = stageFailed
		st.err = fmt.Errorf("%w: session %q: the log moved on before the staged append was written", ErrUnavailable, st.id)
		e.unstageLocked(st)
		close(st.done)
	}
	e.stageMu.Unlock()
}

// stagingLog is the engine's log: a write of a session with a staged
// append writes that append first, so the log never holds an event after
// (or a checkpoint over) a message it does not hold. A deletion drops it.
type stagingLog struct {
	checkpoint.Log
	e *Engine
}

func (l stagingLog) PutMeta(ctx context.Context, session string, meta checkpoint.Meta, events ...checkpoint.Event) (uint64, error) {
	if err := l.e.settle(ctx, session); err != nil {
		return 0, err
	}
	return l.Log.PutMeta(ctx, session, meta, events...)
}

func (l stagingLog) Append(ctx context.Context, session string, events []checkpoint.Event) (uint64, error) {
	if err := l.e.settle(ctx, session); err != nil {
		return 0, err
	}
	return l.Log.Append(ctx, session, events)
}

func (l stagingLog) AppendAt(ctx context.Context, session string, after uint64, events []checkpoint.Event) (uint64, error) {
	if err := l.e.settle(ctx, session); err != nil {
		return 0, err
	}
	return l.Log.AppendAt(ctx, session, after, events)
}

func (l stagingLog) PutCheckpoint(ctx context.Context, session string, cp checkpoint.Checkpoint) (checkpoint.Checkpoint, error) {
	if err := l.e.settle(ctx, session); err != nil {
		return checkpoint.Checkpoint{}, err
	}
	return l.Log.PutCheckpoint(ctx, session, cp)
}

// DeleteSession of a session created in memory and never stored
// (CreateParams.Staged) stores nothing and returns errNeverStored. A
// staged append it drops takes its offload files with it, as Discard.
func (l stagingLog) DeleteSession(ctx context.Context, session string) error {
	l.e.stageMu.Lock()
	st := l.e.staged[session]
	discarded := false
	if st != nil && st.state == stagePending {
		discarded = true
		st.state, st.err = stageDiscarded, ErrDiscarded
		l.e.unstageLocked(st)
		close(st.done)
	}
	u := l.e.creating[session]
	delete(l.e.creating, session)
	l.e.stageMu.Unlock()
	if st != nil {
		<-st.done // a write under way ends before the deletion
		if discarded {
			st.removeFiles()
		}
	}
	if u != nil {
		u.mu.Lock()
		stored := u.done && u.err == nil
		if !u.done {
			u.done, u.err = true, errNeverStored
		}
		u.mu.Unlock()
		if !stored {
			return errNeverStored
		}
	}
	return l.Log.DeleteSession(ctx, session)
}

// A session created in memory only (CreateParams.Staged; docs/design.md
// §10 "Recorded when accepted"): the provider proxy's first request of a
// conversation creates its session with nothing written, as its messages
// are staged, so that no durable write lies between the client's last
// byte and the upstream's first. The session is stored
// (checkpoint.Log.CreateSession) by the first write of its log: its staged
// append's commit, before the append's events, or any other write
// (stagingLog, settle). Until then it is never evicted, its listing row
// waits for it, and a deletion, or the Discard of its staged append,
// drops it with nothing stored. A crash before the commit loses only what
// the client resends.

// errNeverStored: the session deleted was created in memory and never
// stored (stagingLog.DeleteSession).
var errNeverStored = errors.New("session never stored")

// unstored is a session created in memory and not stored yet; Engine.
// creating holds it until it is stored, or, when storing it failed, until
// its loaded copy is dropped (lock).
type unstored struct {
	meta checkpoint.Meta
	// row is the newest listing row (saveRow), written once the session
	// is stored, and failed says storing it failed; both guarded by
	// Engine.stageMu.
	row    []byte
	failed bool
	// mu serializes storing it; done and err are the outcome
	// (errNeverStored: deleted first).
	mu   sync.Mutex
	done bool
	err  error
}

// stored reports whether the session was stored.
func (u *unstored) stored() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.done && u.err == nil
}

// holdUnstored makes s, a new session, the engine's in memory only: its
// meta is validated as the log would, and its id must be neither loaded
// nor stored. Errors: ErrExists, ErrInvalid, the log's.
func (e *Engine) holdUnstored(ctx context.Context, s *session) error {
	id := s.id
	if err := checkpoint.ValidateMeta(&s.meta); err != nil {
		return mapLogErr(id, fmt.Errorf("session %q: %w", id, err))
	}
	exists := func() bool {
		_, loaded := e.sessions[id]
		_, loading := e.loading[id]
		return loaded || loading
	}
	e.mu.Lock()
	held := exists()
	e.mu.Unlock()
	if held {
		return mapLogErr(id, checkpoint.ErrExists)
	}
	if _, err := e.opts.Log.GetMeta(ctx, id); err == nil {
		return mapLogErr(id, checkpoint.ErrExists)
	} else if !errors.Is(err, checkpoint.ErrNotFound) {
		return mapLogErr(id, err)
	}
	now := e.opts.Now().UTC()
	s.meta.Created, s.meta.Updated = now, now
	s.lastUsed.Store(now.UnixNano())
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stageMu.Lock()
	if exists() || e.creating[id] != nil {
		e.stageMu.Unlock()
		return mapLogErr(id, checkpoint.ErrExists)
	}
	if e.creating == nil {
		e.creating = map[string]*unstored{}
	}
	e.creating[id] = &unstored{meta: s.meta}
	e.stageMu.Unlock()
	e.sessions[id] = s
	e.evictLocked(id)
	return nil
}

// storeUnstored stores session id, created in memory as u, once: its
// meta, then the listing row saved meanwhile. Errors: the log's (ErrExists
// when another node of a fleet created it meanwhile), errNeverStored
// (deleted first). Never called with the session's mu required.
func (e *Engine) storeUnstored(ctx context.Context, id string, u *unstored) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.done {
		return u.err
	}
	u.done = true
	_, err := e.inner.CreateSession(context.WithoutCancel(ctx), id, u.meta)
	e.stageMu.Lock()
	if err != nil {
		u.failed = true
	} else {
		if e.creating[id] == u {
			delete(e.creating, id)
		}
		if u.row != nil {
			if err := e.inner.PutRow(id, u.row); err != nil && !errors.Is(err, checkpoint.ErrClosed) {
				e.log.Warn("listing row not saved", "session", id, "err", err)
			}
		}
	}
	u.row = nil
	e.stageMu.Unlock()
	if err != nil {
		u.err = fmt.Errorf("storing a session created in memory: %w", mapLogErr(id, err))
		e.log.Warn("session not stored; its loaded copy is dropped", "session", id, "err", err)
	}
	return u.err
}

// unstoredState reports whether session id was created in memory and is
// not stored yet (held), and whether storing it failed (then its loaded
// copy must go: the log does not have it).
func (e *Engine) unstoredState(id string) (held, failed bool) {
	e.stageMu.Lock()
	defer e.stageMu.Unlock()
	u := e.creating[id]
	return u != nil, u != nil && u.failed
}

// forgetFailedCreation drops session id's creation that could not be
// stored.
func (e *Engine) forgetFailedCreation(id string) {
	e.stageMu.Lock()
	if u := e.creating[id]; u != nil && u.failed {
		delete(e.creating, id)
	}
	e.stageMu.Unlock()
}

// holdRow keeps row as session id's listing row when the session is not
// stored yet, and reports whether it did.
func (e *Engine) holdRow(id string, row []byte) bool {
	e.stageMu.Lock()
	defer e.stageMu.Unlock()
	if u := e.creating[id]; u != nil {
		u.row = row
		return true
	}
	return false
}

// unstoredHeld reports whether session id was created in memory and is
// not stored yet, nor failed to be (a copy that failed is the log's to
// reload: lock).
func (e *Engine) unstoredHeld(id string) bool {
	held, failed := e.unstoredState(id)
	return held && !failed
}
