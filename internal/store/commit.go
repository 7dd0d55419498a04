package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/dgraph-io/badger/v4"

	"github.com/ctxd/ctxd/api"
)

// Errors returned by Committer.Commit, each carrying its api code
// (api.ErrorCoder).
var (
	// ErrClosed: the committer was closed before the write was handed over.
	ErrClosed error = api.NewCoded(api.Unavailable, "store closed").Answer(func(error) *api.Error {
		return &api.Error{Code: api.Unavailable, Message: ShuttingDown}
	})
	// ErrTooLarge: one commit exceeds what badger accepts in a single
	// transaction (about 15 % of MemTableSize, counting values below
	// ValueThreshold in full and larger ones as a 12-byte pointer).
	ErrTooLarge error = api.NewCoded(api.TooLarge, "write too large for one transaction").Answer(func(err error) *api.Error {
		return &api.Error{Code: api.TooLarge, Message: TooLargeMessage + err.Error()}
	})
)

// TooLargeMessage begins the api message of a too-large append
// (ErrTooLarge, checkpoint.ErrTooLarge); the error's text follows it.
const TooLargeMessage = "the messages take more than one append may hold (about 1.1 MB as stored: docs/api.md \"Limits\"); split them into smaller appends; nothing was stored: "

// ShuttingDown is the api message of a write to a closed store or log
// (ErrClosed, checkpoint.ErrClosed).
const ShuttingDown = "ctxd is shutting down"

// Write is one key to set, or with Delete to delete, in a commit.
type Write struct {
	Key    []byte
	Value  []byte
	Delete bool
}

// Committer group-commits writes (docs/design.md §8): every Commit call waiting at
// the same moment goes into one badger transaction, so one write-ahead-log
// sync acknowledges all of them. Badger batches concurrent transactions on its
// own, but it syncs its write-ahead log once per transaction, so many small
// transactions cost one sync each; here they cost one sync together.
//
// Each call's writes are atomic: they land in one transaction, never split.
// Calls are committed in the order they were handed over. A Committer is safe
// for concurrent use; Close it before closing the database.
type Committer struct {
	db    *badger.DB
	space *Space // nil: no guard
	reqs  chan *request
	done  chan struct{}

	mu     sync.RWMutex // guards closed and sending on reqs
	closed bool

	threshold  int64 // badger's value threshold
	batchSize  int64 // soft limit of one group transaction, bytes
	batchCount int64 // soft limit of one group transaction, entries
	maxSize    int64 // hard limit of one call, bytes
	maxCount   int64 // hard limit of one call, entries

	calls  atomic.Uint64
	groups atomic.Uint64
}

// Stats counts a Committer's work since it started.
type Stats struct {
	// Calls is the number of Commit calls committed (successfully or not).
	Calls uint64
	// Groups is the number of badger transactions (and syncs) they took.
	// Calls/Groups is the group-commit factor.
	Groups uint64
}

// Stats returns the counts so far.
func (c *Committer) Stats() Stats {
	return Stats{Calls: c.calls.Load(), Groups: c.groups.Load()}
}

type request struct {
	writes []Write
	size   int64
	count  int64
	errc   chan error
}

// NewCommitter starts the committer goroutine for db. Close stops it.
func NewCommitter(db *badger.DB) *Committer {
	// Badger rejects a transaction at MaxBatchSize/MaxBatchCount. A group
	// stops at half of that, so most groups never meet the limit even when
	// the estimate below is a little off; one call alone may use 90 %.
	c := &Committer{
		db:         db,
		space:      spaceOf(db.Opts().Dir),
		reqs:       make(chan *request, 256),
		done:       make(chan struct{}),
		threshold:  db.Opts().ValueThreshold,
		batchSize:  db.MaxBatchSize() / 2,
		batchCount: db.MaxBatchCount() / 2,
		maxSize:    db.MaxBatchSize() * 9 / 10,
		maxCount:   db.MaxBatchCount() * 9 / 10,
	}
	go c.run()
	return c
}

// MaxSize is the largest estimated size, in bytes, of one Commit call's
// writes: keys plus values below badger's value threshold plus a small
// per-entry overhead (larger values count as a 12-byte pointer).
func (c *Committer) MaxSize() int64 { return c.maxSize }

// Estimate returns the size in bytes that Commit charges for writes against
// MaxSize.
func (c *Committer) Estimate(writes []Write) int64 {
	var n int64
	for _, w := range writes {
		n += c.estimate(w)
	}
	return n
}

func (c *Committer) estimate(w Write) int64 {
	// key + 8-byte version + meta bytes, value inline or as a pointer,
	// plus slack for badger's own bookkeeping.
	n := int64(len(w.Key)) + 8 + 2 + 16
	if int64(len(w.Value)) < c.threshold {
		n += int64(len(w.Value))
	} else {
		n += 12
	}
	return n
}

// Commit writes writes atomically, and returns once they are committed
// (durable when the database was opened with SyncWrites). ctx is honoured
// only until the writes are handed to the committer: from then on Commit
// waits for the outcome, so a caller never returns while its writes may still
// land. A write that would leave less free space than the database's guard
// keeps (Options.Space) is refused before it is handed over, unless it only
// deletes. Errors: ErrTooLarge, ErrNoSpace (*SpaceError), ErrClosed, ctx's
// error, or badger's.
func (c *Committer) Commit(ctx context.Context, writes []Write) error {
	if len(writes) == 0 {
		return nil
	}
	r := &request{writes: writes, count: int64(len(writes)) + 1, errc: make(chan error, 1)}
	r.size = c.Estimate(writes)
	if r.size > c.maxSize || r.count > c.maxCount {
		return fmt.Errorf("%w: %d bytes in %d entries (limit %d bytes, %d entries)",
			ErrTooLarge, r.size, len(writes), c.maxSize, c.maxCount)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if need, sets := writeBytes(writes); sets {
		if err := c.space.Check(need); err != nil {
			return err
		}
	}
	c.mu.RLock()
	if c.closed {
		c.mu.RUnlock()
		return ErrClosed
	}
	select {
	case c.reqs <- r:
	case <-ctx.Done():
		c.mu.RUnlock()
		return ctx.Err()
	}
	c.mu.RUnlock()
	return <-r.errc
}

// Submit hands writes to the committer like Commit but returns without
// waiting for their commit: for writes that may lag a little and whose
// failure nobody waits on (a session's listing row). They are committed,
// atomically, with the next group, in the order handed over; Submit blocks
// only while the committer's queue is full. Errors: ErrTooLarge, ErrClosed.
func (c *Committer) Submit(writes []Write) error {
	if len(writes) == 0 {
		return nil
	}
	r := &request{writes: writes, count: int64(len(writes)) + 1, errc: make(chan error, 1)}
	r.size = c.Estimate(writes)
	if r.size > c.maxSize || r.count > c.maxCount {
		return fmt.Errorf("%w: %d bytes in %d entries (limit %d bytes, %d entries)",
			ErrTooLarge, r.size, len(writes), c.maxSize, c.maxCount)
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return ErrClosed
	}
	c.reqs <- r
	return nil
}

// Close commits what was handed over, then stops the committer. Later
// Commit calls return ErrClosed. Close is idempotent.
func (c *Committer) Close() error {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.reqs)
	}
	c.mu.Unlock()
	<-c.done
	return nil
}

func (c *Committer) run() {
	defer close(c.done)
	var next *request // a request that did not fit the previous group
	batch := make([]*request, 0, 64)
	for {
		r := next
		next = nil
		if r == nil {
			var ok bool
			if r, ok = <-c.reqs; !ok {
				return
			}
		}
		batch = append(batch[:0], r)
		size, count := r.size, r.count
		// Take everything already waiting, up to the group limit. No
		// timer: writers queue up while the previous group syncs, which is
		// exactly when batching pays.
	gather:
		for {
			select {
			case r2, ok := <-c.reqs:
				if !ok {
					break gather
				}
				if size+r2.size > c.batchSize || count+r2.count > c.batchCount {
					next = r2
					break gather
				}
				batch = append(batch, r2)
				size += r2.size
				count += r2.count
			default:
				break gather
			}
		}
		c.commit(batch)
		clear(batch)
	}
}

// commit writes the group in one transaction and reports the outcome to every
// member. Should badger still find the group too big (the estimate is
// conservative, so this is not expected), each member is committed alone.
func (c *Committer) commit(batch []*request) {
	c.groups.Add(1)
	err := c.commitTxn(batch)
	if errors.Is(err, badger.ErrTxnTooBig) && len(batch) > 1 {
		for _, r := range batch {
			c.commit([]*request{r})
		}
		return
	}
	if errors.Is(err, badger.ErrTxnTooBig) {
		err = fmt.Errorf("%w: %w", ErrTooLarge, err)
	}
	c.calls.Add(uint64(len(batch)))
	for _, r := range batch {
		r.errc <- err
	}
}

func (c *Committer) commitTxn(batch []*request) error {
	txn := c.db.NewTransaction(true)
	defer txn.Discard()
	for _, r := range batch {
		for _, w := range r.writes {
			var err error
			if w.Delete {
				err = txn.Delete(w.Key)
			} else {
				err = txn.SetEntry(badger.NewEntry(w.Key, w.Value))
			}
			if err != nil {
				return err
			}
		}
	}
	return txn.Commit()
}

// writeBytes is what writes put on disk at most, in bytes: every key and
// value once (inline values go to the write-ahead log, larger ones to the
// value log) plus badger's per-entry header. Deletions alone write only
// tombstones and are never refused (sets is false): deleting is how space
// is freed.
func writeBytes(writes []Write) (need uint64, sets bool) {
	for _, w := range writes {
		need += uint64(len(w.Key)) + 32
		if !w.Delete {
			sets = true
			need += uint64(len(w.Value))
		}
	}
	return need, sets
}
