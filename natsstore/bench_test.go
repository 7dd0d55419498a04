package natsstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxd/ctxd/artifacts"
	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/internal/store"
	"github.com/ctxd/ctxd/natsstore"
	"github.com/ctxd/ctxd/natsstore/natstest"
)

// BenchmarkDurableAppend64Sessions: 64 sessions appending one 1 KiB event
// each per call, concurrently, each append acknowledged only once durable:
// badger on disk with sync_writes (the baseline, same run), and the NATS
// log on the in-process 3-server cluster with R1 and R3 streams, and R3
// with every server fsyncing (sync_interval: always) with and without
// atomic batches (docs/performance.md).
func BenchmarkDurableAppend64Sessions(b *testing.B) {
	ev := checkpoint.Event{Kind: checkpoint.KindDiagnostic, Data: json.RawMessage(`"` + strings.Repeat("x", 960) + `"`)}
	run := func(b *testing.B, l checkpoint.Log, prefix string) {
		ctx := context.Background()
		for g := range 64 {
			if _, err := l.CreateSession(ctx, fmt.Sprintf("%s-%d", prefix, g), checkpoint.Meta{}); err != nil {
				b.Fatal(err)
			}
		}
		b.SetBytes(1024)
		var next atomic.Int64
		var wg sync.WaitGroup
		b.ResetTimer()
		start := time.Now()
		for g := range 64 {
			wg.Go(func() {
				id := fmt.Sprintf("%s-%d", prefix, g)
				for next.Add(1) <= int64(b.N) {
					if _, err := l.Append(ctx, id, []checkpoint.Event{ev}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		b.StopTimer()
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "appends/s")
		if nl, ok := l.(*natsstore.Log); ok {
			batches, records, fallbacks := natsstore.BatchStats(nl)
			if batches > 0 {
				b.ReportMetric(float64(records)/float64(batches), "appends/batch")
			}
			b.ReportMetric(float64(fallbacks), "fallbacks")
		}
	}
	b.Run("badger", func(b *testing.B) {
		db, err := store.Open(b.TempDir(), store.Options{SyncWrites: true})
		if err != nil {
			b.Fatal(err)
		}
		st := checkpoint.Open(db, checkpoint.Options{})
		defer db.Close()
		defer st.Close()
		run(b, st, "b")
	})
	for _, r := range []int{1, 3} {
		b.Run(fmt.Sprintf("nats-R%d", r), func(b *testing.B) {
			st := open(b, r)
			run(b, st.Log(), fmt.Sprintf("r%d", r))
		})
	}
	// The same with every server fsyncing before it acknowledges
	// (sync_interval: always), as badger's sync_writes does.
	c, err := natstest.StartSync(b.TempDir(), 3, true)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Shutdown()
	for _, r := range []int{1, 3} {
		b.Run(fmt.Sprintf("nats-R%d-fsync", r), func(b *testing.B) {
			st := openOn(b, c, fmt.Sprintf("fs%d", prefixes.Add(1)), r)
			run(b, st.Log(), fmt.Sprintf("f%d", r))
		})
	}
	// R3 with every record published alone, as before atomic batches.
	b.Run("nats-R3-fsync-unbatched", func(b *testing.B) {
		st := openOn(b, c, fmt.Sprintf("fu%d", prefixes.Add(1)), 3, natsstore.NoBatches)
		run(b, st.Log(), "u3")
	})
}

// BenchmarkArtifactGet: reading an artifact through another server of the
// R3 cluster than the one it was retained through, by size (chunks of 128
// KiB): Artifacts.Get (info from the stream's leader; one chunk by a
// message get from the leader, more through an ordered consumer read to
// the info's chunk count, from the leader when that comes out short)
// against the object store's Get (an ordered consumer on any replica,
// which may end early on one that lags), the baseline, in the same run.
func BenchmarkArtifactGet(b *testing.B) {
	ctx := context.Background()
	c, err := natstest.Shared()
	if err != nil {
		b.Fatal(err)
	}
	prefix := newPrefix("bag")
	urls := c.URLs()
	w := openOn(b, c, prefix, 3, func(o *natsstore.Options) { o.Servers = urls[:1] })
	r := openOn(b, c, prefix, 3, func(o *natsstore.Options) { o.Servers = urls[1:2] })
	secret, err := w.Secret(ctx)
	if err != nil {
		b.Fatal(err)
	}
	wa, _ := w.Artifacts(secret)
	ra, _ := r.Artifacts(secret)
	for _, size := range []int{16 << 10, 256 << 10, 1 << 20} {
		content := make([]byte, size)
		for i := range content {
			content[i] = byte('a' + i%26)
		}
		id, err := wa.Retain(ctx, content, artifacts.FormatText)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("ctxd-%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				if got, _, err := ra.Get(ctx, id); err != nil || len(got) != size {
					b.Fatal(len(got), err)
				}
			}
		})
		b.Run(fmt.Sprintf("objectstore-%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				if got, err := natsstore.GetByObjectStore(ctx, ra, string(id)); err != nil || len(got) != size {
					b.Fatal(len(got), err)
				}
			}
		})
	}
}

// BenchmarkCountSessions: counting the sessions of the R3 cluster through
// another server than the one they were created through, by count (every
// fifth deleted): Log.CountSessions (the key lister checked against the
// stream leader's subjects) against the key lister alone, the
// baseline, in the same run.
func BenchmarkCountSessions(b *testing.B) {
	ctx := context.Background()
	c, err := natstest.Shared()
	if err != nil {
		b.Fatal(err)
	}
	urls := c.URLs()
	for _, n := range []int{10, 1000} {
		prefix := newPrefix("bcs")
		w := openOn(b, c, prefix, 3, func(o *natsstore.Options) { o.Servers = urls[:1] })
		r := openOn(b, c, prefix, 3, func(o *natsstore.Options) { o.Servers = urls[1:2] })
		live := 0
		for i := range n {
			id := fmt.Sprintf("s%d", i)
			if _, err := w.Log().CreateSession(ctx, id, checkpoint.Meta{}); err != nil {
				b.Fatal(err)
			}
			live++
			if i%5 == 4 {
				if err := w.Log().DeleteSession(ctx, id); err != nil {
					b.Fatal(err)
				}
				live--
			}
		}
		b.Run(fmt.Sprintf("leader-checked-%d", n), func(b *testing.B) {
			for b.Loop() {
				if got, err := r.Log().CountSessions(ctx); err != nil || got != live {
					b.Fatal(got, err)
				}
			}
		})
		b.Run(fmt.Sprintf("lister-%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := natsstore.CountByLister(ctx, r.Log()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
