package natsstore

import (
	"context"
	"io"
)

// BatchStats returns the atomic batches l stored, the records in them and
// the batches it published again one by one.
func BatchStats(l *Log) (batches, records, fallbacks int64) {
	return l.pub.batches.Load(), l.pub.batched.Load(), l.pub.fallbacks.Load()
}

// NoBatches makes a store opened with o publish every record alone, as
// before atomic batches (the benchmark's baseline).
func NoBatches(o *Options) { o.noBatches = true }

// Indexes returns how many session indexes l keeps.
func Indexes(l *Log) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.sessions)
}

// GetByObjectStore reads artifact id as Artifacts.Get did before reads went to
// the stream's leader: the object store's Get (its chunks through an ordered
// consumer on any replica), for the benchmark's baseline. Returns the content.
func GetByObjectStore(ctx context.Context, a *Artifacts, id string) ([]byte, error) {
	res, err := a.st.objects.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	defer res.Close()
	return io.ReadAll(res)
}

// CountByLister counts the sessions as Log.ids did before reads went to the
// stream's leader: the meta bucket's key lister alone (an ordered consumer on
// any replica), for the benchmark's baseline.
func CountByLister(ctx context.Context, l *Log) (int, error) {
	lister, err := l.st.meta.ListKeysFiltered(ctx, "m.>")
	if err != nil {
		return 0, err
	}
	n := 0
	for range lister.Keys() {
		n++
	}
	return n, nil
}
