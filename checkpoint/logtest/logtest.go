// Package logtest is the conformance suite of checkpoint.Log: the behaviour
// every implementation (badger's Store, the NATS log of docs/design.md §9) must
// have, run by each implementation's tests with Run.
package logtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/history"
)

// Run runs the suite against logs made by open; each subtest gets a fresh
// prefix of session ids, so open may return the same log every time.
func Run(t *testing.T, open func(t *testing.T) checkpoint.Log) {
	ctx := context.Background()
	n := 0
	sid := func(name string) string { n++; return fmt.Sprintf("lt%d-%d.%s", time.Now().UnixNano()%1e9, n, name) }
	msg := func(text string) checkpoint.Event {
		return checkpoint.Event{Kind: checkpoint.KindMessage, Message: &history.Message{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: text}}}}
	}

	t.Run("CreateGetExists", func(t *testing.T) {
		l := open(t)
		id := sid("a")
		m, err := l.CreateSession(ctx, id, checkpoint.Meta{Model: "m1", Labels: map[string]string{"k": "v"}})
		if err != nil || m.Created.IsZero() {
			t.Fatalf("create: %+v %v", m, err)
		}
		if _, err := l.CreateSession(ctx, id, checkpoint.Meta{}); !errors.Is(err, checkpoint.ErrExists) {
			t.Fatalf("second create: %v, want ErrExists", err)
		}
		got, err := l.GetMeta(ctx, id)
		if err != nil || got.Model != "m1" || got.Labels["k"] != "v" {
			t.Fatalf("get: %+v %v", got, err)
		}
		if _, err := l.GetMeta(ctx, sid("missing")); !errors.Is(err, checkpoint.ErrNotFound) {
			t.Fatalf("missing: %v", err)
		}
		if _, err := l.GetMeta(ctx, "bad id"); !errors.Is(err, checkpoint.ErrInvalid) {
			t.Fatalf("bad id: %v", err)
		}
		if _, err := l.CreateSession(ctx, sid("j"), checkpoint.Meta{Tools: []byte("{")}); !errors.Is(err, checkpoint.ErrInvalid) {
			t.Fatalf("bad tools JSON: %v", err)
		}
	})

	t.Run("AppendRangeLastSeq", func(t *testing.T) {
		l := open(t)
		id := sid("b")
		if _, err := l.CreateSession(ctx, id, checkpoint.Meta{}); err != nil {
			t.Fatal(err)
		}
		if last, err := l.LastSeq(ctx, id); err != nil || last != 0 {
			t.Fatalf("empty last: %d %v", last, err)
		}
		first, err := l.Append(ctx, id, []checkpoint.Event{msg("one"), msg("two")})
		if err != nil || first != 1 {
			t.Fatalf("append: %d %v", first, err)
		}
		first, err = l.Append(ctx, id, []checkpoint.Event{{Kind: checkpoint.KindDiagnostic, Data: []byte(`{"a": 1}`)}})
		if err != nil || first != 3 {
			t.Fatalf("append 2: %d %v", first, err)
		}
		if _, err := l.Append(ctx, id, []checkpoint.Event{msg("x"), {Kind: "nope"}}); !errors.Is(err, checkpoint.ErrInvalid) {
			t.Fatalf("invalid event: %v", err)
		}
		if _, err := l.Append(ctx, sid("none"), []checkpoint.Event{msg("x")}); !errors.Is(err, checkpoint.ErrNotFound) {
			t.Fatalf("missing session: %v", err)
		}
		var got []checkpoint.Event
		if err := l.Range(ctx, id, 2, func(ev checkpoint.Event) error { got = append(got, ev); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].Seq != 2 || got[0].Message.Content[0].Text != "two" || got[0].Message.Seq != 2 ||
			got[1].Seq != 3 || string(got[1].Data) != `{"a": 1}` {
			t.Fatalf("range: %+v", got)
		}
		if last, err := l.LastSeq(ctx, id); err != nil || last != 3 {
			t.Fatalf("last: %d %v", last, err)
		}
		stop := errors.New("stop")
		calls := 0
		if err := l.Range(ctx, id, 1, func(checkpoint.Event) error { calls++; return stop }); err != stop || calls != 1 {
			t.Fatalf("range stop: %v after %d", err, calls)
		}
	})

	t.Run("AppendAtConflict", func(t *testing.T) {
		l := open(t)
		id := sid("c")
		if _, err := l.CreateSession(ctx, id, checkpoint.Meta{}); err != nil {
			t.Fatal(err)
		}
		if first, err := l.AppendAt(ctx, id, 0, []checkpoint.Event{msg("a")}); err != nil || first != 1 {
			t.Fatalf("at 0: %d %v", first, err)
		}
		if _, err := l.AppendAt(ctx, id, 0, []checkpoint.Event{msg("b")}); !errors.Is(err, checkpoint.ErrConflict) {
			t.Fatalf("stale at 0: %v, want ErrConflict", err)
		}
		if first, err := l.AppendAt(ctx, id, 1, []checkpoint.Event{msg("b")}); err != nil || first != 2 {
			t.Fatalf("at 1: %d %v", first, err)
		}
		if last, _ := l.LastSeq(ctx, id); last != 2 {
			t.Fatalf("last %d after a refused append, want 2", last)
		}
	})

	t.Run("ConcurrentAppendsContiguous", func(t *testing.T) {
		l := open(t)
		id := sid("d")
		if _, err := l.CreateSession(ctx, id, checkpoint.Meta{}); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		firsts := make(chan uint64, 40)
		for w := range 4 {
			wg.Go(func() {
				for i := range 10 {
					f, err := l.Append(ctx, id, []checkpoint.Event{msg(fmt.Sprintf("%d-%d", w, i))})
					if err != nil {
						t.Error(err)
						return
					}
					firsts <- f
				}
			})
		}
		wg.Wait()
		close(firsts)
		seen := map[uint64]bool{}
		for f := range firsts {
			if seen[f] {
				t.Fatalf("seq %d acknowledged twice", f)
			}
			seen[f] = true
		}
		want := uint64(1)
		if err := l.Range(ctx, id, 1, func(ev checkpoint.Event) error {
			if ev.Seq != want {
				return fmt.Errorf("seq %d, want %d", ev.Seq, want)
			}
			want++
			return nil
		}); err != nil || want != 41 || len(seen) != 40 {
			t.Fatalf("range: %v, next %d, acked %d", err, want, len(seen))
		}
	})

	t.Run("PutMeta", func(t *testing.T) {
		l := open(t)
		id := sid("e")
		if _, err := l.CreateSession(ctx, id, checkpoint.Meta{Model: "m1"}); err != nil {
			t.Fatal(err)
		}
		first, err := l.PutMeta(ctx, id, checkpoint.Meta{Model: "m2", SystemPrompt: "p"}, checkpoint.Event{Kind: checkpoint.KindSessionUpdated, Data: []byte(`{}`)})
		if err != nil || first != 1 {
			t.Fatalf("put: %d %v", first, err)
		}
		m, err := l.GetMeta(ctx, id)
		if err != nil || m.Model != "m2" || m.SystemPrompt != "p" || m.Created.IsZero() {
			t.Fatalf("meta: %+v %v", m, err)
		}
		if _, err := l.PutMeta(ctx, sid("none"), checkpoint.Meta{}); !errors.Is(err, checkpoint.ErrNotFound) {
			t.Fatalf("missing: %v", err)
		}
	})

	t.Run("Checkpoints", func(t *testing.T) {
		l := open(t)
		id := sid("f")
		if _, err := l.CreateSession(ctx, id, checkpoint.Meta{}); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := l.Latest(ctx, id); ok || err != nil {
			t.Fatalf("latest of none: %v %v", ok, err)
		}
		if _, err := l.Append(ctx, id, []checkpoint.Event{msg("a"), msg("b"), msg("c")}); err != nil {
			t.Fatal(err)
		}
		if _, err := l.PutCheckpoint(ctx, id, checkpoint.Checkpoint{Summary: "s", SnapshotSeq: 9}); !errors.Is(err, checkpoint.ErrInvalid) {
			t.Fatalf("snapshot past the log: %v", err)
		}
		if _, err := l.PutCheckpoint(ctx, id, checkpoint.Checkpoint{SnapshotSeq: 1}); !errors.Is(err, checkpoint.ErrInvalid) {
			t.Fatalf("empty summary: %v", err)
		}
		cp, err := l.PutCheckpoint(ctx, id, checkpoint.Checkpoint{Summary: "sum one", SnapshotSeq: 2, FirstRetainedSeq: 2, Binding: "b"})
		if err != nil || cp.Seq != 4 || cp.SummaryBytes != 7 {
			t.Fatalf("put: %+v %v", cp, err)
		}
		if _, err := l.Append(ctx, id, []checkpoint.Event{msg("d")}); err != nil {
			t.Fatal(err)
		}
		cp2, err := l.PutCheckpoint(ctx, id, checkpoint.Checkpoint{Summary: "sum two", SnapshotSeq: 5})
		if err != nil || cp2.Seq != 6 {
			t.Fatalf("put 2: %+v %v", cp2, err)
		}
		if _, err := l.PutCheckpoint(ctx, id, checkpoint.Checkpoint{Summary: "old", SnapshotSeq: 3}); !errors.Is(err, checkpoint.ErrInvalid) && !errors.Is(err, checkpoint.ErrConflict) {
			t.Fatalf("snapshot before the previous: %v", err)
		}
		latest, ok, err := l.Latest(ctx, id)
		if err != nil || !ok || latest.Seq != 6 || latest.Summary != "sum two" {
			t.Fatalf("latest: %+v %v %v", latest, ok, err)
		}
		got, err := l.GetCheckpoint(ctx, id, 4)
		if err != nil || got.Summary != "sum one" || got.FirstRetainedSeq != 2 {
			t.Fatalf("get: %+v %v", got, err)
		}
		if _, err := l.GetCheckpoint(ctx, id, 5); !errors.Is(err, checkpoint.ErrNotFound) {
			t.Fatalf("get a message's seq: %v", err)
		}
		all, err := l.ListCheckpoints(ctx, id)
		if err != nil || len(all) != 2 || all[0].Seq != 4 || all[1].Seq != 6 {
			t.Fatalf("list: %+v %v", all, err)
		}
		m, err := l.GetMeta(ctx, id)
		if err != nil || m.LatestCheckpoint != 6 || m.Checkpoints != 2 {
			t.Fatalf("meta: %+v %v", m, err)
		}
		var kinds []checkpoint.Kind
		_ = l.Range(ctx, id, 4, func(ev checkpoint.Event) error { kinds = append(kinds, ev.Kind); return nil })
		if len(kinds) != 3 || kinds[0] != checkpoint.KindCheckpoint || kinds[2] != checkpoint.KindCheckpoint {
			t.Fatalf("kinds: %v", kinds)
		}
	})

	t.Run("ListAndRows", func(t *testing.T) {
		l := open(t)
		before, err := l.CountSessions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		base := sid("g")
		ids := []string{base + "-x", base, base + "a"}
		for _, id := range ids {
			if _, err := l.CreateSession(ctx, id, checkpoint.Meta{Model: id}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := l.Append(ctx, base, []checkpoint.Event{msg("a")}); err != nil {
			t.Fatal(err)
		}
		if err := l.PutRow(base, []byte("row")); err != nil {
			t.Fatal(err)
		}
		if err := l.PutRow(base, make([]byte, checkpoint.MaxRowBytes+1)); !errors.Is(err, checkpoint.ErrTooLarge) {
			t.Fatalf("big row: %v", err)
		}
		if n, err := l.CountSessions(ctx); err != nil || n != before+3 {
			t.Fatalf("count %d, want %d: %v", n, before+3, err)
		}
		all, err := l.ListSessions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var mine []string
		for _, id := range all {
			for _, w := range ids {
				if id == w {
					mine = append(mine, id)
				}
			}
		}
		if len(mine) != 3 || mine[0] != base || mine[1] != base+"-x" || mine[2] != base+"a" {
			t.Fatalf("list sorted bytewise: %v", mine)
		}
		// Page through everything one at a time: the store's order (id+"/")
		// puts base-x before base.
		var paged []checkpoint.Listed
		after := ""
		for {
			row, more, err := l.ListPage(ctx, after, 1)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range row {
				for _, w := range ids {
					if r.ID == w {
						paged = append(paged, r)
					}
				}
				after = r.ID
			}
			if !more {
				break
			}
		}
		if len(paged) != 3 || paged[0].ID != base+"-x" || paged[1].ID != base || paged[2].ID != base+"a" {
			t.Fatalf("paged: %+v", paged)
		}
		deadline := time.Now().Add(5 * time.Second)
		for string(paged[1].Row) != "row" && time.Now().Before(deadline) { // PutRow does not wait for its write
			time.Sleep(20 * time.Millisecond)
			p, _, _ := l.ListPage(ctx, base+"-x", 1)
			paged[1] = p[0]
		}
		if string(paged[1].Row) != "row" || paged[1].LastSeq != 1 || paged[1].Meta.Model != base {
			t.Fatalf("listed: %+v", paged[1])
		}
		if _, _, err := l.ListPage(ctx, "", 0); !errors.Is(err, checkpoint.ErrInvalid) {
			t.Fatalf("limit 0: %v", err)
		}
	})

	t.Run("DeleteAndRecreate", func(t *testing.T) {
		l := open(t)
		id := sid("h")
		if _, err := l.CreateSession(ctx, id, checkpoint.Meta{}); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append(ctx, id, []checkpoint.Event{msg("a"), msg("b")}); err != nil {
			t.Fatal(err)
		}
		if err := l.DeleteSession(ctx, id); err != nil {
			t.Fatal(err)
		}
		if _, err := l.GetMeta(ctx, id); !errors.Is(err, checkpoint.ErrNotFound) {
			t.Fatalf("after delete: %v", err)
		}
		if err := l.DeleteSession(ctx, id); !errors.Is(err, checkpoint.ErrNotFound) {
			t.Fatalf("second delete: %v", err)
		}
		if _, err := l.CreateSession(ctx, id, checkpoint.Meta{}); err != nil {
			t.Fatal(err)
		}
		if first, err := l.Append(ctx, id, []checkpoint.Event{msg("c")}); err != nil || first != 1 {
			t.Fatalf("recreated starts at 1: %d %v", first, err)
		}
		n := 0
		_ = l.Range(ctx, id, 1, func(checkpoint.Event) error { n++; return nil })
		if n != 1 {
			t.Fatalf("recreated session has %d events, want 1", n)
		}
	})

	t.Run("Wait", func(t *testing.T) {
		l := open(t)
		id := sid("w")
		if _, err := l.CreateSession(ctx, id, checkpoint.Meta{}); err != nil {
			t.Fatal(err)
		}
		done := make(chan uint64, 1)
		go func() {
			last, err := l.Wait(ctx, id, 0)
			if err != nil {
				t.Error(err)
			}
			done <- last
		}()
		time.Sleep(50 * time.Millisecond)
		if _, err := l.Append(ctx, id, []checkpoint.Event{msg("a")}); err != nil {
			t.Fatal(err)
		}
		select {
		case last := <-done:
			if last != 1 {
				t.Fatalf("wait returned %d", last)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Wait did not return after an append")
		}
		cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if _, err := l.Wait(cctx, id, 1); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("wait past the end: %v", err)
		}
	})
}
