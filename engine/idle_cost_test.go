package engine

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestIdleGapCost prices a session with an idle gap longer than its
// 5-minute cache under the cache model of docs/performance.md (input
// 1×, cache read 0.1×, cache write 1.25×, in input-token equivalents),
// idle compaction off and on: a 200,000-token window filled to about
// 125,000 tokens by 2,000-token steps, a 10-minute gap, then ten more
// steps. Off, the request after the gap writes the whole context again;
// on, the compaction before the cache lapsed (the embedded extractive
// summarizer: no call to pay) leaves a smaller context to write and to
// read afterwards. The figures are in docs/performance.md (go test -run
// TestIdleGapCost -v ./engine/).
func TestIdleGapCost(t *testing.T) {
	var before uint64 // the context the idle compaction summarized
	run := func(idle bool) (cost float64, compactions int) {
		h, clk := idleHarness(t, testConfig())
		defer h.Close()
		h.create("s", 200000)
		ctx := context.Background()
		var prev uint64 // the previous request's context: cached
		now := clockStart
		step := func(i int) {
			clk.set(now)
			a, err := h.e.Context(ctx, "s", ContextOptions{})
			if err != nil {
				t.Fatal(err)
			}
			tokens := a.Tokens
			switch {
			case prev == 0 || tokens < prev:
				// Nothing cached (the first request, or a rewrite after a
				// compaction): the whole context is written.
				cost += float64(tokens) * cacheWriteFactor
			default:
				cost += float64(prev)*cacheReadFactor + float64(tokens-prev)*cacheWriteFactor
			}
			prev = tokens
			h.append("s", user(fmt.Sprintf("step %d: %s", i, words(900))), withUsage(assistant(words(1000)), tokens+900, 1000))
			now = now.Add(30 * time.Second)
		}
		for i := range 66 {
			step(i)
		}
		// The idle gap: the sweep runs at 4 minutes (within IdleLead of
		// the 5-minute lifetime), then the cache lapses.
		clk.set(now.Add(4 * time.Minute))
		if idle {
			got := h.e.CompactIdle(ctx)
			compactions = len(got)
			if len(got) > 0 {
				before = got[0].Tokens
			}
			if err := h.e.WaitCompaction(ctx, "s"); err != nil {
				t.Fatal(err)
			}
		}
		now = now.Add(10 * time.Minute)
		prev = 0 // lapsed: the next request writes everything
		for i := 66; i < 76; i++ {
			step(i)
		}
		return cost, compactions
	}
	off, _ := run(false)
	on, n := run(true)
	// With an LLM summarizer the call is paid: the history read from the
	// cache and a summary of about 2,560 tokens written at 5× input.
	paid := on + float64(before)*cacheReadFactor + 2560*defaultOutputFactor
	t.Logf("session with a 10-minute gap, in input-token equivalents: idle compaction off %.0f, on %.0f (%d idle compaction of %d tokens): %.1f %% less; with a paid LLM summarizer %.0f: %.1f %% less",
		off, on, n, before, 100*(off-on)/off, paid, 100*(off-paid)/off)
	if n != 1 || paid >= off {
		t.Fatalf("idle compaction on: %d compactions, cost %.0f vs %.0f off; want one, and less", n, on, off)
	}
}
