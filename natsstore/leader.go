package natsstore

// Reads that must see every acknowledged write (docs/decisions.md
// "Fleet reads that see every acknowledged write").
//
// A write is acknowledged once its stream's leader applied it and a quorum
// stored it; a follower may apply it later. Direct gets are off on every
// stream (store.go, leaderReads), so a Get is answered by the leader. But
// two reads of the buckets' API go through an ordered consumer, which the
// server places, as an R1 consumer, on any replica of the stream, and
// which ends when that replica has nothing more: the key-value bucket's
// key listing (ListKeys/Keys, also nats-server#4824) and the object
// store's Get of an object's chunks. Through a replica that lags, a
// listing misses the newest keys and a read ends before the last chunks
// ("digests do not match"). Both are checked here against the leader and
// completed from it.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxd/ctxd/artifacts"
)

// kvOp is the header of a key-value delete or purge marker ("DEL",
// "PURGE"); a value has none.
const kvOp = "KV-Operation"

// metaSubject is the stream subject of key in the meta bucket.
func (st *Store) metaSubject(key string) string {
	return "$KV." + st.meta.Bucket() + "." + key
}

// liveKeys returns the keys of the meta bucket under prefix ("m.") that
// hold a value, unsorted: every key whose write was acknowledged before
// the call, none deleted before it. The subjects come from the stream
// leader's state (stream info with a subject filter, complete); a subject
// there is a key with a value or with a delete marker. The bucket's key
// lister (an ordered consumer, on any replica) tells which have a value;
// a subject it did not report, because its replica lags or the listing
// ended early, is read from the leader, and a delete marker found so is
// dropped (dropMarker). Errors: JetStream's, ctx's.
func (st *Store) liveKeys(ctx context.Context, prefix string) ([]string, error) {
	listed := map[string]bool{}
	lister, err := st.meta.ListKeysFiltered(ctx, prefix+">")
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	if err == nil {
		for k := range lister.Keys() {
			listed[k] = true
		}
		_ = lister.Stop()
	}
	if err := ctx.Err(); err != nil {
		return nil, err // the lister stops early on a cancelled ctx
	}
	pre := st.metaSubject("")
	info, err := st.metaStream.Info(ctx, jetstream.WithSubjectFilter(pre+prefix+">"))
	if err != nil {
		return nil, fmt.Errorf("list keys: stream state: %w", err)
	}
	keys := make([]string, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		k := strings.TrimPrefix(subj, pre)
		if listed[k] {
			keys = append(keys, k)
			continue
		}
		m, err := st.metaStream.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // purged since the stream info
		}
		if err != nil {
			return nil, fmt.Errorf("list keys: read %s: %w", k, err)
		}
		if m.Header.Get(kvOp) == "" {
			keys = append(keys, k)
			continue
		}
		// A delete marker left by a node that stopped between the delete
		// and dropMarker, or by an older ctxd: drop it now.
		_ = st.purgeMarker(ctx, subj, m.Sequence)
	}
	return keys, nil
}

// dropMarker removes the delete marker key's deletion left in the meta
// bucket, so that the stream's subjects (liveKeys) are the keys with a
// value: the subject is purged up to the marker's sequence only, so a
// value written after it (the key created again) stays. Nothing is done
// when the key's last message is a value. Errors: JetStream's.
func (st *Store) dropMarker(ctx context.Context, key string) error {
	subj := st.metaSubject(key)
	m, err := st.metaStream.GetLastMsgForSubject(ctx, subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if m.Header.Get(kvOp) == "" {
		return nil
	}
	return st.purgeMarker(ctx, subj, m.Sequence)
}

// purgeMarker purges subj's messages up to and including stream sequence
// seq (a delete marker's).
func (st *Store) purgeMarker(ctx context.Context, subj string, seq uint64) error {
	return st.metaStream.Purge(ctx, jetstream.WithPurgeSubject(subj), jetstream.WithPurgeSequence(seq+1))
}

// readObject reads object name of the artifact store from the stream's
// leader: its info (the last message of its meta subject) and then its
// chunks in order, each by a message get of the next message of the
// object's chunk subject. An object of more than consumerChunks chunks is
// first read through an ordered consumer (chunksByConsumer), faster for
// large ones, and from the leader only when that read comes out short. The content is checked against the info's size,
// chunk count and SHA-256 digest. Errors: jetstream.ErrObjectNotFound
// (missing or deleted), artifacts.ErrCorrupt (an info ctxd does not write,
// missing chunks, a size or digest that does not match), JetStream's,
// ctx's.
func (st *Store) readObject(ctx context.Context, name string) (*jetstream.ObjectInfo, []byte, error) {
	info, err := st.objects.GetInfo(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case info.Opts != nil && info.Opts.Link != nil:
		return nil, nil, fmt.Errorf("%w: object %s is a link", artifacts.ErrCorrupt, name)
	case info.NUID == "":
		return nil, nil, fmt.Errorf("%w: object %s has no chunk id", artifacts.ErrCorrupt, name)
	case info.Size > artifacts.MaxSize:
		return nil, nil, fmt.Errorf("%w: object %s is %d bytes, over the artifact limit %d", artifacts.ErrCorrupt, name, info.Size, artifacts.MaxSize)
	}
	want, err := jetstream.DecodeObjectDigest(info.Digest)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: object %s: digest %q: %w", artifacts.ErrCorrupt, name, info.Digest, err)
	}
	subj := "$O." + strings.ToUpper(st.opts.Prefix) + "_ARTIFACTS.C." + info.NUID
	if info.Chunks > consumerChunks {
		if content, ok := st.chunksByConsumer(ctx, subj, info); ok {
			if sum := sha256.Sum256(content); bytes.Equal(sum[:], want) {
				return info, content, nil
			}
		}
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
	}
	content := make([]byte, 0, info.Size)
	seq := uint64(1)
	for chunks := uint32(0); chunks < info.Chunks; chunks++ {
		m, err := st.objStream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, nil, fmt.Errorf("%w: object %s: %d of its %d chunks stored", artifacts.ErrCorrupt, name, chunks, info.Chunks)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read object %s: chunk %d: %w", name, chunks+1, err)
		}
		if uint64(len(content))+uint64(len(m.Data)) > info.Size {
			return nil, nil, fmt.Errorf("%w: object %s: chunks exceed its size %d", artifacts.ErrCorrupt, name, info.Size)
		}
		content = append(content, m.Data...)
		seq = m.Sequence + 1
	}
	if uint64(len(content)) != info.Size {
		return nil, nil, fmt.Errorf("%w: object %s: %d bytes in its chunks, size %d", artifacts.ErrCorrupt, name, len(content), info.Size)
	}
	if sum := sha256.Sum256(content); !bytes.Equal(sum[:], want) {
		return nil, nil, fmt.Errorf("%w: object %s: content does not match its digest", artifacts.ErrCorrupt, name)
	}
	return info, content, nil
}

// consumerChunks: objects of more chunks (128 KiB each) are read through
// an ordered consumer first. A message get per chunk (JSON, base64 body)
// beats a consumer's creation for one chunk only (BenchmarkArtifactGet).
const consumerChunks = 1

// firstChunkWait bounds the wait for each chunk of a consumer read: a
// consumer on a replica that has none of the object delivers nothing.
const firstChunkWait = 2 * time.Second

// chunksByConsumer reads the info's chunks at subj through an ordered
// consumer, which the server places on any replica of the stream. It
// reports false, for the caller to read from the leader, when the read
// comes out short: the replica ran out of chunks before the info's count
// (it has not applied the last ones), none came within firstChunkWait,
// more bytes than the info's size came, or any error.
func (st *Store) chunksByConsumer(ctx context.Context, subj string, info *jetstream.ObjectInfo) ([]byte, bool) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := make(chan *nats.Msg, 16)
	sub, err := st.pjs.ChanSubscribe(subj, ch, nats.OrderedConsumer(), nats.BindStream("OBJ_"+strings.ToUpper(st.opts.Prefix)+"_ARTIFACTS"), nats.Context(ctx))
	if err != nil {
		return nil, false
	}
	defer func() { _ = sub.Unsubscribe() }()
	content := make([]byte, 0, info.Size)
	idle := time.NewTimer(firstChunkWait)
	defer idle.Stop()
	for n := uint32(0); n < info.Chunks; n++ {
		select {
		case <-ctx.Done():
			return nil, false
		case <-idle.C:
			return nil, false
		case m := <-ch:
			md, err := m.Metadata()
			if err != nil || uint64(len(content))+uint64(len(m.Data)) > info.Size {
				return nil, false
			}
			content = append(content, m.Data...)
			if md.NumPending == 0 && n+1 < info.Chunks {
				return nil, false // the replica has no more yet
			}
			idle.Reset(firstChunkWait)
		}
	}
	return content, uint64(len(content)) == info.Size
}
