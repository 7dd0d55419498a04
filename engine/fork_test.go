package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/ledger"
	"github.com/ctxd/ctxd/trigger"
)

// A fork inherits its parent's log through the fork point at the same
// seqs: the messages and the checkpoint (its summary, what it retains),
// so the fork's context is the parent's as it was there, with no
// compaction of its own; the parent's ledger entries are imported events
// (the fork's ledger starts empty); what comes after the fork point is the
// fork's alone. A fork point outside the parent's log is refused.
func TestForkInheritsCheckpointsUpToTheForkPoint(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	ctx := context.Background()
	h.create("p", 20000)
	h.append("p", user("fix the build"), calls("c1"), result("c1", words(3000)), assistant("c1 read"), user("go on"), calls("c2"), result("c2", words(3000)))
	if _, err := h.e.Compact(ctx, "p", trigger.Manual, true); err != nil {
		t.Fatal(err)
	}
	if err := h.e.RecordLedger(ctx, "p", ledger.Entry{Kind: ledger.KindRequest}); err != nil {
		t.Fatal(err)
	}
	at := h.append("p", assistant("c2 read, fixing"))
	through := at.FirstSeq - 1
	h.append("p", user("the parent's own next prompt"), calls("c3"), result("c3", words(6000)))
	if _, err := h.e.Compact(ctx, "p", trigger.Manual, true); err != nil {
		t.Fatal(err)
	}

	info, err := h.e.ForkSession(ctx, CreateParams{ID: "f", Model: "test-model", ContextLimit: 20000, System: "You are a test agent."}, "p", through)
	if err != nil {
		t.Fatal(err)
	}
	pcps, _ := h.e.Checkpoints(ctx, "p")
	fcps, _ := h.e.Checkpoints(ctx, "f")
	if info.Checkpoints != 1 || len(fcps) != 1 || len(pcps) != 2 || fcps[0].Seq != pcps[0].Seq || fcps[0].Summary != pcps[0].Summary || fcps[0].FirstRetainedSeq != pcps[0].FirstRetainedSeq {
		t.Fatalf("fork: %d checkpoints %+v; parent %+v", info.Checkpoints, fcps, pcps)
	}
	if info.LastSeq != through || info.Messages != 7 {
		t.Errorf("fork: last seq %d (want %d), %d messages (want 7)", info.LastSeq, through, info.Messages)
	}
	if n := len(h.events("f", checkpoint.KindLedger)); n != 0 {
		t.Errorf("the fork holds %d of the parent's ledger entries as its own", n)
	}
	imp := h.events("f", checkpoint.KindImported)
	var d inheritedEvent
	if len(imp) != 1 || json.Unmarshal(imp[0].Data, &d) != nil || d.From != "p" || d.Kind != checkpoint.KindLedger {
		t.Errorf("imported events %v", imp)
	}
	// The fork's context is the parent's first checkpoint and what it
	// retained, then the fork's own messages; no compaction ran for it.
	h.append("f", assistant("the fork's own answer"), user("the fork's own prompt"))
	ctxF := h.context("f")
	if ctxF.CheckpointSeq != pcps[0].Seq {
		t.Fatalf("the fork's context is built on checkpoint %d, not the inherited %d", ctxF.CheckpointSeq, pcps[0].Seq)
	}
	for _, m := range ctxF.Messages {
		for _, b := range m.Content {
			if b.Type == history.BlockText && b.Text == "the parent's own next prompt" {
				t.Error("the fork's context holds the parent's message after the fork point")
			}
		}
	}
	if n := len(h.events("f", checkpoint.KindCompactionStarted)); n != 1 {
		t.Errorf("%d compactions in the fork's log, want the inherited one", n)
	}
	for _, bad := range []uint64{0, through + 100} {
		var fe *FieldError
		if _, err := h.e.ForkSession(ctx, CreateParams{ID: "g", Model: "test-model", ContextLimit: 20000}, "p", bad); !errors.As(err, &fe) || fe.Field != "fork_through" {
			t.Errorf("fork through %d: %v", bad, err)
		}
	}
	if _, err := h.e.ForkSession(ctx, CreateParams{ID: "g", Model: "test-model", ContextLimit: 20000}, "nope", 1); !errors.Is(err, ErrNotFound) {
		t.Errorf("fork of a missing session: %v", err)
	}
}

// A fork point is the newest client state of a prefix of the request,
// reaching past what the engine wrote after that request's append (a
// ledger entry, a compaction) up to the next message.
func TestForkPointReachesPastTheEnginesOwnEvents(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	ctx := context.Background()
	h.create("p", 20000)
	state := func(n int) AppendOptions {
		return AppendOptions{ClientState: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))}
	}
	if _, err := h.e.AppendWith(ctx, "p", []history.Message{user("fix the build"), calls("c1"), result("c1", words(9000))}, state(3)); err != nil {
		t.Fatal(err)
	}
	if _, err := h.e.AppendWith(ctx, "p", []history.Message{assistant("c1 read"), user("go on")}, state(5)); err != nil {
		t.Fatal(err)
	}
	if err := h.e.RecordLedger(ctx, "p", ledger.Entry{Kind: ledger.KindRequest}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.e.Compact(ctx, "p", trigger.Manual, true); err != nil {
		t.Fatal(err)
	}
	last, _ := h.e.LastSeq(ctx, "p")
	h.append("p", calls("c2"))
	// The request holds the first 5 messages and changed the rest.
	through, n, err := h.e.ForkPoint(ctx, "p", func(st json.RawMessage) (int, bool) {
		var r struct{ N int }
		_ = json.Unmarshal(st, &r)
		return r.N, r.N <= 5
	})
	if err != nil || through != last || n != 5 {
		t.Fatalf("fork point %d at %d (%v), want %d at 5", through, n, err, last)
	}
	// A request that holds only the first 3: the point is that state's.
	through, n, _ = h.e.ForkPoint(ctx, "p", func(st json.RawMessage) (int, bool) {
		var r struct{ N int }
		_ = json.Unmarshal(st, &r)
		return r.N, r.N <= 3
	})
	if through == 0 || through >= last || n != 3 {
		t.Fatalf("fork point %d at %d, want before %d at 3", through, n, last)
	}
}
