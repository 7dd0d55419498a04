package workers

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// BenchmarkWaitedBehindBackground measures how long a job a request waits
// on takes, submit to done, while background jobs keep the pool's 4
// workers busy and its queue full: "waited" submits it as
// Waited, "baseline" as Background, as every job was before priorities.
// Each job takes 2 ms; ns/op is the waited job's latency.
func BenchmarkWaitedBehindBackground(b *testing.B) {
	const jobTime = 2 * time.Millisecond
	for _, tc := range []struct {
		name string
		prio Priority
	}{{"waited", Waited}, {"baseline", Background}} {
		b.Run(tc.name, func(b *testing.B) {
			p, err := New(Options{Size: 4, Queue: 32})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			var run sync.WaitGroup
			run.Go(func() { _ = p.Run(ctx) })
			work := func(context.Context) error { time.Sleep(jobTime); return nil }
			// Keep the queue full of background work.
			stop := make(chan struct{})
			var feed sync.WaitGroup
			feed.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					if _, err := p.Submit(fmt.Sprintf("bg-%d", i), work); err != nil {
						time.Sleep(100 * time.Microsecond)
					}
				}
			})
			for p.Stats().Queued < 32 {
				time.Sleep(time.Millisecond)
			}
			b.ResetTimer()
			for i := range b.N {
				var t *Ticket
				for t == nil {
					t, err = p.SubmitPriority(fmt.Sprintf("w-%d", i), tc.prio, work)
					if err != nil {
						time.Sleep(50 * time.Microsecond) // baseline: refused while full
					}
				}
				if err := t.Err(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			close(stop)
			feed.Wait()
			cancel()
			run.Wait()
		})
	}
}
