package engine

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/natsstore/natstest"
	"github.com/ctxd/ctxd/trigger"
)

// BenchmarkFleetCompactions: 12 sessions compacted at once through the
// shared compaction queue by 1, 2 and 3 nodes (2 workers each) whose
// summarizer answers after 2 s; compactions/s should scale with the nodes
// (goal ≥ 1.8× with 2 nodes; docs/performance.md). Run with -benchtime=1x.
func BenchmarkFleetCompactions(b *testing.B) {
	const sessions = 12
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-time.After(2 * time.Second):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, okSummary("A summary of the work so far.").body)
	}))
	defer slow.Close()
	b.Setenv("CTXD_TEST_KEY", "test-key")
	cfg := testConfig()
	cfg.Workers.Size = 2
	cfg.Summarizer.Bindings = []config.Binding{{Name: "slow", Provider: "anthropic", Model: "claude-test", BaseURL: slow.URL, APIKeyEnv: "CTXD_TEST_KEY"}}
	c, err := natstest.Shared()
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1, 2, 3} {
		b.Run(fmt.Sprintf("nodes-%d", n), func(b *testing.B) {
			var total time.Duration
			for range b.N {
				b.StopTimer() // setup: nodes and sessions
				prefix := fmt.Sprintf("bench%d", fleetN.Add(1))
				var nodes []*node
				for range n {
					nd := newNode(b, c, prefix, cfg, time.Minute)
					nodes = append(nodes, nd)
				}
				ctx := context.Background()
				for i := range sessions {
					id := fmt.Sprintf("s%d", i)
					if _, err := nodes[0].e.CreateSession(ctx, CreateParams{ID: id, Model: "test-model", ContextLimit: 50000, System: "You are a test agent."}); err != nil {
						b.Fatal(err)
					}
					for j := range 8 {
						if _, err := nodes[0].e.Append(ctx, id, []history.Message{user(fmt.Sprintf("step %d: %s", j, words(2500))), assistant("ok")}); err != nil {
							b.Fatal(err)
						}
					}
				}
				for _, nd := range nodes {
					nd.run()
				}
				b.StartTimer()
				start := time.Now()
				var wg sync.WaitGroup
				for i := range sessions {
					wg.Go(func() {
						res, err := nodes[i%n].e.Compact(ctx, fmt.Sprintf("s%d", i), trigger.Manual, true)
						if err != nil || res.Checkpoint == nil {
							b.Errorf("compact s%d: %+v %v", i, res, err)
						}
					})
				}
				wg.Wait()
				total += time.Since(start)
				for _, nd := range nodes {
					nd.stop()
				}
			}
			b.ReportMetric(float64(sessions*b.N)/total.Seconds(), "compactions/s")
		})
	}
}
