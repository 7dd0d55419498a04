package engine

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/artifacts"
	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/offload"
	"github.com/ctxd/ctxd/trigger"
)

// logOf is every event of session id as the log holds it: seq, kind and
// its JSON form.
func (h *harness) logOf(id string) []string {
	h.t.Helper()
	var out []string
	err := h.e.Events(context.Background(), id, 1, false, func(ev checkpoint.Event) error {
		b, err := json.Marshal(ev)
		out = append(out, string(b))
		return err
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

// filesUnder lists the files under dir (none when it does not exist).
func filesUnder(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// contextJSON is the assembled context's messages as JSON, for comparing.
func contextJSON(t *testing.T, h *harness, id string) string {
	t.Helper()
	b, err := json.Marshal(h.context(id).Messages)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func bigResult(id string) history.Message {
	return history.Message{Role: history.RoleTool, ToolCallID: id, ToolName: "read",
		Content: []history.Block{{Type: history.BlockText, Text: strings.Repeat("line of build output\n", 8000)}}}
}

// A staged append is in the session's context at once and not in its log;
// discarded, it leaves the log, the context, the figures and the offload
// directory exactly as they were, and the same messages append again at
// the same seqs.
func TestStagedDiscardLeavesTheSessionAsItWas(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, layersConfig(dir+"/offload"), dir+"/db")
	ctx := context.Background()
	h.create("s", 200000)
	h.append("s", user("build it"), calls("b0"), bigResult("b0"), withUsage(calls("b1"), 3000, 20))

	logBefore, ctxBefore := h.logOf("s"), contextJSON(t, h, "s")
	filesBefore := filesUnder(t, dir+"/offload")
	infoBefore, err := h.e.Session(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if len(filesBefore) != 1 {
		t.Fatalf("the scenario needs one offloaded result before: %v", filesBefore)
	}

	st, err := h.e.Stage(ctx, "s", []history.Message{bigResult("b1"), user("and test it")}, AppendOptions{ClientState: json.RawMessage(`{"n":6}`)})
	if err != nil {
		t.Fatal(err)
	}
	res := st.Result()
	if len(res.Messages) != 2 || res.FirstSeq != uint64(len(logBefore))+1 || !strings.HasPrefix(res.Messages[0].Content[0].Text, "[ctxd offloaded") {
		t.Fatalf("staged result %+v", res)
	}
	a := h.context("s")
	if last := a.Messages[len(a.Messages)-1]; last.Content[0].Text != "and test it" {
		t.Fatalf("the staged prompt is not in the context: %+v", last)
	}
	if cs, _ := h.e.ClientState(ctx, "s"); string(cs) != `{"n":6}` {
		t.Fatalf("client state while staged %s", cs)
	}
	if got := h.logOf("s"); !slices.Equal(got, logBefore) {
		t.Fatalf("the log changed before the commit: %d events, %d before", len(got), len(logBefore))
	}
	if len(filesUnder(t, dir+"/offload")) != 2 {
		t.Fatal("the staged result's offload file is not written")
	}

	if !st.Discard() {
		t.Fatal("Discard: the append was stored")
	}
	if err := st.Commit(ctx); !errors.Is(err, ErrDiscarded) {
		t.Fatalf("Commit after Discard: %v", err)
	}
	if got := h.logOf("s"); !slices.Equal(got, logBefore) {
		t.Fatalf("the log changed: %d events, %d before", len(got), len(logBefore))
	}
	if got := contextJSON(t, h, "s"); got != ctxBefore {
		t.Fatalf("context after the discard differs:\n%s\nbefore:\n%s", got, ctxBefore)
	}
	if got := filesUnder(t, dir+"/offload"); !slices.Equal(got, filesBefore) {
		t.Fatalf("offload files %v, before %v", got, filesBefore)
	}
	info, err := h.e.Session(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if info.Messages != infoBefore.Messages || info.LastSeq != infoBefore.LastSeq || info.Tokens != infoBefore.Tokens {
		t.Fatalf("figures after the discard %+v, before %+v", info, infoBefore)
	}
	if cs, _ := h.e.ClientState(ctx, "s"); cs != nil {
		t.Fatalf("client state after the discard %s", cs)
	}

	again := h.append("s", bigResult("b1"), user("and test it"))
	if again.FirstSeq != res.FirstSeq || len(again.Messages) != 2 {
		t.Fatalf("append after the discard %+v", again)
	}
}

// A committed staged append is in the log at the seqs it was given, and
// survives a restart; Discard after Commit keeps it.
func TestStagedCommitIsDurable(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig()
	h := newHarness(t, cfg, dir)
	ctx := context.Background()
	h.create("s", 200000)
	h.append("s", user("hello"), withUsage(assistant("hi"), 1000, 5))
	st, err := h.e.Stage(ctx, "s", []history.Message{user("more")}, AppendOptions{ClientState: json.RawMessage(`{"n":3}`)})
	if err != nil {
		t.Fatal(err)
	}
	staged := contextJSON(t, h, "s")
	if err := st.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if st.Discard() {
		t.Fatal("Discard dropped a committed append")
	}
	h.append("s", withUsage(assistant("done"), 1100, 5))
	h.Close()

	h2 := newHarness(t, cfg, dir)
	msgs := h2.events("s", checkpoint.KindMessage)
	if len(msgs) != 4 || msgs[2].Seq != st.Result().FirstSeq || msgs[2].Message.Content[0].Text != "more" {
		t.Fatalf("after a restart the log holds %d messages: %+v", len(msgs), msgs)
	}
	if cs, _ := h2.e.ClientState(ctx, "s"); string(cs) != `{"n":3}` {
		t.Fatalf("client state after a restart %s", cs)
	}
	a := h2.context("s")
	b, _ := json.Marshal(a.Messages[:len(a.Messages)-1])
	if string(b) != staged {
		t.Fatalf("context after a restart differs from the staged one:\n%s\n%s", b, staged)
	}
}

// Any other write of the session's log writes a pending staged append
// first: an append after it, and a compaction, find it durable, and
// Discard then keeps it.
func TestStagedWrittenBeforeAnyOtherWrite(t *testing.T) {
	ctx := context.Background()
	t.Run("append", func(t *testing.T) {
		h := newHarness(t, testConfig(), "")
		h.create("s", 200000)
		h.append("s", user("hello"), assistant("hi"))
		st, err := h.e.Stage(ctx, "s", []history.Message{user("staged")}, AppendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		res := h.append("s", assistant("after"))
		if res.FirstSeq != st.Result().LastSeq+1 {
			t.Fatalf("the append after the staged one is at %d, staged ended at %d", res.FirstSeq, st.Result().LastSeq)
		}
		if st.Discard() {
			t.Fatal("Discard dropped an append another write committed")
		}
		msgs := h.events("s", checkpoint.KindMessage)
		if len(msgs) != 4 || msgs[2].Message.Content[0].Text != "staged" || msgs[3].Message.Content[0].Text != "after" {
			t.Fatalf("log %+v", msgs)
		}
	})
	t.Run("compaction", func(t *testing.T) {
		h := newHarness(t, testConfig(), "")
		h.create("s", 200000)
		h.append("s", user("first "+words(9000)), assistant("a "+words(9000)), user("second "+words(9000)), assistant("b "+words(9000)))
		st, err := h.e.Stage(ctx, "s", []history.Message{user("staged " + words(9000))}, AppendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.e.Compact(ctx, "s", trigger.Manual, true); err != nil {
			t.Fatal(err)
		}
		if st.Discard() {
			t.Fatal("Discard dropped an append a compaction covered")
		}
		msgs := h.events("s", checkpoint.KindMessage)
		cps := h.events("s", checkpoint.KindCheckpoint)
		if len(msgs) != 5 || len(cps) != 1 || cps[0].Seq < st.Result().LastSeq {
			t.Fatalf("%d messages, checkpoints %+v, staged ended at %d", len(msgs), cps, st.Result().LastSeq)
		}
	})
	t.Run("deletion", func(t *testing.T) {
		h := newHarness(t, testConfig(), "")
		h.create("s", 200000)
		h.append("s", user("hello"), assistant("hi"))
		st, err := h.e.Stage(ctx, "s", []history.Message{user("staged")}, AppendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.e.DeleteSession(ctx, "s"); err != nil {
			t.Fatal(err)
		}
		if err := st.Commit(ctx); err == nil {
			t.Fatal("a staged append of a deleted session committed")
		}
		if _, err := h.e.Session(ctx, "s"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("session after the deletion: %v", err)
		}
	})
}

// A session with a staged append is never evicted: its context keeps the
// append while other sessions are loaded past the bound, and the commit
// lands where it was staged.
func TestStagedSessionNotEvicted(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, testConfig(), "")
	h.e.opts.MaxLoadedSessions = 2
	h.create("s", 200000)
	h.append("s", user("hello"), assistant("hi"))
	st, err := h.e.Stage(ctx, "s", []history.Message{user("staged")}, AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		id := "o" + string(rune('a'+i))
		h.create(id, 200000)
		h.append(id, user("other"))
	}
	a := h.context("s")
	if last := a.Messages[len(a.Messages)-1]; last.Content[0].Text != "staged" {
		t.Fatalf("the staged append left the context after other sessions loaded: %+v", last)
	}
	if err := st.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	h.append("s", assistant("done"))
	if msgs := h.events("s", checkpoint.KindMessage); len(msgs) != 4 || msgs[2].Message.Content[0].Text != "staged" {
		t.Fatalf("log %+v", msgs)
	}
}

// A staged append's offloaded result costs no durable write before the
// commit: its file is there to be read at once (the stub names it), whole,
// but its artifact is stored by the commit, before the append's events,
// which then name it; a discarded append leaves neither.
func TestStagedOffloadIsDurableAtTheCommit(t *testing.T) {
	for _, tc := range []string{"committed", "discarded", "file gone"} {
		t.Run(tc, func(t *testing.T) {
			commit := tc != "discarded"
			dir := t.TempDir()
			h := newHarness(t, layersConfig(dir+"/offload"), dir+"/db")
			ctx := context.Background()
			h.create("s", 200000)
			h.append("s", user("build it"), calls("b1"))
			big := bigResult("b1")
			st, err := h.e.Stage(ctx, "s", []history.Message{big}, AppendOptions{})
			if err != nil {
				t.Fatal(err)
			}
			stub := st.Result().Messages[0].Content[0].Text
			i := strings.Index(stub, "artifact://")
			if i < 0 {
				t.Fatalf("the stub names no artifact: %.300s", stub)
			}
			uri := stub[i:]
			uri = uri[:strings.IndexAny(uri, ") \n")]
			id, err := artifacts.ParseID(strings.TrimPrefix(uri, "artifact://"))
			if err != nil {
				t.Fatal(err)
			}
			files := filesUnder(t, dir+"/offload")
			if len(files) != 1 {
				t.Fatalf("offload files while staged: %v", files)
			}
			if b, err := os.ReadFile(files[0]); err != nil || string(b) != big.Content[0].Text {
				t.Fatalf("the staged result's file does not hold the result (%d bytes, %v)", len(b), err)
			}
			if ok, err := h.arts.Has(ctx, id); err != nil || ok {
				t.Fatalf("artifact stored before the commit: %v %v", ok, err)
			}
			if !commit {
				if !st.Discard() {
					t.Fatal("Discard: the append was stored")
				}
				if ok, err := h.arts.Has(ctx, id); err != nil || ok {
					t.Fatalf("artifact of a discarded append: %v %v", ok, err)
				}
				if f := filesUnder(t, dir+"/offload"); len(f) != 0 {
					t.Fatalf("files of a discarded append: %v", f)
				}
				return
			}
			if tc == "file gone" {
				// Its commit fails, as a failed log write: the log is as
				// it was (the client's resend records the request again).
				before := h.logOf("s")
				if err := os.Remove(files[0]); err != nil {
					t.Fatal(err)
				}
				if err := st.Commit(ctx); err == nil {
					t.Fatal("committed an append whose offload file is gone")
				}
				if got := h.logOf("s"); !slices.Equal(got, before) {
					t.Fatalf("the log changed: %d events, %d before", len(got), len(before))
				}
				return
			}
			if err := st.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			got, _, err := h.arts.Get(ctx, id)
			if err != nil || string(got) != big.Content[0].Text {
				t.Fatalf("artifact after the commit: %d bytes, %v", len(got), err)
			}
			var rec offload.Record
			for _, ev := range h.events("s", checkpoint.KindOffload) {
				_ = json.Unmarshal(ev.Data, &rec)
			}
			if rec.Artifact != uri || rec.Path != files[0] {
				t.Fatalf("the logged offload names %s %s, the stub %s %s", rec.Artifact, rec.Path, uri, files[0])
			}
		})
	}
}

// TestStagedOffloadWriteFailureKeepsTheResultWhole: when a staged
// offload's file cannot be written (here the session's offload directory
// cannot be made: a file holds its name), the result is staged and sent
// whole, as a failed write of an unstaged append keeps it, with an
// offload_failed event in place of the offload, and the commit writes no
// offload.
func TestStagedOffloadWriteFailureKeepsTheResultWhole(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, layersConfig(dir+"/offload"), dir+"/db")
	ctx := context.Background()
	h.create("s", 200000)
	h.append("s", user("build it"), calls("b1"))
	if err := os.MkdirAll(dir+"/offload", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/offload/s", []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	big := bigResult("b1")
	st, err := h.e.Stage(ctx, "s", []history.Message{big}, AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Result().Messages[0].Content[0].Text; got != big.Content[0].Text {
		t.Fatalf("staged as %.200q, want the result whole", got)
	}
	a := h.context("s")
	if last := a.Messages[len(a.Messages)-1]; last.Content[0].Text != big.Content[0].Text {
		t.Fatalf("the context sends %.200q, want the result whole", last.Content[0].Text)
	}
	if err := st.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(h.events("s", checkpoint.KindOffload)); n != 0 {
		t.Fatalf("%d offload events for a result whose file was not written", n)
	}
	if n := len(h.events("s", checkpoint.KindOffloadFailed)); n != 1 {
		t.Fatalf("%d offload_failed events, want 1", n)
	}
}
