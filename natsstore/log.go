package natsstore

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxd/ctxd/checkpoint"
)

// Record headers. One stream message (a record) holds the events of one
// Append, so an append is atomic; its headers say which seqs it holds.
const (
	hdrFirst      = "Ctxd-First"      // seq of the record's first event
	hdrCount      = "Ctxd-Count"      // number of events
	hdrCheckpoint = "Ctxd-Checkpoint" // "1": the record is one checkpoint
)

// maxConflictRetries bounds the retries of a write that lost the race for
// its position (another node wrote first) before it gives up.
const maxConflictRetries = 64

// Log is checkpoint.Log on JetStream (docs/design.md §9). Event seqs are
// per-session and contiguous as in the badger store; each record's stream
// sequence is only used as the expected last subject sequence of the next
// write. A node keeps, per session it touched, an index of the records it
// has read (a few words per append), refreshed from the stream before each
// use.
type Log struct {
	st  *Store
	now func() time.Time

	mu       sync.Mutex
	sessions map[string]*index

	pub *batcher // publishes records, in batches when several wait

	rows    chan struct{}
	rowMu   sync.Mutex
	pending map[string][]byte
	done    chan struct{}
	wg      sync.WaitGroup
}

var _ checkpoint.Log = (*Log)(nil)

// index is what a node knows of one session's subject.
type index struct {
	mu        sync.Mutex
	streamSeq uint64 // stream sequence of the last record read (0: none)
	last      uint64 // last event seq
	recs      []rec  // records in order
	cps       []cpRec
}

// reset forgets what x knew. x.mu is held.
func (x *index) reset() { x.streamSeq, x.last, x.recs, x.cps = 0, 0, nil, nil }

type rec struct {
	first, count, streamSeq uint64
}

type cpRec struct {
	seq, snapshot, streamSeq uint64
}

func newLog(st *Store) *Log {
	l := &Log{st: st, now: st.opts.Now, sessions: map[string]*index{}, rows: make(chan struct{}, 1), pending: map[string][]byte{}, done: make(chan struct{})}
	l.pub = newBatcher(st, st.events.CachedInfo().Config.AllowAtomicPublish && !st.opts.noBatches, l.done)
	l.wg.Add(1)
	go l.writeRows()
	return l
}

func (l *Log) close() {
	select {
	case <-l.done:
		return
	default:
	}
	close(l.done)
	l.wg.Wait()
	l.pub.wg.Wait()
}

func hexID(session string) string { return hex.EncodeToString([]byte(session)) }

func (l *Log) subject(session string) string { return l.st.prefix + ".ev." + hexID(session) }

func metaKey(session string) string { return "m." + hexID(session) }

func rowKey(session string) string { return "r." + hexID(session) }

// maxIndexes bounds the sessions whose index a node keeps; beyond it,
// unused ones are dropped (and rebuilt from the stream on next use).
const maxIndexes = 4096

func (l *Log) idx(session string) *index {
	l.mu.Lock()
	defer l.mu.Unlock()
	x := l.sessions[session]
	if x == nil {
		if len(l.sessions) >= maxIndexes {
			// A caller may still hold a dropped index: harmless, every
			// use syncs with the stream and writes are checked by it.
			for id, y := range l.sessions {
				if len(l.sessions) < maxIndexes*7/8 {
					break
				}
				if y.mu.TryLock() {
					delete(l.sessions, id)
					y.mu.Unlock()
				}
			}
		}
		x = &index{}
		l.sessions[session] = x
	}
	return x
}

// wrongLast reports a publish refused for its expected last subject
// sequence (code 10071, or 10164 on replicated streams).
func wrongLast(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

func (l *Log) getMeta(ctx context.Context, session string) (checkpoint.Meta, uint64, error) {
	if err := l.st.up(); err != nil {
		return checkpoint.Meta{}, 0, err
	}
	var e jetstream.KeyValueEntry
	err := l.st.ride(ctx, fmt.Sprintf("session %q: read meta", session), opRead, func(ctx context.Context) (err error) {
		e, err = l.st.meta.Get(ctx, metaKey(session))
		return err
	})
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return checkpoint.Meta{}, 0, fmt.Errorf("session %q: %w", session, checkpoint.ErrNotFound)
	}
	if err != nil {
		return checkpoint.Meta{}, 0, fmt.Errorf("session %q: read meta: %w", session, err)
	}
	var m checkpoint.Meta
	if err := json.Unmarshal(e.Value(), &m); err != nil {
		return checkpoint.Meta{}, 0, fmt.Errorf("session %q: %w: meta: %w", session, checkpoint.ErrCorrupt, err)
	}
	return m, e.Revision(), nil
}

// sync brings x up to the subject's last record. x.mu is held.
func (l *Log) sync(ctx context.Context, session string, x *index) error {
	if err := l.st.up(); err != nil {
		return err
	}
	var last *jetstream.RawStreamMsg
	err := l.st.ride(ctx, fmt.Sprintf("session %q: read the last record", session), opRead, func(ctx context.Context) (err error) {
		last, err = l.st.events.GetLastMsgForSubject(ctx, l.subject(session))
		return err
	})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		x.reset()
		return nil
	}
	if err != nil {
		return fmt.Errorf("session %q: read the last record: %w", session, err)
	}
	switch {
	case last.Sequence == x.streamSeq:
		return nil
	case last.Sequence < x.streamSeq:
		x.reset() // purged and written again: read it all
	}
	return l.scan(ctx, session, x.streamSeq+1, last.Sequence, func(m *jetstream.RawStreamMsg) error {
		first, count, err := recHeaders(m.Header)
		if err != nil {
			return fmt.Errorf("session %q: record %d: %w", session, m.Sequence, err)
		}
		switch {
		case first == 1:
			x.reset() // a new incarnation of a deleted session starts at 1
		case first != x.last+1:
			return fmt.Errorf("session %q: %w: record %d starts at seq %d after seq %d", session, checkpoint.ErrCorrupt, m.Sequence, first, x.last)
		}
		x.recs = append(x.recs, rec{first: first, count: count, streamSeq: m.Sequence})
		if m.Header.Get(hdrCheckpoint) == "1" {
			cp, err := decodeCheckpoint(m.Data)
			if err != nil {
				return fmt.Errorf("session %q: record %d: %w", session, m.Sequence, err)
			}
			x.cps = append(x.cps, cpRec{seq: first, snapshot: cp.SnapshotSeq, streamSeq: m.Sequence})
		}
		x.last = first + count - 1
		x.streamSeq = m.Sequence
		return nil
	})
}

func recHeaders(h nats.Header) (first, count uint64, err error) {
	first, err1 := strconv.ParseUint(h.Get(hdrFirst), 10, 64)
	count, err2 := strconv.ParseUint(h.Get(hdrCount), 10, 64)
	if err1 != nil || err2 != nil || first == 0 || count == 0 {
		return 0, 0, fmt.Errorf("%w: bad record headers %q/%q", checkpoint.ErrCorrupt, h.Get(hdrFirst), h.Get(hdrCount))
	}
	return first, count, nil
}

// scan calls fn with each record of the session's subject whose stream
// sequence is in [from, to], in order: direct gets of the next record of
// the subject, one request per record (deterministic, served by any
// replica: AllowDirect).
func (l *Log) scan(ctx context.Context, session string, from, to uint64, fn func(*jetstream.RawStreamMsg) error) error {
	if err := l.st.up(); err != nil {
		return err
	}
	subj := l.subject(session)
	for seq := from; seq <= to; {
		var m *jetstream.RawStreamMsg
		err := l.st.ride(ctx, fmt.Sprintf("session %q: read a record", session), opRead, func(ctx context.Context) (err error) {
			m, err = l.st.events.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subj))
			return err
		})
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil // purged meanwhile
		}
		if err != nil {
			return fmt.Errorf("session %q: read the record at or after %d: %w", session, seq, err)
		}
		if m.Sequence > to {
			return nil
		}
		if err := fn(m); err != nil {
			return err
		}
		seq = m.Sequence + 1
	}
	return nil
}

// readRecord reads the record at stream sequence seq.
func (l *Log) readRecord(ctx context.Context, session string, seq uint64) (*jetstream.RawStreamMsg, error) {
	if err := l.st.up(); err != nil {
		return nil, err
	}
	var m *jetstream.RawStreamMsg
	err := l.st.ride(ctx, fmt.Sprintf("session %q: read record %d", session, seq), opRead, func(ctx context.Context) (err error) {
		m, err = l.st.events.GetMsg(ctx, seq)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("session %q: read record %d: %w", session, seq, err)
	}
	return m, nil
}

// newMsgID returns a message id for one write: 128 random bits.
func newMsgID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// encodeRecord joins encoded events, each as a uvarint length then bytes.
func encodeRecord(vals [][]byte) []byte {
	n := 0
	for _, v := range vals {
		n += binary.MaxVarintLen64 + len(v)
	}
	b := make([]byte, 0, n)
	for _, v := range vals {
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	return b
}

// decodeRecord splits a record's data into its encoded events and, for a
// checkpoint record, the checkpoint JSON that follows them.
func decodeRecord(b []byte, count uint64) (vals [][]byte, rest []byte, err error) {
	for range count {
		n, w := binary.Uvarint(b)
		if w <= 0 || n > uint64(len(b)-w) {
			return nil, nil, fmt.Errorf("%w: bad record section", checkpoint.ErrCorrupt)
		}
		vals = append(vals, b[w:w+int(n)])
		b = b[w+int(n):]
	}
	return vals, b, nil
}

func decodeCheckpoint(data []byte) (checkpoint.Checkpoint, error) {
	_, rest, err := decodeRecord(data, 1)
	if err != nil {
		return checkpoint.Checkpoint{}, err
	}
	var cp checkpoint.Checkpoint
	if err := json.Unmarshal(rest, &cp); err != nil {
		return checkpoint.Checkpoint{}, fmt.Errorf("%w: checkpoint: %w", checkpoint.ErrCorrupt, err)
	}
	return cp, nil
}

func (l *Log) prepare(session string, events []checkpoint.Event) ([][]byte, error) {
	vals := make([][]byte, len(events))
	for i := range events {
		e, err := checkpoint.PrepareEvent(events[i], l.now)
		if err != nil {
			return nil, fmt.Errorf("session %q: event %d: %w", session, i, err)
		}
		if vals[i], err = checkpoint.EncodeEvent(&e); err != nil {
			return nil, fmt.Errorf("session %q: event %d: %w", session, i, err)
		}
	}
	return vals, nil
}

// publish writes one record after x's last record; ok false means another
// writer got there first (x is stale). x.mu is held. msgID is the
// record's message id, the same for every try of one write: a try that got
// no answer is made again (Store.ride), and JetStream answers a repeat of a
// stored one as a duplicate, with its sequence, instead of storing it
// twice.
func (l *Log) publish(ctx context.Context, session string, x *index, count uint64, data []byte, isCheckpoint bool, msgID string) (first uint64, ok bool, err error) {
	if err := l.st.up(); err != nil {
		return 0, false, err
	}
	first = x.last + 1
	m := nats.NewMsg(l.subject(session))
	m.Header.Set(jetstream.MsgIDHeader, msgID)
	m.Header.Set(hdrFirst, strconv.FormatUint(first, 10))
	m.Header.Set(hdrCount, strconv.FormatUint(count, 10))
	if isCheckpoint {
		m.Header.Set(hdrCheckpoint, "1")
	}
	m.Data = data
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(x.streamSeq, 10))
	var ack *jetstream.PubAck
	err = l.st.ride(ctx, fmt.Sprintf("session %q: publish", session), opWriteIdempotent, func(ctx context.Context) (err error) {
		ack, err = l.pub.publish(ctx, m)
		return err
	})
	switch {
	case wrongLast(err):
		return 0, false, nil
	case errors.Is(err, nats.ErrMaxPayload):
		return 0, false, fmt.Errorf("session %q: %w: a record of %d bytes is over the servers' max_payload", session, checkpoint.ErrTooLarge, len(data))
	case err != nil:
		return 0, false, fmt.Errorf("session %q: publish: %w", session, err)
	case ack.Duplicate:
		// An earlier try was stored: answer with it.
		if err := l.sync(ctx, session, x); err != nil {
			return 0, false, fmt.Errorf("%w: session %q: a retried publish was stored before, and reading it back failed: %w", checkpoint.ErrUncertain, session, err)
		}
		for _, r := range x.recs {
			if r.streamSeq == ack.Sequence {
				return r.first, true, nil
			}
		}
		return 0, false, fmt.Errorf("%w: session %q: a retried publish was stored before as record %d, which is gone", checkpoint.ErrUncertain, session, ack.Sequence)
	}
	x.recs = append(x.recs, rec{first: first, count: count, streamSeq: ack.Sequence})
	x.streamSeq, x.last = ack.Sequence, first+count-1
	return first, true, nil
}

// Append implements checkpoint.Log: one record, published with the expected
// last subject sequence and acknowledged once JetStream stored it at the
// stream's replication factor; retried on a lost race. The encoded events
// must fit in one message (the servers' max_payload, 1 MiB by default);
// otherwise checkpoint.ErrTooLarge.
func (l *Log) Append(ctx context.Context, session string, events []checkpoint.Event) (uint64, error) {
	return l.appendAt(ctx, session, nil, events)
}

// AppendAt implements checkpoint.Log.
func (l *Log) AppendAt(ctx context.Context, session string, after uint64, events []checkpoint.Event) (uint64, error) {
	return l.appendAt(ctx, session, &after, events)
}

func (l *Log) appendAt(ctx context.Context, session string, after *uint64, events []checkpoint.Event) (uint64, error) {
	if err := checkpoint.ValidSessionID(session); err != nil {
		return 0, err
	}
	if len(events) == 0 {
		return 0, fmt.Errorf("session %q: %w: no events to append", session, checkpoint.ErrInvalid)
	}
	vals, err := l.prepare(session, events)
	if err != nil {
		return 0, err
	}
	data := encodeRecord(vals)
	msgID := newMsgID()
	x := l.idx(session)
	x.mu.Lock()
	defer x.mu.Unlock()
	// The session must exist. A node that has read or written its records
	// (x.streamSeq set) skips the metadata read: were the session deleted
	// since, its records are purged and the publish, which expects the
	// last one, is refused; the metadata is read then, below.
	if x.streamSeq == 0 {
		if _, _, err := l.getMeta(ctx, session); err != nil {
			return 0, err
		}
	}
	for range maxConflictRetries {
		if after != nil && *after != x.last {
			if err := l.sync(ctx, session, x); err != nil {
				return 0, err
			}
			if *after != x.last {
				return 0, fmt.Errorf("append to session %q after seq %d: %w: its last seq is %d", session, *after, checkpoint.ErrConflict, x.last)
			}
		}
		first, ok, err := l.publish(ctx, session, x, uint64(len(vals)), data, false, msgID)
		if err != nil || ok {
			return first, err
		}
		if _, _, err := l.getMeta(ctx, session); err != nil {
			return 0, err // deleted meanwhile
		}
		if err := l.sync(ctx, session, x); err != nil {
			return 0, err
		}
	}
	return 0, fmt.Errorf("append to session %q: %w: lost the race for a position %d times", session, checkpoint.ErrConflict, maxConflictRetries)
}

// CreateSession implements checkpoint.Log: the meta key is created (it
// fails when it exists), then records a crashed delete left behind are
// purged.
func (l *Log) CreateSession(ctx context.Context, session string, meta checkpoint.Meta) (checkpoint.Meta, error) {
	if err := checkpoint.ValidSessionID(session); err != nil {
		return checkpoint.Meta{}, err
	}
	if err := l.st.up(); err != nil {
		return checkpoint.Meta{}, err
	}
	if err := checkpoint.ValidateMeta(&meta); err != nil {
		return checkpoint.Meta{}, fmt.Errorf("session %q: %w", session, err)
	}
	var leftover uint64
	if m, err := l.st.events.GetLastMsgForSubject(ctx, l.subject(session)); err == nil {
		leftover = m.Sequence
	} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
		return checkpoint.Meta{}, fmt.Errorf("session %q: %w", session, err)
	}
	now := l.now().UTC()
	meta.Created, meta.Updated = now, now
	meta.LatestCheckpoint, meta.Checkpoints = 0, 0
	v, err := json.Marshal(&meta)
	if err != nil {
		return checkpoint.Meta{}, fmt.Errorf("session %q: %w: meta: %w", session, checkpoint.ErrInvalid, err)
	}
	if err := l.st.ride(ctx, fmt.Sprintf("create session %q", session), opWriteOnce, func(ctx context.Context) error {
		_, err := l.st.meta.Create(ctx, metaKey(session), v)
		return err
	}); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) || wrongLast(err) {
			return checkpoint.Meta{}, fmt.Errorf("session %q: %w", session, checkpoint.ErrExists)
		}
		return checkpoint.Meta{}, fmt.Errorf("create session %q: %w", session, err)
	}
	if leftover > 0 {
		if err := l.st.events.Purge(ctx, jetstream.WithPurgeSubject(l.subject(session)), jetstream.WithPurgeSequence(leftover+1)); err != nil {
			return checkpoint.Meta{}, fmt.Errorf("create session %q: purge the records of a deleted session: %w", session, err)
		}
	}
	x := l.idx(session)
	x.mu.Lock()
	x.reset()
	x.mu.Unlock()
	return meta, nil
}

// GetMeta implements checkpoint.Log; LatestCheckpoint and Checkpoints come
// from the session's records.
func (l *Log) GetMeta(ctx context.Context, session string) (checkpoint.Meta, error) {
	if err := checkpoint.ValidSessionID(session); err != nil {
		return checkpoint.Meta{}, err
	}
	m, _, err := l.getMeta(ctx, session)
	if err != nil {
		return m, err
	}
	x := l.idx(session)
	x.mu.Lock()
	defer x.mu.Unlock()
	if err := l.sync(ctx, session, x); err != nil {
		return checkpoint.Meta{}, err
	}
	l.fillMeta(&m, x)
	return m, nil
}

func (l *Log) fillMeta(m *checkpoint.Meta, x *index) {
	m.Checkpoints = uint64(len(x.cps))
	m.LatestCheckpoint = 0
	if n := len(x.cps); n > 0 {
		m.LatestCheckpoint = x.cps[n-1].seq
	}
}

// PutMeta implements checkpoint.Log: the meta key is updated by revision
// (retried when another node updated it meanwhile), then events are
// appended. The two are not one transaction: a node that dies between
// leaves the metadata updated without its session_updated event.
func (l *Log) PutMeta(ctx context.Context, session string, meta checkpoint.Meta, events ...checkpoint.Event) (uint64, error) {
	if err := checkpoint.ValidSessionID(session); err != nil {
		return 0, err
	}
	if err := l.st.up(); err != nil {
		return 0, err
	}
	if err := checkpoint.ValidateMeta(&meta); err != nil {
		return 0, fmt.Errorf("session %q: %w", session, err)
	}
	if _, err := l.prepare(session, events); err != nil {
		return 0, err
	}
	for i := 0; ; i++ {
		old, rev, err := l.getMeta(ctx, session)
		if err != nil {
			return 0, err
		}
		meta.Created, meta.Updated = old.Created, l.now().UTC()
		meta.LatestCheckpoint, meta.Checkpoints = 0, 0
		v, err := json.Marshal(&meta)
		if err != nil {
			return 0, fmt.Errorf("session %q: %w: meta: %w", session, checkpoint.ErrInvalid, err)
		}
		err = l.st.ride(ctx, fmt.Sprintf("update session %q", session), opWriteIdempotent, func(ctx context.Context) error {
			_, err := l.st.meta.Update(ctx, metaKey(session), v, rev)
			return err
		})
		if err == nil {
			break
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !wrongLast(err) || i == maxConflictRetries {
			return 0, fmt.Errorf("update session %q: %w", session, err)
		}
	}
	if len(events) == 0 {
		return 0, nil
	}
	return l.Append(ctx, session, events)
}

// LastSeq implements checkpoint.Log.
func (l *Log) LastSeq(ctx context.Context, session string) (uint64, error) {
	if err := checkpoint.ValidSessionID(session); err != nil {
		return 0, err
	}
	x := l.idx(session)
	x.mu.Lock()
	defer x.mu.Unlock()
	// One request when this node knows the session's records: their last
	// one. The metadata is read too when it does not, or when the records
	// are gone (the session deleted, or deleted and created again).
	known := x.streamSeq != 0
	if !known {
		if _, _, err := l.getMeta(ctx, session); err != nil {
			return 0, err
		}
	}
	if err := l.sync(ctx, session, x); err != nil {
		return 0, err
	}
	if known && x.streamSeq == 0 {
		if _, _, err := l.getMeta(ctx, session); err != nil {
			return 0, err
		}
	}
	return x.last, nil
}

// Wait implements checkpoint.Log: it listens to the session's subject and
// re-reads the last seq on each record published (and every second, to
// notice a deletion).
func (l *Log) Wait(ctx context.Context, session string, afterSeq uint64) (uint64, error) {
	if err := checkpoint.ValidSessionID(session); err != nil {
		return 0, err
	}
	if err := l.st.up(); err != nil {
		return 0, err
	}
	wake := make(chan struct{}, 1)
	sub, err := l.st.nc.Subscribe(l.subject(session), func(*nats.Msg) {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return 0, fmt.Errorf("session %q: %w", session, err)
	}
	defer sub.Unsubscribe()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		last, err := l.LastSeq(ctx, session)
		if err != nil {
			return 0, err
		}
		if last > afterSeq {
			return last, nil
		}
		select {
		case <-wake:
		case <-tick.C:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-l.done:
			return 0, fmt.Errorf("session %q: %w", session, checkpoint.ErrClosed)
		}
	}
}

// Range implements checkpoint.Log. It reads up to the last record at its
// start: events appended while it runs are not seen.
func (l *Log) Range(ctx context.Context, session string, fromSeq uint64, fn func(checkpoint.Event) error) error {
	if err := checkpoint.ValidSessionID(session); err != nil {
		return err
	}
	if _, _, err := l.getMeta(ctx, session); err != nil {
		return err
	}
	x := l.idx(session)
	x.mu.Lock()
	if err := l.sync(ctx, session, x); err != nil {
		x.mu.Unlock()
		return err
	}
	i, _ := slices.BinarySearchFunc(x.recs, fromSeq, func(r rec, seq uint64) int {
		switch {
		case r.first+r.count-1 < seq:
			return -1
		case r.first > seq:
			return 1
		}
		return 0
	})
	recs := slices.Clone(x.recs[i:])
	x.mu.Unlock()
	for _, r := range recs {
		m, err := l.readRecord(ctx, session, r.streamSeq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("session %q: %w", session, checkpoint.ErrNotFound) // deleted meanwhile
		}
		if err != nil {
			return err
		}
		vals, _, err := decodeRecord(m.Data, r.count)
		if err != nil {
			return fmt.Errorf("session %q: record %d: %w", session, m.Sequence, err)
		}
		for j, v := range vals {
			seq := r.first + uint64(j)
			if seq < fromSeq {
				continue
			}
			ev, err := checkpoint.DecodeEvent(seq, v)
			if err != nil {
				return fmt.Errorf("session %q: %w", session, err)
			}
			if err := fn(ev); err != nil {
				return err
			}
		}
	}
	return nil
}

// PutCheckpoint implements checkpoint.Log: the checkpoint is one record
// (its event, then the whole checkpoint) written with the expected last
// subject sequence. A checkpoint of a snapshot a previous checkpoint
// already covers is refused with checkpoint.ErrConflict: two nodes that
// compacted the same snapshot commit one checkpoint (docs/design.md §9).
func (l *Log) PutCheckpoint(ctx context.Context, session string, cp checkpoint.Checkpoint) (checkpoint.Checkpoint, error) {
	if err := checkpoint.ValidSessionID(session); err != nil {
		return checkpoint.Checkpoint{}, err
	}
	if err := checkpoint.ValidateCheckpoint(&cp); err != nil {
		return checkpoint.Checkpoint{}, fmt.Errorf("session %q: %w", session, err)
	}
	cp.SummaryBytes = uint64(len(cp.Summary))
	if cp.Time.IsZero() {
		cp.Time = l.now().UTC()
	} else {
		cp.Time = cp.Time.UTC()
	}
	if _, _, err := l.getMeta(ctx, session); err != nil {
		return checkpoint.Checkpoint{}, err
	}
	msgID := newMsgID()
	x := l.idx(session)
	x.mu.Lock()
	defer x.mu.Unlock()
	if err := l.sync(ctx, session, x); err != nil {
		return checkpoint.Checkpoint{}, err
	}
	for range maxConflictRetries {
		if cp.SnapshotSeq > x.last {
			return checkpoint.Checkpoint{}, fmt.Errorf("session %q: %w: checkpoint snapshot_seq %d is past the last event %d", session, checkpoint.ErrInvalid, cp.SnapshotSeq, x.last)
		}
		if n := len(x.cps); n > 0 {
			prev := x.cps[n-1].snapshot
			if cp.SnapshotSeq < prev {
				return checkpoint.Checkpoint{}, fmt.Errorf("session %q: %w: checkpoint snapshot_seq %d precedes the previous checkpoint's %d", session, checkpoint.ErrInvalid, cp.SnapshotSeq, prev)
			}
			if cp.SnapshotSeq == prev {
				return checkpoint.Checkpoint{}, fmt.Errorf("session %q: %w: snapshot %d already has checkpoint %d", session, checkpoint.ErrConflict, prev, x.cps[n-1].seq)
			}
		}
		cp.Seq = x.last + 1
		data, err := checkpoint.CheckpointEventData(&cp)
		if err != nil {
			return checkpoint.Checkpoint{}, err
		}
		ev, err := checkpoint.EncodeEvent(&checkpoint.Event{Kind: checkpoint.KindCheckpoint, Time: cp.Time, Data: data})
		if err != nil {
			return checkpoint.Checkpoint{}, err
		}
		cj, err := json.Marshal(&cp)
		if err != nil {
			return checkpoint.Checkpoint{}, err
		}
		rec := append(encodeRecord([][]byte{ev}), cj...)
		first, ok, err := l.publish(ctx, session, x, 1, rec, true, msgID)
		if err != nil {
			return checkpoint.Checkpoint{}, err
		}
		if ok {
			if n := len(x.cps); n == 0 || x.cps[n-1].seq != first { // a duplicate's sync read it
				x.cps = append(x.cps, cpRec{seq: cp.Seq, snapshot: cp.SnapshotSeq, streamSeq: x.streamSeq})
			}
			return cp, nil
		}
		if err := l.sync(ctx, session, x); err != nil {
			return checkpoint.Checkpoint{}, err
		}
	}
	return checkpoint.Checkpoint{}, fmt.Errorf("checkpoint session %q: %w: lost the race for a position %d times", session, checkpoint.ErrConflict, maxConflictRetries)
}

// checkpoints returns the session's checkpoint records after a sync.
func (l *Log) checkpoints(ctx context.Context, session string) ([]cpRec, error) {
	if err := checkpoint.ValidSessionID(session); err != nil {
		return nil, err
	}
	if _, _, err := l.getMeta(ctx, session); err != nil {
		return nil, err
	}
	x := l.idx(session)
	x.mu.Lock()
	defer x.mu.Unlock()
	if err := l.sync(ctx, session, x); err != nil {
		return nil, err
	}
	return slices.Clone(x.cps), nil
}

func (l *Log) readCheckpoint(ctx context.Context, session string, r cpRec) (checkpoint.Checkpoint, error) {
	m, err := l.readRecord(ctx, session, r.streamSeq)
	if err != nil {
		return checkpoint.Checkpoint{}, err
	}
	cp, err := decodeCheckpoint(m.Data)
	if err != nil {
		return checkpoint.Checkpoint{}, fmt.Errorf("session %q: checkpoint %d: %w", session, r.seq, err)
	}
	return cp, nil
}

// Latest implements checkpoint.Log.
func (l *Log) Latest(ctx context.Context, session string) (checkpoint.Checkpoint, bool, error) {
	cps, err := l.checkpoints(ctx, session)
	if err != nil || len(cps) == 0 {
		return checkpoint.Checkpoint{}, false, err
	}
	cp, err := l.readCheckpoint(ctx, session, cps[len(cps)-1])
	return cp, err == nil, err
}

// GetCheckpoint implements checkpoint.Log.
func (l *Log) GetCheckpoint(ctx context.Context, session string, seq uint64) (checkpoint.Checkpoint, error) {
	cps, err := l.checkpoints(ctx, session)
	if err != nil {
		return checkpoint.Checkpoint{}, err
	}
	for _, r := range cps {
		if r.seq == seq {
			return l.readCheckpoint(ctx, session, r)
		}
	}
	return checkpoint.Checkpoint{}, fmt.Errorf("session %q: checkpoint %d: %w", session, seq, checkpoint.ErrNotFound)
}

// ListCheckpoints implements checkpoint.Log.
func (l *Log) ListCheckpoints(ctx context.Context, session string) ([]checkpoint.Checkpoint, error) {
	cps, err := l.checkpoints(ctx, session)
	if err != nil {
		return nil, err
	}
	var out []checkpoint.Checkpoint
	for _, r := range cps {
		cp, err := l.readCheckpoint(ctx, session, r)
		if err != nil {
			return nil, err
		}
		out = append(out, cp)
	}
	return out, nil
}

// ids returns every session id, sorted bytewise: every session whose
// creation was acknowledged before the call, through any node, and none
// whose deletion was (Store.liveKeys: the meta bucket's keys as the stream
// leader has them, not as a lagging replica's listing does).
func (l *Log) ids(ctx context.Context) ([]string, error) {
	if err := l.st.up(); err != nil {
		return nil, err
	}
	ctx, cancel := l.st.whileUp(ctx)
	defer cancel()
	keys, err := l.st.liveKeys(ctx, "m.")
	if err != nil {
		if uerr := l.st.up(); uerr != nil {
			return nil, uerr
		}
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	ids := make([]string, 0, len(keys))
	for _, k := range keys {
		b, err := hex.DecodeString(strings.TrimPrefix(k, "m."))
		if err != nil {
			continue
		}
		ids = append(ids, string(b))
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// ListSessions implements checkpoint.Log.
func (l *Log) ListSessions(ctx context.Context) ([]string, error) { return l.ids(ctx) }

// CountSessions implements checkpoint.Log (it lists the bucket's keys).
func (l *Log) CountSessions(ctx context.Context) (int, error) {
	ids, err := l.ids(ctx)
	return len(ids), err
}

// ListPage implements checkpoint.Log: the ids come from the bucket's keys,
// sorted by id+"/" as badger's key order; each listed session costs a few
// reads.
func (l *Log) ListPage(ctx context.Context, after string, limit int) ([]checkpoint.Listed, bool, error) {
	if after != "" {
		if err := checkpoint.ValidSessionID(after); err != nil {
			return nil, false, err
		}
	}
	if limit < 1 {
		return nil, false, fmt.Errorf("%w: limit %d: must be at least 1", checkpoint.ErrInvalid, limit)
	}
	ids, err := l.ids(ctx)
	if err != nil {
		return nil, false, err
	}
	slices.SortFunc(ids, func(a, b string) int { return strings.Compare(a+"/", b+"/") })
	start := 0
	if after != "" {
		start, _ = slices.BinarySearchFunc(ids, after+"/", func(id, t string) int { return strings.Compare(id+"/", t) })
		if start < len(ids) && ids[start] == after {
			start++
		}
	}
	var page []checkpoint.Listed
	for _, id := range ids[start:] {
		if len(page) == limit {
			return page, true, nil
		}
		meta, err := l.GetMeta(ctx, id)
		if errors.Is(err, checkpoint.ErrNotFound) {
			continue // deleted since the listing
		}
		if err != nil {
			return nil, false, err
		}
		li := checkpoint.Listed{ID: id, Meta: meta}
		if e, err := l.st.meta.Get(ctx, rowKey(id)); err == nil {
			li.Row = e.Value()
		} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, false, fmt.Errorf("session %q: read row: %w", id, err)
		}
		x := l.idx(id)
		x.mu.Lock()
		li.LastSeq = x.last // synced by GetMeta
		x.mu.Unlock()
		page = append(page, li)
	}
	return page, false, nil
}

// PutRow implements checkpoint.Log: rows are written by a background
// writer, the newest row of each session only.
func (l *Log) PutRow(session string, row []byte) error {
	if err := checkpoint.ValidSessionID(session); err != nil {
		return err
	}
	if len(row) > checkpoint.MaxRowBytes {
		return fmt.Errorf("session %q: %w: listing row of %d bytes (at most %d)", session, checkpoint.ErrTooLarge, len(row), checkpoint.MaxRowBytes)
	}
	select {
	case <-l.done:
		return fmt.Errorf("session %q: %w", session, checkpoint.ErrClosed)
	default:
	}
	l.rowMu.Lock()
	l.pending[session] = slices.Clone(row)
	l.rowMu.Unlock()
	select {
	case l.rows <- struct{}{}:
	default:
	}
	return nil
}

func (l *Log) writeRows() {
	defer l.wg.Done()
	for {
		var stop bool
		select {
		case <-l.rows:
		case <-l.done:
			stop = true
		}
		l.rowMu.Lock()
		batch := l.pending
		l.pending = map[string][]byte{}
		l.rowMu.Unlock()
		for id, row := range batch {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if _, err := l.st.meta.Put(ctx, rowKey(id), row); err != nil {
				l.st.opts.Logger.Warn("listing row not written", "session", id, "err", err)
			}
			cancel()
		}
		if stop {
			return
		}
	}
}

// DeleteSession implements checkpoint.Log: the meta key goes first (from
// then on the session does not exist), then the records, the row and the
// keys' delete markers.
func (l *Log) DeleteSession(ctx context.Context, session string) error {
	if err := checkpoint.ValidSessionID(session); err != nil {
		return err
	}
	_, rev, err := l.getMeta(ctx, session)
	if err != nil {
		return err
	}
	if err := l.st.meta.Delete(ctx, metaKey(session), jetstream.LastRevision(rev)); err != nil {
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || wrongLast(err) {
			return fmt.Errorf("delete session %q: %w: it changed meanwhile", session, checkpoint.ErrConflict)
		}
		return fmt.Errorf("delete session %q: %w", session, err)
	}
	x := l.idx(session)
	x.mu.Lock()
	defer x.mu.Unlock()
	x.reset()
	if err := l.st.events.Purge(ctx, jetstream.WithPurgeSubject(l.subject(session))); err != nil {
		return fmt.Errorf("delete session %q: purge its records: %w", session, err)
	}
	_ = l.st.meta.Delete(ctx, rowKey(session))
	// The delete markers go too, so that the meta stream's subjects are
	// the live sessions (Store.liveKeys); one left here (an error, a node
	// stopping) is dropped by the next listing.
	_ = l.st.dropMarker(ctx, metaKey(session))
	_ = l.st.dropMarker(ctx, rowKey(session))
	return nil
}
