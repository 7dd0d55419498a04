package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/ctxd/ctxd/internal/store"
)

// Options configure a Store.
type Options struct {
	// Now is the clock for event, checkpoint and metadata times; nil means
	// time.Now.
	Now func() time.Time
}

// Store is the badger implementation of Log (docs/design.md §8). Appends from
// all sessions go through one group committer: every append waiting at the
// same moment is committed in one transaction with one sync. Each session's
// next seq is kept in memory, loaded lazily from its last key.
//
// Store does not own the database: Close the Store, then the *badger.DB.
type Store struct {
	db     *badger.DB
	commit *store.Committer
	now    func() time.Time

	mu       sync.Mutex // guards sessions
	sessions map[string]*sessionState
	closed   chan struct{}
	once     sync.Once

	// The number of sessions, counted once by a full scan and kept up to date
	// by CreateSession and DeleteSession, so that CountSessions (every
	// /v1/status and metrics scrape) costs nothing per session stored (it used
	// to scan every session). countMu is read-locked by a create or delete
	// around its commit and count update, and write-locked by the one full
	// count, so the scan's snapshot and the count agree.
	countMu sync.RWMutex
	counted atomic.Bool
	count   atomic.Int64
}

var _ Log = (*Store)(nil)

// sessionState is the in-memory state of one session. Writers hold mu for the
// whole of a write (encode, commit), which serializes one session's writes
// and keeps its seqs contiguous and in order.
type sessionState struct {
	refs int // guarded by Store.mu

	mu     sync.Mutex
	loaded bool
	exists bool
	next   uint64        // seq of the next event
	wake   chan struct{} // made by a waiter; closed (and dropped) when the log grows or the session goes
}

// MaxSessionStates bounds the session states the Store keeps in memory
// beyond those in use: past it, states nobody holds are dropped (at
// random, down to 7/8 of the bound) and rebuilt from the store on their
// session's next call (one seek). A state is ~200 bytes: kept for every
// session, a million idle sessions would hold ~250 MB.
const MaxSessionStates = 4096

// Open returns a Store over db, which must have been opened by
// internal/store (its value threshold and sync setting are the contract of
// docs/design.md §8). It starts the group committer.
func Open(db *badger.DB, opts Options) *Store {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	return &Store{
		db:       db,
		commit:   store.NewCommitter(db),
		now:      func() time.Time { return now().UTC() },
		sessions: make(map[string]*sessionState),
		closed:   make(chan struct{}),
	}
}

// Close stops the committer after committing what was handed to it; later
// writes return ErrClosed and waiters in Wait are released with ErrClosed.
// It does not close the database.
func (st *Store) Close() error {
	st.once.Do(func() {
		close(st.closed)
		_ = st.commit.Close()
	})
	return nil
}

// acquire returns the session state of id (valid), counted as in use until
// release.
func (st *Store) acquire(id string) *sessionState {
	st.mu.Lock()
	defer st.mu.Unlock()
	s := st.sessions[id]
	if s == nil {
		if len(st.sessions) >= MaxSessionStates {
			st.shrinkLocked()
		}
		s = &sessionState{}
		st.sessions[id] = s
	}
	s.refs++
	return s
}

// shrinkLocked drops states nobody holds until at most 7/8 of
// MaxSessionStates remain (or none is left to drop). st.mu is held.
func (st *Store) shrinkLocked() {
	for id, s := range st.sessions {
		if len(st.sessions) <= MaxSessionStates*7/8 {
			return
		}
		if s.refs == 0 {
			delete(st.sessions, id)
		}
	}
}

// release drops a reference; the state of a session that does not exist is
// forgotten once unused, so probing unknown ids costs no memory.
func (st *Store) release(id string, s *sessionState) {
	st.mu.Lock()
	defer st.mu.Unlock()
	s.refs--
	if s.refs == 0 && !s.exists {
		delete(st.sessions, id)
	}
}

// load reads whether the session exists and its last seq. s.mu is held.
func (st *Store) load(id string, s *sessionState) error {
	if s.loaded {
		return nil
	}
	err := st.db.View(func(txn *badger.Txn) error {
		if _, err := txn.Get(metaKey(id)); err != nil {
			if errors.Is(err, badger.ErrKeyNotFound) {
				s.exists = false
				return nil
			}
			return err
		}
		s.exists = true
		last, err := lastSeq(txn, eventPrefix(id))
		s.next = last + 1
		return err
	})
	if err != nil {
		return fmt.Errorf("load session %q: %w", id, err)
	}
	s.loaded = true
	return nil
}

// lastSeq returns the largest seq under prefix, 0 when there is none.
func lastSeq(txn *badger.Txn, prefix []byte) (uint64, error) {
	o := badger.DefaultIteratorOptions
	o.Reverse = true
	o.PrefetchValues = false
	o.Prefix = prefix
	it := txn.NewIterator(o)
	defer it.Close()
	it.Seek(seqKey(prefix, ^uint64(0)))
	if !it.Valid() {
		return 0, nil
	}
	seq, ok := keySeq(prefix, it.Item().Key())
	if !ok {
		return 0, fmt.Errorf("%w: key %q", ErrCorrupt, it.Item().Key())
	}
	return seq, nil
}

// locked runs fn with the session's write lock held and its state loaded.
// Unless create is set, a missing session is ErrNotFound.
func (st *Store) locked(ctx context.Context, id string, create bool, fn func(s *sessionState) error) error {
	if err := ValidSessionID(id); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s := st.acquire(id)
	defer st.release(id, s)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := st.load(id, s); err != nil {
		return err
	}
	if !create && !s.exists {
		return fmt.Errorf("session %q: %w", id, ErrNotFound)
	}
	return fn(s)
}

// wakeAll tells waiters the log of s changed. s.mu is held.
func (s *sessionState) wakeAll() {
	if s.wake != nil {
		close(s.wake)
		s.wake = nil
	}
}

// prepare validates events and encodes them (without seqs, which live in
// the keys), before any lock is taken.
func (st *Store) prepare(session string, events []Event) ([][]byte, error) {
	now := st.now()
	vals := make([][]byte, len(events))
	for i := range events {
		e := events[i]
		if err := e.Validate(); err != nil {
			return nil, fmt.Errorf("session %q: event %d: %w", session, i, err)
		}
		if e.Time.IsZero() {
			e.Time = now
		} else {
			e.Time = e.Time.UTC()
		}
		if e.Message != nil && e.Message.Seq != 0 {
			m := *e.Message
			m.Seq = 0
			e.Message = &m
		}
		v, err := encodeEvent(&e)
		if err != nil {
			return nil, fmt.Errorf("session %q: event %d: %w", session, i, err)
		}
		vals[i] = v
	}
	return vals, nil
}

// write commits writes through the group committer, mapping its errors.
func (st *Store) write(ctx context.Context, what, session string, writes []store.Write) error {
	err := st.commit.Commit(ctx, writes)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrTooLarge):
		return fmt.Errorf("%s session %q: %w: %w", what, session, ErrTooLarge, err)
	case errors.Is(err, store.ErrClosed):
		return fmt.Errorf("%s session %q: %w", what, session, ErrClosed)
	default:
		return fmt.Errorf("%s session %q: %w", what, session, err)
	}
}

// Append implements Log. The events, encoded, must fit in one badger
// transaction: about 1 MiB counting events under 4 KiB in full and larger
// ones as a few bytes (they go to the value log); otherwise ErrTooLarge and
// nothing is stored. Once the events are handed to the committer, Append
// waits for the commit even if ctx ends, so it never returns while they may
// still land.
func (st *Store) Append(ctx context.Context, session string, events []Event) (uint64, error) {
	return st.appendAt(ctx, session, nil, events)
}

// AppendAt implements Log: Append, checked against the expected last seq
// under the session's write lock.
func (st *Store) AppendAt(ctx context.Context, session string, after uint64, events []Event) (uint64, error) {
	return st.appendAt(ctx, session, &after, events)
}

func (st *Store) appendAt(ctx context.Context, session string, after *uint64, events []Event) (uint64, error) {
	if err := ValidSessionID(session); err != nil {
		return 0, err
	}
	if len(events) == 0 {
		return 0, fmt.Errorf("session %q: %w: no events to append", session, ErrInvalid)
	}
	vals, err := st.prepare(session, events)
	if err != nil {
		return 0, err
	}
	var first uint64
	err = st.locked(ctx, session, false, func(s *sessionState) error {
		if after != nil && *after != s.next-1 {
			return fmt.Errorf("append to session %q after seq %d: %w: its last seq is %d", session, *after, ErrConflict, s.next-1)
		}
		first = s.next
		writes := make([]store.Write, len(vals))
		for i, v := range vals {
			writes[i] = store.Write{Key: seqKey(eventPrefix(session), first+uint64(i)), Value: v}
		}
		if err := st.write(ctx, "append to", session, writes); err != nil {
			return err
		}
		s.next += uint64(len(vals))
		s.wakeAll()
		return nil
	})
	if err != nil {
		return 0, err
	}
	return first, nil
}

// CreateSession implements Log. Keys left behind by a DeleteSession that a
// crash interrupted are removed first, so a new session never inherits an
// old one's events.
func (st *Store) CreateSession(ctx context.Context, session string, meta Meta) (Meta, error) {
	if err := meta.validate(); err != nil {
		return Meta{}, fmt.Errorf("session %q: %w", session, err)
	}
	err := st.locked(ctx, session, true, func(s *sessionState) error {
		if s.exists {
			return fmt.Errorf("session %q: %w", session, ErrExists)
		}
		if err := st.deleteKeys(session); err != nil {
			return err
		}
		now := st.now()
		meta.Created, meta.Updated = now, now
		meta.LatestCheckpoint, meta.Checkpoints = 0, 0
		v, err := encodeJSON(&meta)
		if err != nil {
			return fmt.Errorf("session %q: %w: meta: %w", session, ErrInvalid, err)
		}
		st.countMu.RLock()
		defer st.countMu.RUnlock()
		if err := st.write(ctx, "create", session, []store.Write{{Key: metaKey(session), Value: v}}); err != nil {
			return err
		}
		st.count.Add(1)
		s.exists, s.next = true, 1
		return nil
	})
	if err != nil {
		return Meta{}, err
	}
	return meta, nil
}

// getMeta reads the session's meta in txn.
func getMeta(txn *badger.Txn, session string) (Meta, error) {
	item, err := txn.Get(metaKey(session))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return Meta{}, fmt.Errorf("session %q: %w", session, ErrNotFound)
	}
	if err != nil {
		return Meta{}, fmt.Errorf("session %q: read meta: %w", session, err)
	}
	var m Meta
	err = item.Value(func(v []byte) error { return decodeJSON("session "+session+" meta", v, &m) })
	return m, err
}

// GetMeta implements Log.
func (st *Store) GetMeta(ctx context.Context, session string) (Meta, error) {
	if err := ValidSessionID(session); err != nil {
		return Meta{}, err
	}
	if err := ctx.Err(); err != nil {
		return Meta{}, err
	}
	var m Meta
	err := st.db.View(func(txn *badger.Txn) error {
		var err error
		m, err = getMeta(txn, session)
		return err
	})
	return m, err
}

// PutMeta implements Log.
func (st *Store) PutMeta(ctx context.Context, session string, meta Meta, events ...Event) (uint64, error) {
	if err := ValidSessionID(session); err != nil {
		return 0, err
	}
	if err := meta.validate(); err != nil {
		return 0, fmt.Errorf("session %q: %w", session, err)
	}
	vals, err := st.prepare(session, events)
	if err != nil {
		return 0, err
	}
	var first uint64
	err = st.locked(ctx, session, false, func(s *sessionState) error {
		old, err := st.GetMeta(ctx, session)
		if err != nil {
			return err
		}
		meta.Created, meta.Updated = old.Created, st.now()
		meta.LatestCheckpoint, meta.Checkpoints = old.LatestCheckpoint, old.Checkpoints
		v, err := encodeJSON(&meta)
		if err != nil {
			return fmt.Errorf("session %q: %w: meta: %w", session, ErrInvalid, err)
		}
		writes := []store.Write{{Key: metaKey(session), Value: v}}
		for i, v := range vals {
			writes = append(writes, store.Write{Key: seqKey(eventPrefix(session), s.next+uint64(i)), Value: v})
		}
		if err := st.write(ctx, "update", session, writes); err != nil {
			return err
		}
		if len(vals) > 0 {
			first = s.next
			s.next += uint64(len(vals))
			s.wakeAll()
		}
		return nil
	})
	return first, err
}

// LastSeq implements Log.
func (st *Store) LastSeq(ctx context.Context, session string) (uint64, error) {
	var last uint64
	err := st.locked(ctx, session, false, func(s *sessionState) error {
		last = s.next - 1
		return nil
	})
	return last, err
}

// Wait implements Log.
func (st *Store) Wait(ctx context.Context, session string, afterSeq uint64) (uint64, error) {
	if err := ValidSessionID(session); err != nil {
		return 0, err
	}
	// Hold a reference for the whole wait so the wake channel stays the
	// one appends close.
	s := st.acquire(session)
	defer st.release(session, s)
	for {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		s.mu.Lock()
		if err := st.load(session, s); err != nil {
			s.mu.Unlock()
			return 0, err
		}
		if s.wake == nil {
			s.wake = make(chan struct{})
		}
		exists, last, wake := s.exists, s.next-1, s.wake
		s.mu.Unlock()
		if !exists {
			return 0, fmt.Errorf("session %q: %w", session, ErrNotFound)
		}
		if last > afterSeq {
			return last, nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-st.closed:
			return 0, fmt.Errorf("session %q: %w", session, ErrClosed)
		}
	}
}

// Range implements Log. It reads from one snapshot of the store: events
// appended while it runs are not seen.
func (st *Store) Range(ctx context.Context, session string, fromSeq uint64, fn func(Event) error) error {
	if err := ValidSessionID(session); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return st.db.View(func(txn *badger.Txn) error {
		if _, err := getMeta(txn, session); err != nil {
			return err
		}
		prefix := eventPrefix(session)
		o := badger.DefaultIteratorOptions
		o.Prefix = prefix
		it := txn.NewIterator(o)
		defer it.Close()
		n := 0
		for it.Seek(seqKey(prefix, fromSeq)); it.Valid(); it.Next() {
			if n++; n%256 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			item := it.Item()
			seq, ok := keySeq(prefix, item.Key())
			if !ok {
				return fmt.Errorf("session %q: %w: key %q", session, ErrCorrupt, item.Key())
			}
			var e Event
			err := item.Value(func(v []byte) error {
				var err error
				e, err = decodeEvent(seq, v)
				return err
			})
			if err != nil {
				return fmt.Errorf("session %q: %w", session, err)
			}
			if err := fn(e); err != nil {
				return err
			}
		}
		return nil
	})
}

// validate checks a checkpoint to put. Errors wrap ErrInvalid.
func (cp *Checkpoint) validate() error {
	switch {
	case cp.Seq != 0:
		return fmt.Errorf("%w: checkpoint has seq %d: seqs are assigned by the log", ErrInvalid, cp.Seq)
	case cp.Summary == "":
		return fmt.Errorf("%w: checkpoint has an empty summary", ErrInvalid)
	case cp.SummaryBytes != 0 && cp.SummaryBytes != uint64(len(cp.Summary)):
		return fmt.Errorf("%w: checkpoint summary_bytes %d but the summary has %d bytes", ErrInvalid, cp.SummaryBytes, len(cp.Summary))
	case cp.SnapshotSeq == 0:
		return fmt.Errorf("%w: checkpoint has no snapshot_seq", ErrInvalid)
	case cp.FirstRetainedSeq > cp.SnapshotSeq:
		return fmt.Errorf("%w: checkpoint first_retained_seq %d is after snapshot_seq %d", ErrInvalid, cp.FirstRetainedSeq, cp.SnapshotSeq)
	}
	return nil
}

// PutCheckpoint implements Log: the checkpoint record, its event and the
// metadata (LatestCheckpoint, Checkpoints) are written in one transaction,
// so a crash leaves all three or none (docs/design.md §5.6).
func (st *Store) PutCheckpoint(ctx context.Context, session string, cp Checkpoint) (Checkpoint, error) {
	if err := ValidSessionID(session); err != nil {
		return Checkpoint{}, err
	}
	if err := cp.validate(); err != nil {
		return Checkpoint{}, fmt.Errorf("session %q: %w", session, err)
	}
	cp.SummaryBytes = uint64(len(cp.Summary))
	if cp.Time.IsZero() {
		cp.Time = st.now()
	} else {
		cp.Time = cp.Time.UTC()
	}
	err := st.locked(ctx, session, false, func(s *sessionState) error {
		if cp.SnapshotSeq >= s.next {
			return fmt.Errorf("session %q: %w: checkpoint snapshot_seq %d is past the last event %d", session, ErrInvalid, cp.SnapshotSeq, s.next-1)
		}
		var meta Meta
		var prev Checkpoint
		err := st.db.View(func(txn *badger.Txn) error {
			var err error
			if meta, err = getMeta(txn, session); err != nil {
				return err
			}
			if meta.LatestCheckpoint != 0 {
				prev, err = getCheckpoint(txn, session, meta.LatestCheckpoint)
			}
			return err
		})
		if err != nil {
			return err
		}
		if meta.LatestCheckpoint != 0 && cp.SnapshotSeq < prev.SnapshotSeq {
			return fmt.Errorf("session %q: %w: checkpoint snapshot_seq %d precedes the previous checkpoint's %d", session, ErrInvalid, cp.SnapshotSeq, prev.SnapshotSeq)
		}
		cp.Seq = s.next
		data, err := json.Marshal(cp.event())
		if err != nil {
			return err
		}
		ev, err := encodeEvent(&Event{Kind: KindCheckpoint, Time: cp.Time, Data: data})
		if err != nil {
			return err
		}
		cv, err := encodeJSON(&cp)
		if err != nil {
			return err
		}
		meta.LatestCheckpoint = cp.Seq
		meta.Checkpoints++
		meta.Updated = cp.Time
		mv, err := encodeJSON(&meta)
		if err != nil {
			return err
		}
		writes := []store.Write{
			{Key: seqKey(eventPrefix(session), cp.Seq), Value: ev},
			{Key: seqKey(cpPrefix(session), cp.Seq), Value: cv},
			{Key: metaKey(session), Value: mv},
		}
		if err := st.write(ctx, "checkpoint", session, writes); err != nil {
			return err
		}
		s.next++
		s.wakeAll()
		return nil
	})
	if err != nil {
		return Checkpoint{}, err
	}
	return cp, nil
}

func getCheckpoint(txn *badger.Txn, session string, seq uint64) (Checkpoint, error) {
	item, err := txn.Get(seqKey(cpPrefix(session), seq))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return Checkpoint{}, fmt.Errorf("session %q: checkpoint %d: %w", session, seq, ErrNotFound)
	}
	if err != nil {
		return Checkpoint{}, fmt.Errorf("session %q: read checkpoint %d: %w", session, seq, err)
	}
	var cp Checkpoint
	err = item.Value(func(v []byte) error {
		return decodeJSON(fmt.Sprintf("session %s checkpoint %d", session, seq), v, &cp)
	})
	return cp, err
}

// Latest implements Log.
func (st *Store) Latest(ctx context.Context, session string) (Checkpoint, bool, error) {
	if err := ValidSessionID(session); err != nil {
		return Checkpoint{}, false, err
	}
	if err := ctx.Err(); err != nil {
		return Checkpoint{}, false, err
	}
	var cp Checkpoint
	var ok bool
	err := st.db.View(func(txn *badger.Txn) error {
		meta, err := getMeta(txn, session)
		if err != nil || meta.LatestCheckpoint == 0 {
			return err
		}
		cp, err = getCheckpoint(txn, session, meta.LatestCheckpoint)
		ok = err == nil
		return err
	})
	return cp, ok, err
}

// GetCheckpoint implements Log.
func (st *Store) GetCheckpoint(ctx context.Context, session string, seq uint64) (Checkpoint, error) {
	if err := ValidSessionID(session); err != nil {
		return Checkpoint{}, err
	}
	if err := ctx.Err(); err != nil {
		return Checkpoint{}, err
	}
	var cp Checkpoint
	err := st.db.View(func(txn *badger.Txn) error {
		if _, err := getMeta(txn, session); err != nil {
			return err
		}
		var err error
		cp, err = getCheckpoint(txn, session, seq)
		return err
	})
	return cp, err
}

// ListCheckpoints implements Log.
func (st *Store) ListCheckpoints(ctx context.Context, session string) ([]Checkpoint, error) {
	if err := ValidSessionID(session); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var cps []Checkpoint
	err := st.db.View(func(txn *badger.Txn) error {
		if _, err := getMeta(txn, session); err != nil {
			return err
		}
		prefix := cpPrefix(session)
		o := badger.DefaultIteratorOptions
		o.Prefix = prefix
		it := txn.NewIterator(o)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			seq, ok := keySeq(prefix, it.Item().Key())
			if !ok {
				return fmt.Errorf("session %q: %w: key %q", session, ErrCorrupt, it.Item().Key())
			}
			var cp Checkpoint
			err := it.Item().Value(func(v []byte) error {
				return decodeJSON(fmt.Sprintf("session %s checkpoint %d", session, seq), v, &cp)
			})
			if err != nil {
				return err
			}
			cps = append(cps, cp)
		}
		return nil
	})
	return cps, err
}

// ListSessions implements Log. It visits one key per session (seeking past
// each session's keys), so its cost does not grow with the events stored.
func (st *Store) ListSessions(ctx context.Context) ([]string, error) {
	var ids []string
	err := st.scanSessions(ctx, "", func(_ *badger.Txn, id string) (bool, error) {
		ids = append(ids, id)
		return true, nil
	})
	slices.Sort(ids)
	return ids, err
}

// CountSessions implements Log. The first call counts by visiting one key
// per session, as ListSessions does, while creates and deletes wait; from
// then on the count is kept by CreateSession and DeleteSession and a call
// costs nothing per session stored (/v1/status and every metrics scrape
// count).
func (st *Store) CountSessions(ctx context.Context) (int, error) {
	if st.counted.Load() {
		return int(st.count.Load()), nil
	}
	st.countMu.Lock()
	defer st.countMu.Unlock()
	if st.counted.Load() {
		return int(st.count.Load()), nil
	}
	n := 0
	err := st.scanSessions(ctx, "", func(txn *badger.Txn, id string) (bool, error) {
		n++
		return true, nil
	})
	if err != nil {
		return 0, err
	}
	// Creates and deletes before the count added to st.count too: the scan
	// replaces it.
	st.count.Store(int64(n))
	st.counted.Store(true)
	return n, nil
}

// scanSessions calls fn with each session (a meta record exists) after the
// session id after, in key order, until fn returns false or an error, then
// each of end before the read transaction ends. Keys
// without a meta record are leftovers of an interrupted delete (or a
// listing row written after one): not a session.
func (st *Store) scanSessions(ctx context.Context, after string, fn func(txn *badger.Txn, id string) (bool, error), end ...func()) error {
	return st.db.View(func(txn *badger.Txn) error {
		for _, f := range end {
			defer f() // inside the transaction: fn's iterators close here
		}
		o := badger.DefaultIteratorOptions
		o.PrefetchValues = false
		o.Prefix = []byte("s/")
		it := txn.NewIterator(o)
		defer it.Close()
		start := []byte("s/")
		if after != "" {
			start = append(sessionPrefix(after), 0xff)
		}
		for it.Seek(start); it.Valid(); {
			if err := ctx.Err(); err != nil {
				return err
			}
			key := it.Item().Key()
			end := bytes.IndexByte(key[2:], '/')
			if end < 0 {
				return fmt.Errorf("%w: key %q", ErrCorrupt, key)
			}
			id := string(key[2 : 2+end])
			if _, err := txn.Get(metaKey(id)); err == nil {
				more, err := fn(txn, id)
				if err != nil || !more {
					return err
				}
			} else if !errors.Is(err, badger.ErrKeyNotFound) {
				return err
			}
			it.Seek(append(sessionPrefix(id), 0xff))
		}
		return nil
	})
}

// ListPage implements Log: one read transaction for the page, a few point
// reads and one seek per session, whatever the number of sessions stored.
func (st *Store) ListPage(ctx context.Context, after string, limit int) ([]Listed, bool, error) {
	if after != "" {
		if err := ValidSessionID(after); err != nil {
			return nil, false, err
		}
	}
	if limit < 1 {
		return nil, false, fmt.Errorf("%w: limit %d: must be at least 1", ErrInvalid, limit)
	}
	var page []Listed
	more := false
	var rev *badger.Iterator // one reverse iterator for the page's last seqs
	closeRev := func() {
		if rev != nil {
			rev.Close()
		}
	}
	err := st.scanSessions(ctx, after, func(txn *badger.Txn, id string) (bool, error) {
		if len(page) == limit {
			more = true
			return false, nil
		}
		meta, err := getMeta(txn, id)
		if err != nil {
			return false, err
		}
		l := Listed{ID: id, Meta: meta}
		switch item, err := txn.Get(rowKey(id)); {
		case err == nil:
			if l.Row, err = item.ValueCopy(nil); err != nil {
				return false, err
			}
		case !errors.Is(err, badger.ErrKeyNotFound):
			return false, err
		}
		if rev == nil {
			o := badger.DefaultIteratorOptions
			o.Reverse = true
			o.PrefetchValues = false
			o.Prefix = []byte("s/")
			rev = txn.NewIterator(o)
		}
		prefix := eventPrefix(id)
		if rev.Seek(seqKey(prefix, ^uint64(0))); rev.ValidForPrefix(prefix) {
			seq, ok := keySeq(prefix, rev.Item().Key())
			if !ok {
				return false, fmt.Errorf("%w: key %q", ErrCorrupt, rev.Item().Key())
			}
			l.LastSeq = seq
		}
		page = append(page, l)
		return true, nil
	}, closeRev)
	if err != nil {
		return nil, false, err
	}
	return page, more, nil
}

// PutRow implements Log.
func (st *Store) PutRow(session string, row []byte) error {
	if err := ValidSessionID(session); err != nil {
		return err
	}
	if len(row) > MaxRowBytes {
		return fmt.Errorf("session %q: %w: listing row of %d bytes (at most %d)", session, ErrTooLarge, len(row), MaxRowBytes)
	}
	err := st.commit.Submit([]store.Write{{Key: rowKey(session), Value: bytes.Clone(row)}})
	if errors.Is(err, store.ErrClosed) {
		return fmt.Errorf("session %q: %w", session, ErrClosed)
	}
	return err
}

// DeleteSession implements Log. The meta record goes first, in a synced
// commit: from then on the session does not exist. Its events and
// checkpoints are deleted after; if a crash interrupts that, the leftovers
// are invisible and removed by the next CreateSession of the same id.
func (st *Store) DeleteSession(ctx context.Context, session string) error {
	return st.locked(ctx, session, false, func(s *sessionState) error {
		st.countMu.RLock()
		err := st.write(ctx, "delete", session, []store.Write{{Key: metaKey(session), Delete: true}})
		if err == nil {
			st.count.Add(-1)
		}
		st.countMu.RUnlock()
		if err != nil {
			return err
		}
		s.exists, s.next = false, 1
		s.wakeAll()
		return st.deleteKeys(session)
	})
}

// deleteKeys removes every key of the session, in batches that need not be
// atomic. The session's write lock is held.
func (st *Store) deleteKeys(session string) error {
	var keys [][]byte
	err := st.db.View(func(txn *badger.Txn) error {
		o := badger.DefaultIteratorOptions
		o.PrefetchValues = false
		o.Prefix = sessionPrefix(session)
		it := txn.NewIterator(o)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			keys = append(keys, it.Item().KeyCopy(nil))
		}
		return nil
	})
	if err != nil || len(keys) == 0 {
		return err
	}
	wb := st.db.NewWriteBatch()
	defer wb.Cancel()
	for _, k := range keys {
		if err := wb.Delete(k); err != nil {
			return fmt.Errorf("delete session %q: %w", session, err)
		}
	}
	if err := wb.Flush(); err != nil {
		return fmt.Errorf("delete session %q: %w", session, err)
	}
	return nil
}
