package engine

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
)

// fillToCompaction fills a session of a 20,000-token window (threshold 14,000,
// hard mark 17,000) with tool rounds of n words each, the pre-send check
// running before each request as the proxy's does, until it compacts. It
// returns the context's tokens when it compacted (the checkpoint's
// tokens_before) and whether an earlier
// check over the threshold deferred the compaction by its weighing.
func fillToCompaction(t *testing.T, weigh bool, n int) (at uint64, deferred bool) {
	t.Helper()
	cfg := config.Defaults()
	cfg.Offload.Enabled = false
	cfg.ContextEditing.Enabled = false
	cfg.ContextCompaction.WeighCompactions = weigh
	h := newHarness(t, cfg, "")
	h.create("s", 20000)
	h.append("s", user("investigate the failing build"))
	for i := range 400 {
		toolRound(h, fmt.Sprintf("r%d", i), "grep", n)
		before, _ := h.e.Session(context.Background(), "s")
		if _, err := h.e.Context(context.Background(), "s", ContextOptions{}); err != nil {
			t.Fatal(err)
		}
		info, _ := h.e.Session(context.Background(), "s")
		if info.Checkpoints > 0 || before.Checkpoints > 0 {
			// The context the compaction replaced, as it recorded it: an
			// append's post-check may have queued it, and it may have ended
			// before this round's first look (before).
			cps := h.events("s", checkpoint.KindCheckpoint)
			if len(cps) == 0 {
				t.Fatal("the session counts a checkpoint its log does not hold")
			}
			cp, err := h.e.opts.Log.GetCheckpoint(context.Background(), "s", cps[0].Seq)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("rounds of %d words, weigh_compactions %v: compacted at %d tokens after %d rounds (deferred before: %v)", n, weigh, cp.TokensBefore, i+1, deferred)
			return cp.TokensBefore, deferred
		}
		if c := info.LastCheck; c != nil && before.Tokens >= info.Threshold {
			if !strings.Contains(c.Reason, "deferred until it pays") {
				t.Fatalf("round %d, %d tokens over the threshold: no compaction and no weighing: %s", i, before.Tokens, c.Reason)
			}
			deferred = true
		}
	}
	t.Fatalf("no compaction in 400 rounds of %d words", n)
	return 0, false
}

// An automatic compaction between the threshold and the hard mark fires
// only when it pays for its cache rewrite and summary over the requests
// expected (docs/design.md §4, weigh_compactions): a young session carried
// over the threshold by a few large results (a handful of requests to save
// on, the compaction leaving its retained tail to write again) waits, its
// check saying why, and compacts at the hard mark; a session of many small
// answers compacts at the threshold; with weigh_compactions off the young
// session compacts at the threshold too.
func TestCompactionFiresOnlyWhenItPaysBack(t *testing.T) {
	const threshold, hard = 14000, 17000
	at, deferred := fillToCompaction(t, true, 2500)
	if !deferred || at < hard {
		t.Errorf("young session: compacted at %d tokens (deferred before: %v), want deferred and at the hard mark %d or above", at, deferred, hard)
	}
	at, deferred = fillToCompaction(t, false, 2500)
	if deferred || at < threshold || at >= hard {
		t.Errorf("young session, weigh_compactions off: compacted at %d tokens (deferred %v), want at the threshold", at, deferred)
	}
	at, deferred = fillToCompaction(t, true, 150)
	if deferred || at < threshold || at >= hard {
		t.Errorf("long session: compacted at %d tokens (deferred %v), want at the threshold, below the hard mark %d", at, deferred, hard)
	}
}
