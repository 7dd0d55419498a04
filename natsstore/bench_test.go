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

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/internal/store"
	"github.com/ctxd/ctxd/natsstore/natstest"
)

// BenchmarkDurableAppend64Sessions: 64 sessions appending one 1 KiB event
// each per call, concurrently, each append acknowledged only once durable:
// badger on disk with sync_writes (the baseline, same run), and the NATS
// log on the in-process 3-server cluster with R1 and R3 streams
// (docs/performance.md).
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
}
