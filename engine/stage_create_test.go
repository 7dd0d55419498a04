package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/history"
)

// createStaged creates session id in memory only (CreateParams.Staged).
func (h *harness) createStaged(id string) error {
	_, err := h.e.CreateSession(context.Background(), CreateParams{ID: id, Model: "test-model", ContextLimit: 200000,
		System: "You are a test agent.", Staged: true})
	return err
}

// stored reports whether the log holds session id.
func (h *harness) stored(id string) bool {
	h.t.Helper()
	ok, err := h.e.Exists(context.Background(), id)
	if err != nil {
		h.t.Fatal(err)
	}
	return ok
}

// A session created in memory only (CreateParams.Staged) is the engine's
// at once — described, staged to, its context assembled — and stored by
// nothing until its staged append's commit, which stores it and then the
// append: after a restart the log holds both. Its id is taken meanwhile.
func TestStagedCreationStoredByTheCommit(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	h := newHarness(t, testConfig(), dir)
	if err := h.createStaged("s"); err != nil {
		t.Fatal(err)
	}
	if err := h.createStaged("s"); !errors.Is(err, ErrExists) {
		t.Fatalf("a second creation of the same id: %v, want ErrExists", err)
	}
	if _, err := h.e.CreateSession(ctx, CreateParams{ID: "s", Model: "test-model", ContextLimit: 200000}); !errors.Is(err, ErrExists) {
		t.Fatalf("a stored creation of the same id: %v, want ErrExists", err)
	}
	st, err := h.e.Stage(ctx, "s", []history.Message{user("hello")}, AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if info, err := h.e.Session(ctx, "s"); err != nil || info.Messages != 1 {
		t.Fatalf("the session in memory: %+v, %v", info, err)
	}
	if a := h.context("s"); len(a.Messages) != 1 {
		t.Fatalf("context of %d messages, want the staged one", len(a.Messages))
	}
	if h.stored("s") {
		t.Fatal("stored before the commit")
	}
	if ids, err := h.e.ListSessions(ctx); err != nil || len(ids) != 0 {
		t.Fatalf("listed before the commit: %v, %v", ids, err)
	}
	if err := st.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if !h.stored("s") {
		t.Fatal("not stored by the commit")
	}
	h.append("s", assistant("hi"))
	h.Close()

	h2 := newHarness(t, testConfig(), dir)
	msgs := h2.events("s", checkpoint.KindMessage)
	if len(msgs) != 2 || msgs[0].Message.Content[0].Text != "hello" || msgs[1].Message.Content[0].Text != "hi" {
		t.Fatalf("after a restart the log holds %+v", msgs)
	}
	if info, err := h2.e.Session(ctx, "s"); err != nil || info.Messages != 2 || info.ContextLimit != 200000 {
		t.Fatalf("after a restart: %+v, %v", info, err)
	}
}

// A session created in memory only and never stored leaves nothing: its
// staged append discarded, or the session deleted, it is gone, its id
// free again. Any other write of its log stores it first.
func TestStagedCreationDroppedOrStored(t *testing.T) {
	ctx := context.Background()
	gone := func(h *harness) {
		t.Helper()
		if _, err := h.e.Session(ctx, "s"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("session after it was dropped: %v, want ErrNotFound", err)
		}
		if h.stored("s") {
			t.Fatal("stored")
		}
		if err := h.createStaged("s"); err != nil {
			t.Fatalf("the id is not free again: %v", err)
		}
	}
	t.Run("discarded", func(t *testing.T) {
		h := newHarness(t, testConfig(), "")
		if err := h.createStaged("s"); err != nil {
			t.Fatal(err)
		}
		st, err := h.e.Stage(ctx, "s", []history.Message{user("hello")}, AppendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !st.Discard() {
			t.Fatal("Discard kept the append")
		}
		if err := st.Commit(ctx); !errors.Is(err, ErrDiscarded) {
			t.Fatalf("Commit after Discard: %v", err)
		}
		gone(h)
	})
	for _, staged := range []bool{false, true} {
		name := "deleted"
		if staged {
			name = "deleted with a staged append"
		}
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, testConfig(), "")
			if err := h.createStaged("s"); err != nil {
				t.Fatal(err)
			}
			var st *Staged
			if staged {
				var err error
				if st, err = h.e.Stage(ctx, "s", []history.Message{user("hello")}, AppendOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if err := h.e.DeleteSession(ctx, "s"); err != nil {
				t.Fatal(err)
			}
			if st != nil {
				if err := st.Commit(ctx); err == nil {
					t.Fatal("a staged append of a deleted session committed")
				}
			}
			gone(h)
		})
	}
	t.Run("another write", func(t *testing.T) {
		h := newHarness(t, testConfig(), "")
		if err := h.createStaged("s"); err != nil {
			t.Fatal(err)
		}
		h.append("s", user("hello"))
		if !h.stored("s") {
			t.Fatal("an append did not store the session first")
		}
		if msgs := h.events("s", checkpoint.KindMessage); len(msgs) != 1 {
			t.Fatalf("log %+v", msgs)
		}
	})
}

// A session created in memory only is never evicted: it would be lost.
func TestStagedCreationNotEvicted(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, testConfig(), "")
	h.e.opts.MaxLoadedSessions = 2
	if err := h.createStaged("s"); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		id := "o" + string(rune('a'+i))
		h.create(id, 200000)
		h.append(id, user("other"))
	}
	st, err := h.e.Stage(ctx, "s", []history.Message{user("hello")}, AppendOptions{})
	if err != nil {
		t.Fatalf("staging after other sessions loaded: %v", err)
	}
	if err := st.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if msgs := h.events("s", checkpoint.KindMessage); len(msgs) != 1 {
		t.Fatalf("log %+v", msgs)
	}
}

// A commit whose session the log refuses to create (another writer of a
// shared log created it meanwhile) fails, and the session is the log's
// from then on: nothing of the staged append is written into it. Its
// stale copy is no longer held against eviction.
func TestStagedCreationTakenMeanwhile(t *testing.T) {
	for _, evicted := range []bool{false, true} {
		t.Run(fmt.Sprintf("evicted=%v", evicted), func(t *testing.T) { stagedCreationTaken(t, evicted) })
	}
}

func stagedCreationTaken(t *testing.T, evicted bool) {
	ctx := context.Background()
	h := newHarness(t, testConfig(), "")
	if err := h.createStaged("s"); err != nil {
		t.Fatal(err)
	}
	st, err := h.e.Stage(ctx, "s", []history.Message{user("mine")}, AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.log.CreateSession(ctx, "s", checkpoint.Meta{Model: "test-model", ContextLimit: 100000}); err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(ctx); !errors.Is(err, ErrExists) {
		t.Fatalf("commit: %v, want ErrExists", err)
	}
	if evicted {
		h.e.opts.MaxLoadedSessions = 1
		h.create("other", 200000)
		h.e.mu.Lock()
		_, loaded := h.e.sessions["s"]
		h.e.mu.Unlock()
		if loaded {
			t.Fatal("the stale copy of a session that could not be stored is kept in memory")
		}
	}
	info, err := h.e.Session(ctx, "s")
	if err != nil || info.Messages != 0 || info.ContextLimit != 100000 {
		t.Fatalf("the session after the failed commit: %+v, %v; want the log's, empty", info, err)
	}
	if msgs := h.events("s", checkpoint.KindMessage); len(msgs) != 0 {
		t.Fatalf("log %+v", msgs)
	}
}
