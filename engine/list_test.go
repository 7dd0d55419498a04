package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/ctxd/ctxd/trigger"
)

// listAll pages through ListSessionPage with pages of limit.
func listAll(t *testing.T, e *Engine, limit int) []Info {
	t.Helper()
	var out []Info
	after := ""
	for {
		page, next, err := e.ListSessionPage(context.Background(), after, limit)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page...)
		if next == "" {
			return out
		}
		after = next
	}
}

// TestListingAfterRestart (docs/decisions.md "Listing rows"): after a restart,
// the listing shows every session with the message count, tokens and threshold
// it had, with no session loaded; a compaction's figures too; a session stored
// before listing rows existed is read once and described truly.
func TestListingAfterRestart(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, testConfig(), dir)
	want := map[string]Info{}
	for i := range 5 {
		id := fmt.Sprintf("s%d", i)
		h.create(id, uint64(20000+1000*i))
		for range i {
			h.append(id, user(words(200)), withUsage(assistant(words(50)), 1500, 40))
		}
	}
	h.append("s4", user("go"), calls("a", "b"), result("a", words(3000)), result("b", words(3000)), assistant("done"))
	if _, err := h.e.Compact(context.Background(), "s4", trigger.Manual, true); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		id := fmt.Sprintf("s%d", i)
		in, err := h.e.Session(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		want[id] = in
	}
	h.Close()

	h2 := newHarness(t, testConfig(), dir)
	got := listAll(t, h2.e, 2)
	if len(got) != 5 {
		t.Fatalf("listed %d sessions, want 5", len(got))
	}
	if n := h2.e.Loaded(); n != 0 {
		t.Fatalf("listing loaded %d sessions", n)
	}
	for _, in := range got {
		w := want[in.ID]
		if in.Loaded || in.Messages != w.Messages || in.Tokens != w.Tokens || in.TokensSource != w.TokensSource ||
			in.Threshold != w.Threshold || in.ContextLimit != w.ContextLimit || in.ActiveMessages != w.ActiveMessages ||
			in.LastSeq != w.LastSeq || in.Checkpoints != w.Checkpoints {
			t.Errorf("%s listed as messages %d tokens %d (%s) threshold %d limit %d active %d last %d cps %d; want %d %d (%s) %d %d %d %d %d",
				in.ID, in.Messages, in.Tokens, in.TokensSource, in.Threshold, in.ContextLimit, in.ActiveMessages, in.LastSeq, in.Checkpoints,
				w.Messages, w.Tokens, w.TokensSource, w.Threshold, w.ContextLimit, w.ActiveMessages, w.LastSeq, w.Checkpoints)
		}
	}
	if w := want["s4"]; w.Checkpoints != 1 || w.Messages != 13 {
		t.Fatalf("s4: %d checkpoints, %d messages", w.Checkpoints, w.Messages)
	}

	if h2.db == nil {
		return // the rest edits badger's keys
	}
	// A session stored without a row (an older ctxd): described from its
	// log, which also writes its row.
	if err := h2.db.Update(func(txn *badger.Txn) error { return txn.Delete([]byte("s/s3/row")) }); err != nil {
		t.Fatal(err)
	}
	page, _, err := h2.e.ListSessionPage(context.Background(), "s2", 1)
	if err != nil || len(page) != 1 || page[0].ID != "s3" || page[0].Messages != want["s3"].Messages || page[0].Threshold != want["s3"].Threshold {
		t.Fatalf("row-less s3 listed as %+v, %v", page, err)
	}
	if n := h2.e.Loaded(); n != 0 {
		t.Fatalf("the row-less session joined the loaded ones (%d)", n)
	}

	// Messages whose row never landed (a crash) are counted from the log.
	if err := h2.db.Update(func(txn *badger.Txn) error {
		return txn.Set([]byte("s/s1/row"), []byte(`{"messages":0,"threshold":1,"context_limit":21000,"last_seq":0}`))
	}); err != nil {
		t.Fatal(err)
	}
	page, _, err = h2.e.ListSessionPage(context.Background(), "s0", 1)
	if err != nil || len(page) != 1 || page[0].Messages != 2 || page[0].TokensSource != "estimated" || page[0].Tokens == 0 {
		t.Fatalf("stale row of s1 listed as %+v, %v", page, err)
	}

	// A loaded session is listed in full.
	h2.append("s0", user("hello"))
	page, next, err := h2.e.ListSessionPage(context.Background(), "", 1)
	if err != nil || !page[0].Loaded || page[0].Messages != 1 || next != "s0" {
		t.Fatalf("loaded s0 listed as %+v next %q, %v", page, next, err)
	}

	for _, bad := range []struct {
		after string
		limit int
		field string
	}{{"", -1, "limit"}, {"", MaxListLimit + 1, "limit"}, {"a/b", 1, "after"}} {
		_, _, err := h2.e.ListSessionPage(context.Background(), bad.after, bad.limit)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != bad.field || !errors.Is(err, ErrInvalid) {
			t.Errorf("ListSessionPage(%q, %d): %v, want invalid %s", bad.after, bad.limit, err, bad.field)
		}
	}
}
