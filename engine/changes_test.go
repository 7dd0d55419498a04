package engine

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/ctxd/ctxd/trigger"
)

// TestChangesNameWhatChanged: Changes reports each session created,
// appended to, compacted or deleted, in order, and says so when the
// changes after a counter are no longer all remembered; a reload that
// changes nothing the listing shows is not a change.
func TestChangesNameWhatChanged(t *testing.T) {
	h := newHarness(t, testConfig(), t.TempDir())
	defer h.Close()
	ctx := context.Background()
	start := h.e.ChangeSeq()
	h.create("a", 24000)
	h.create("b", 50000)
	h.append("a", user("go"), calls("x", "y"), result("x", words(3000)), result("y", words(3000)), assistant("done"))
	if _, err := h.e.Compact(ctx, "a", trigger.Manual, true); err != nil {
		t.Fatal(err)
	}
	if err := h.e.DeleteSession(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	ids, seq, missed, err := h.e.Changes(ctx, start)
	if err != nil || missed || seq != h.e.ChangeSeq() {
		t.Fatalf("changes: %v %v %v", seq, missed, err)
	}
	if ids[0] != "a" || ids[1] != "b" || ids[len(ids)-1] != "b" || slices.Index(ids[2:], "a") < 0 {
		t.Fatalf("changes %v: want a, b, a (append, compaction) …, b (delete)", ids)
	}
	// Reading the session changes nothing.
	if _, err := h.e.Session(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if h.e.ChangeSeq() != seq {
		t.Fatalf("a read counted as a change")
	}
	// More changes than are remembered: missed.
	for i := range changeRing + 1 {
		h.create(fmt.Sprintf("m%d", i), 50000)
	}
	if _, _, missed, err := h.e.Changes(ctx, seq); err != nil || !missed {
		t.Fatalf("after %d changes: missed %v, %v", changeRing+1, missed, err)
	}
	// Waiting: a canceled wait returns ctx's error.
	c, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, _, err := h.e.Changes(c, h.e.ChangeSeq()); err == nil {
		t.Fatal("a canceled wait returned no error")
	}
}
