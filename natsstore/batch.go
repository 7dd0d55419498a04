package natsstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxd/ctxd/checkpoint"
)

// Batched publishes (docs/decisions.md "Durable appends in batches").
// Appends of different sessions that wait at the same moment are
// published as one JetStream atomic batch: one acknowledgement, one
// replicated proposal and one group of fsyncs for all of them, where each
// append alone costs a round trip and its own. The batch is all or
// nothing: when the cluster refuses it (an append whose expected subject
// sequence another node took, a retried record already stored, a server
// without atomic batches) or does not answer, each record is published
// again alone, with its own expected sequence and message id, so the
// outcome of each is what it would have been alone and no record is
// stored twice. Appends of one session are never in one batch: they hold
// the session's index lock.

const (
	// batchWorkers is how many batches are in flight at once.
	batchWorkers = 4
	// maxBatch and maxBatchBytes bound one batch.
	maxBatch      = 128
	maxBatchBytes = 4 << 20
)

// pubReq is one record waiting to be published.
type pubReq struct {
	m    *nats.Msg
	done chan pubRes // buffered: the worker never blocks on it
}

type pubRes struct {
	ack *jetstream.PubAck
	err error
}

// batcher groups records into atomic batches.
type batcher struct {
	st     *Store
	stream string
	reqs   chan *pubReq
	wg     sync.WaitGroup
	// atomicOn: the stream accepts atomic batches (AllowAtomicPublish in
	// effect); cleared for good when the cluster says it does not.
	mu       sync.Mutex
	atomicOn bool
	done     <-chan struct{} // closed when the log closes

	// batches and batched count the atomic batches stored and the records
	// in them; fallbacks the batches published again one by one.
	batches, batched, fallbacks atomic.Int64
}

func newBatcher(st *Store, on bool, done <-chan struct{}) *batcher {
	b := &batcher{st: st, stream: st.events.CachedInfo().Config.Name, reqs: make(chan *pubReq, maxBatch), atomicOn: on, done: done}
	for range batchWorkers {
		b.wg.Go(func() { b.run(done) })
	}
	return b
}

func (b *batcher) atomicOK() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.atomicOn
}

// publish publishes m (headers set: expected subject sequence, message
// id), alone or in a batch with others, and returns its acknowledgement.
// Errors: JetStream's for m (as a publish of m alone returns them), ctx's.
func (b *batcher) publish(ctx context.Context, m *nats.Msg) (*jetstream.PubAck, error) {
	if !b.atomicOK() {
		return b.st.js.PublishMsg(ctx, m)
	}
	r := &pubReq{m: m, done: make(chan pubRes, 1)}
	select {
	case b.reqs <- r:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-b.done:
		return nil, errBatcherClosed
	}
	select {
	case res := <-r.done:
		return res.ack, res.err
	case <-b.done:
		return nil, errBatcherClosed
	case <-ctx.Done():
		// The record may be published still: the caller's retry, with
		// the same message id, finds out.
		return nil, ctx.Err()
	}
}

func (b *batcher) run(done <-chan struct{}) {
	for {
		var first *pubReq
		select {
		case first = <-b.reqs:
		case <-done:
			return
		}
		batch, size := []*pubReq{first}, len(first.m.Data)
	more:
		for len(batch) < maxBatch && size < maxBatchBytes {
			select {
			case r := <-b.reqs:
				batch = append(batch, r)
				size += len(r.m.Data)
			default:
				break more
			}
		}
		b.send(batch)
	}
}

// send publishes batch: alone when it is one record, else as an atomic
// batch, falling back to one publish per record.
func (b *batcher) send(batch []*pubReq) {
	ctx, cancel := context.WithTimeout(context.Background(), tryTimeout)
	defer cancel()
	if len(batch) == 1 {
		ack, err := b.st.js.PublishMsg(ctx, batch[0].m)
		batch[0].done <- pubRes{ack, err}
		return
	}
	if acks, ok := b.atomicBatch(ctx, batch); ok {
		b.batches.Add(1)
		b.batched.Add(int64(len(batch)))
		for i, r := range batch {
			r.done <- pubRes{ack: acks[i]}
		}
		return
	}
	// One by one, at once: each record's own outcome.
	b.fallbacks.Add(1)
	var wg sync.WaitGroup
	for _, r := range batch {
		wg.Go(func() {
			ack, err := b.st.js.PublishMsg(ctx, r.m)
			r.done <- pubRes{ack, err}
		})
	}
	wg.Wait()
}

// batchAck is the answer to a batch's commit: a PubAck with the batch's
// id and size, or an API error.
type batchAck struct {
	Stream    string              `json:"stream"`
	Sequence  uint64              `json:"seq"`
	BatchID   string              `json:"batch"`
	BatchSize uint64              `json:"count"`
	Error     *jetstream.APIError `json:"error"`
}

// atomicBatch publishes batch as one atomic batch and returns each
// record's acknowledgement; ok false when the batch was not stored whole,
// or may not have been (no answer).
func (b *batcher) atomicBatch(ctx context.Context, batch []*pubReq) ([]*jetstream.PubAck, bool) {
	id := newMsgID()
	n := len(batch)
	var resp *nats.Msg
	for i, r := range batch {
		bm := nats.NewMsg(r.m.Subject)
		for k, v := range r.m.Header {
			bm.Header[k] = v
		}
		bm.Data = r.m.Data
		bm.Header.Set("Nats-Batch-Id", id)
		bm.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i+1))
		if i < n-1 {
			if err := b.st.nc.PublishMsg(bm); err != nil {
				return nil, false
			}
			continue
		}
		bm.Header.Set("Nats-Batch-Commit", "1")
		var err error
		if resp, err = b.st.nc.RequestMsgWithContext(ctx, bm); err != nil {
			return nil, false
		}
	}
	var a batchAck
	if err := json.Unmarshal(resp.Data, &a); err != nil {
		return nil, false
	}
	if a.Error != nil {
		if a.Error.ErrorCode == atomicPublishDisabled {
			b.mu.Lock()
			b.atomicOn = false
			b.mu.Unlock()
			b.st.opts.Logger.Warn("storage: nats: the events stream refuses atomic batches; appends are published one by one", "stream", b.stream, "err", fmt.Sprint(a.Error))
		}
		return nil, false
	}
	if a.BatchID != id || a.BatchSize != uint64(n) || a.Sequence < uint64(n) {
		// A server without atomic batches stored the records one by one:
		// publishing each again finds it (its message id) and answers
		// with its sequence.
		return nil, false
	}
	acks := make([]*jetstream.PubAck, n)
	for i := range batch {
		acks[i] = &jetstream.PubAck{Stream: a.Stream, Sequence: a.Sequence - uint64(n-1-i)}
	}
	return acks, true
}

// atomicPublishDisabled is JetStream's "atomic publish is disabled"
// (NewJSAtomicPublishDisabledError).
const atomicPublishDisabled jetstream.ErrorCode = 10174

// errBatcherClosed: the log closed while a record waited to be published
// (checkpoint.ErrClosed to the caller).
var errBatcherClosed = fmt.Errorf("%w: closing", checkpoint.ErrClosed)
