package engine

import (
	"context"
	"slices"
	"testing"

	"github.com/ctxd/ctxd/ledger"
	"github.com/ctxd/ctxd/trigger"
)

// A proxied request's ledger entry names the rewrites recorded after the
// previous entry's context up to its own (assembledAt): a compaction
// recorded later is the next request's, and the first entry names none.
func TestRecordRequestNamesTheRewritesOfItsContext(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	ctx := context.Background()
	h.create("p", 20000)
	at := h.append("p", user("fix the build"), calls("c1"), result("c1", words(3000)), assistant("c1 read"), user("go on"), calls("c2"), result("c2", words(3000)))
	var conv ledger.Conversation
	obs := ledger.Observation{Model: "test-model", Mode: ledger.ModeEnforce, Reported: ledger.Usage{Input: 10}}
	en, err := h.e.RecordRequest(ctx, "p", &conv, obs, at.LastSeq)
	if err != nil || len(en.Rewrites) != 0 || conv.Seq != at.LastSeq {
		t.Fatalf("first entry: %v, rewrites %v, seq %d (want %d)", err, en.Rewrites, conv.Seq, at.LastSeq)
	}
	// Assembled before the compaction: not this request's rewrite.
	before := h.append("p", assistant("c2 read"))
	if _, err := h.e.Compact(ctx, "p", trigger.Manual, true); err != nil {
		t.Fatal(err)
	}
	if en, err = h.e.RecordRequest(ctx, "p", &conv, obs, before.LastSeq); err != nil || len(en.Rewrites) != 0 {
		t.Fatalf("entry assembled before the compaction: %v, rewrites %v", err, en.Rewrites)
	}
	// Unknown assembly point: up to now, the compaction included.
	if en, err = h.e.RecordRequest(ctx, "p", &conv, obs, 0); err != nil || !slices.Equal(en.Rewrites, []string{ledger.CauseCompaction}) {
		t.Fatalf("entry after the compaction: %v, rewrites %v", err, en.Rewrites)
	}
	if entries, _, _ := h.e.Ledger(ctx, "p"); len(entries) != 3 {
		t.Errorf("%d ledger entries, want 3", len(entries))
	}
}
