package engine

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/trigger"
)

// A session's figures weigh each recorded rewrite (docs/design.md §4): a
// context-edit pass and a compaction each count the tokens the next
// request writes to the cache again (cost, at write minus read price) and
// what every later request no longer sends (savings, at the read price),
// growing with the answers that follow; a reload rebuilds the same figures
// from the log.
func TestRewritesWeighCostAgainstSavings(t *testing.T) {
	cfg := config.Defaults()
	cfg.Offload.Enabled = false
	cfg.ContextCompaction.KeepRecentTokens = 0
	h := newHarness(t, cfg, "")
	h.create("s", 1000000)
	h.append("s", user("investigate"))
	if info, _ := h.e.Session(context.Background(), "s"); info.Rewrites != nil {
		t.Fatalf("figures before any rewrite: %+v", info.Rewrites)
	}
	for i := range 8 {
		toolRound(h, fmt.Sprintf("r%d", i), "grep", 3000)
	}
	info, _ := h.e.Session(context.Background(), "s")
	f := info.Rewrites
	if f == nil || f.Passes != 1 || f.RewrittenTokens == 0 || f.Cost <= 0 {
		t.Fatalf("after a pass: %+v", f)
	}
	// Each later answer saves what the pass removed once more.
	for i := range 20 {
		h.append("s", assistant(fmt.Sprintf("step %d", i)), user("go on"))
	}
	later, _ := h.e.Session(context.Background(), "s")
	g := later.Rewrites
	if g.SavedTokens <= f.SavedTokens || g.Savings <= f.Savings || g.Cost < f.Cost || math.Abs(g.Net-(g.Savings-g.Cost)) > 0.11 {
		t.Fatalf("20 answers later: %+v (after the pass: %+v)", g, f)
	}
	if _, err := h.e.Compact(context.Background(), "s", trigger.Manual, true); err != nil {
		t.Fatal(err)
	}
	c, _ := h.e.Session(context.Background(), "s")
	if c.Rewrites.Compactions != 1 || c.Rewrites.RewrittenTokens <= g.RewrittenTokens {
		t.Fatalf("after a compaction: %+v", c.Rewrites)
	}
	h.e.forget("s")
	if again, _ := h.e.Session(context.Background(), "s"); *again.Rewrites != *c.Rewrites {
		t.Fatalf("after a reload %+v, before %+v", again.Rewrites, c.Rewrites)
	}
}
