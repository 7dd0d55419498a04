package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
)

// A staged append's checks queue no compaction and no speculative summary
// — no summarizer call — and write nothing before its commit: its
// post-check and a pre-send check say the compaction is deferred;
// discarded, it leaves no job, no call, no event; committed, the check
// runs then and the compaction follows.
func TestStagedChecksQueueNoJobBeforeTheCommit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		commit bool
		// usage: the staged append carries the usage of a response (its
		// post-check fires); else the pre-send check of Context does.
		usage bool
	}{
		{"pre-send, discarded", false, false},
		{"pre-send, committed", true, false},
		{"post-check, discarded", false, true},
		{"post-check, committed", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			fake := newFakeAnthropic(t, okSummary(specSummary()))
			cfg := testConfig()
			cfg.Summarizer.Bindings = []config.Binding{fake.binding()}
			h := newHarness(t, cfg, "")
			h.create("s", 50000) // threshold 35,000
			h.append("s", user("first "+words(7000)), assistant("a "+words(7000)), user("second "+words(7000)), assistant("b "+words(7000)))
			before := h.logOf("s")

			var st *Staged
			var err error
			if tc.usage {
				st, err = h.e.Stage(ctx, "s", []history.Message{user("third " + words(4000)), withUsage(assistant("c "+words(4000)), 36000, 4000)}, AppendOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if res := st.Result(); res.CompactionQueued || !strings.Contains(res.Decision, deferredWork) {
					t.Fatalf("staged post-check: queued %v, decision %q", res.CompactionQueued, res.Decision)
				}
			} else {
				st, err = h.e.Stage(ctx, "s", []history.Message{user("third " + words(9000))}, AppendOptions{})
				if err != nil {
					t.Fatal(err)
				}
				a, err := h.e.Context(ctx, "s", ContextOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if a.Compacted || a.DiagnosticCode != api.DiagNotCompacted || !strings.Contains(a.Diagnostic, deferredWork) || a.Tokens < a.Threshold {
					t.Fatalf("pre-send check of a staged append: compacted %v, %d tokens (threshold %d), diagnostic %s %q", a.Compacted, a.Tokens, a.Threshold, a.DiagnosticCode, a.Diagnostic)
				}
			}
			if j := h.pool.Active("s"); j != nil {
				t.Fatal("a job of the session is queued before the commit")
			}
			if n := fake.count(); n != 0 {
				t.Fatalf("%d summarizer calls before the commit", n)
			}
			if got := h.logOf("s"); !slices.Equal(got, before) {
				t.Fatalf("the log changed before the commit: %d events, %d before", len(got), len(before))
			}

			if !tc.commit {
				if !st.Discard() {
					t.Fatal("Discard: the append was stored")
				}
				if j := h.pool.Active("s"); j != nil || fake.count() != 0 {
					t.Fatalf("after the discard: job %v, %d summarizer calls", j != nil, fake.count())
				}
				if got := h.logOf("s"); !slices.Equal(got, before) {
					t.Fatalf("the log changed: %d events, %d before", len(got), len(before))
				}
				return
			}
			if err := st.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			cp := h.waitEvent("s", 1, checkpoint.KindCheckpoint)
			if cp.Seq <= st.Result().LastSeq || fake.count() == 0 {
				t.Fatalf("checkpoint at %d, staged append ended at %d, %d summarizer calls", cp.Seq, st.Result().LastSeq, fake.count())
			}
		})
	}
}

// A context-edit pass a staged append fires is applied in memory with it
// and written with it: at its commit, at the seqs its result gave, or
// never when it is discarded.
func TestStagedPassIsWrittenWithItsAppend(t *testing.T) {
	for _, commit := range []bool{true, false} {
		t.Run(fmt.Sprint("commit=", commit), func(t *testing.T) {
			ctx := context.Background()
			cfg := config.Defaults()
			cfg.Offload.Enabled = false
			h := newHarness(t, cfg, "")
			h.create("s", 1000000)
			h.append("s", user("investigate"))
			for i := range 6 {
				toolRound(h, fmt.Sprintf("r%d", i), "grep", 3000)
			}
			if n := len(h.events("s", checkpoint.KindContextEdit)); n != 0 {
				t.Fatalf("%d passes before the staged append", n)
			}
			before, ctxBefore := h.logOf("s"), contextJSON(t, h, "s")
			var msgs []history.Message
			for _, id := range []string{"r6", "r7"} {
				msgs = append(msgs,
					history.Message{Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockToolCall, ID: id, Name: "grep", Input: []byte(`{}`)}}},
					history.Message{Role: history.RoleTool, ToolCallID: id, ToolName: "grep", Content: []history.Block{{Type: history.BlockText, Text: words(3000)}}})
			}
			st, err := h.e.Stage(ctx, "s", msgs, AppendOptions{})
			if err != nil {
				t.Fatal(err)
			}
			res := st.Result()
			var pass *checkpoint.Event
			for i := range res.Events {
				if res.Events[i].Kind == checkpoint.KindContextEdit {
					pass = &res.Events[i]
				}
			}
			if pass == nil || pass.Seq <= res.Messages[len(res.Messages)-1].Seq || pass.Seq > res.LastSeq {
				t.Fatalf("the staged append fired no pass after its messages: %+v", res.Events)
			}
			if !strings.Contains(contextJSON(t, h, "s"), "[ctxd") {
				t.Fatal("the pass is not applied to the staged context")
			}
			if got := h.logOf("s"); !slices.Equal(got, before) {
				t.Fatalf("written before the commit: %d events, %d before", len(got), len(before))
			}
			if !commit {
				if !st.Discard() {
					t.Fatal("Discard: the append was stored")
				}
				if got := h.logOf("s"); !slices.Equal(got, before) {
					t.Fatalf("the log changed: %d events, %d before", len(got), len(before))
				}
				if got := contextJSON(t, h, "s"); got != ctxBefore {
					t.Fatal("the context after the discard is not the one before")
				}
				return
			}
			if err := st.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			passes := h.events("s", checkpoint.KindContextEdit)
			if len(passes) != 1 || passes[0].Seq != pass.Seq || string(passes[0].Data) != string(pass.Data) {
				t.Fatalf("passes in the log %+v, the staged one at %d", passes, pass.Seq)
			}
			if got := h.logOf("s"); len(got) != len(before)+int(res.LastSeq-res.FirstSeq)+1 {
				t.Fatalf("%d events after the commit, %d before, the append wrote %d–%d", len(got), len(before), res.FirstSeq, res.LastSeq)
			}
			staged := contextJSON(t, h, "s")
			h.e.forget("s")
			if got := contextJSON(t, h, "s"); got != staged {
				t.Fatal("the context read back from the log differs from the staged one")
			}
		})
	}
}

// An answer's usage counts the context its request was sent from
// (AppendOptions.AssembledAt): when a checkpoint was written since — a
// compaction deferred until the upstream accepted the request ends
// before the answer is recorded — it counts what the checkpoint replaced,
// and is not stored; without one in between it is.
func TestUsageOfAContextACheckpointReplacedIsNotStored(t *testing.T) {
	for _, compacted := range []bool{true, false} {
		t.Run(fmt.Sprint("compacted=", compacted), func(t *testing.T) {
			ctx := context.Background()
			h := newHarness(t, testConfig(), "")
			h.create("s", 200000)
			h.append("s", user("first "+words(9000)), assistant("a "+words(9000)), user("second "+words(9000)), assistant("b "+words(9000)), user("third"))
			sent := h.context("s")
			if compacted {
				if _, err := h.e.Compact(ctx, "s", "manual", true); err != nil {
					t.Fatal(err)
				}
			}
			res, err := h.e.AppendWith(ctx, "s", []history.Message{withUsage(assistant("done"), 37000, 5)}, AppendOptions{AssembledAt: sent.LastSeq})
			if err != nil {
				t.Fatal(err)
			}
			stored := h.events("s", checkpoint.KindMessage)
			last := stored[len(stored)-1].Message
			if compacted != (last.Usage == nil) || compacted != (res.TokensSource == SourceEstimated) {
				t.Fatalf("compacted %v: stored usage %+v, the estimate %d %s", compacted, last.Usage, res.Tokens, res.TokensSource)
			}
		})
	}
}

// A staged append that takes the context over the window defers its
// pre-send compaction too, unless the request's credential was accepted
// before (ContextOptions.Earned): the context would be refused for its
// length, and the overflow compaction after the refusal costs as much.
// Then the check compacts, and the append is written first.
func TestStagedOverTheWindowCompactsWhenEarned(t *testing.T) {
	for _, earned := range []bool{false, true} {
		t.Run(fmt.Sprint("earned=", earned), func(t *testing.T) {
			ctx := context.Background()
			h := newHarness(t, testConfig(), "")
			h.create("s", 50000) // threshold 35,000
			h.append("s", user("first "+words(7000)), assistant("a "+words(7000)), user("second "+words(7000)), assistant("b "+words(7000)))
			before := h.logOf("s")
			st, err := h.e.Stage(ctx, "s", []history.Message{user("third " + words(25000))}, AppendOptions{})
			if err != nil {
				t.Fatal(err)
			}
			a, err := h.e.Context(ctx, "s", ContextOptions{Earned: earned})
			if err != nil {
				t.Fatal(err)
			}
			if !earned {
				if a.Compacted || a.DiagnosticCode != api.DiagNotCompacted || !strings.Contains(a.Diagnostic, deferredWork) || a.Tokens <= a.ContextLimit {
					t.Fatalf("not earned: compacted %v, %d tokens (window %d), %s %q", a.Compacted, a.Tokens, a.ContextLimit, a.DiagnosticCode, a.Diagnostic)
				}
				if got := h.logOf("s"); !slices.Equal(got, before) || !st.Discard() {
					t.Fatalf("not earned: the log changed (%d events, %d before)", len(got), len(before))
				}
				return
			}
			if !a.Compacted || a.Tokens > a.ContextLimit {
				t.Fatalf("earned: compacted %v, %d tokens (window %d), %q", a.Compacted, a.Tokens, a.ContextLimit, a.Diagnostic)
			}
			if st.Discard() {
				t.Fatal("earned: the compaction did not write the staged append first")
			}
		})
	}
}
