package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"testing"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/contextedit"
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

// A context-edit pass fires only when what it saves over the requests
// expected before the next compaction pays for the cache rewrite it forces
// (docs/design.md §4): the same pass — one old result elided from a long
// history, a small saving against a rewrite of nearly everything after it
// — is deferred in a session whose threshold is a few requests away, and
// fires, with its weighing recorded in its event, in one whose threshold
// is far; the session's figures show the deferral's cost and savings.
func TestPassFiresOnlyWhenItPaysBack(t *testing.T) {
	for _, tc := range []struct {
		window uint64
		fires  bool
	}{{60000, false}, {1000000, true}} {
		cfg := config.Defaults()
		cfg.Offload.Enabled = false
		cfg.ContextCompaction.KeepRecentTokens = 0
		// Only the oldest result is old enough, and it alone is enough.
		cfg.ContextEditing.KeepRecentTurns = 7
		cfg.ContextEditing.MinCharsPerPass = 10000
		h := newHarness(t, cfg, "")
		h.create("s", tc.window)
		h.append("s", user("investigate"))
		for i := range 8 {
			toolRound(h, fmt.Sprintf("r%d", i), "grep", 3000)
		}
		var weighed []contextedit.Weighing
		_ = h.e.Events(context.Background(), "s", 1, false, func(ev checkpoint.Event) error {
			if ev.Kind == checkpoint.KindContextEdit {
				var p contextedit.Pass
				if err := json.Unmarshal(ev.Data, &p); err != nil || p.Weighed == nil {
					t.Fatalf("window %d: pass event %s: %v", tc.window, ev.Data, err)
				}
				weighed = append(weighed, *p.Weighed)
			}
			return nil
		})
		info, _ := h.e.Session(context.Background(), "s")
		f := info.Rewrites
		if info.Checkpoints != 0 || f == nil {
			t.Fatalf("window %d: %d checkpoints, figures %+v", tc.window, info.Checkpoints, f)
		}
		if !tc.fires {
			if len(weighed) != 0 || f.Passes != 0 || f.DeferredPasses == 0 || f.DeferredCost <= f.DeferredSavings || f.DeferredSavings <= 0 {
				t.Fatalf("window %d: a pass that cannot pay back: %d passes recorded, figures %+v", tc.window, len(weighed), f)
			}
			continue
		}
		if len(weighed) != 1 || f.Passes != 1 || f.DeferredPasses != 0 {
			t.Fatalf("window %d: a pass that pays back: %d passes recorded, figures %+v", tc.window, len(weighed), f)
		}
		if w := weighed[0]; !w.PaysBack() || w.Requests == 0 || w.SavedTokens == 0 || w.RewrittenTokens <= w.SavedTokens {
			t.Fatalf("window %d: weighing %+v", tc.window, w)
		}
	}
}
