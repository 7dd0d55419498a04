package engine

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/history"
)

// The session's state is a value: these tests apply messages and
// checkpoints to it without an engine, a log or a lock.

func testState(t *testing.T, factor float64) *sessionState {
	t.Helper()
	st := newSessionState()
	cal, err := history.NewCalibrator(factor)
	if err != nil {
		t.Fatal(err)
	}
	st.cal = cal
	return &st
}

// applyAll applies msgs to st with seqs from first on, as the engine does
// once they are stored, and returns them with their seqs and estimates
// and the memory the state reported they hold.
func applyAll(st *sessionState, first uint64, msgs ...history.Message) ([]history.Message, int64) {
	var est history.Estimator
	var grown int64
	out := make([]history.Message, len(msgs))
	for i, m := range msgs {
		m.Seq = first + uint64(i)
		est.Fill(&m)
		st.state.Apply(m)
		grown += st.appendMessage(m)
		out[i] = m
	}
	return out, grown
}

func activeSeqs(st *sessionState) []uint64 {
	var out []uint64
	for _, en := range st.active {
		out = append(out, en.msg.Seq)
	}
	return out
}

func TestStateAppendTracksCallsTurnsAndRequests(t *testing.T) {
	st := testState(t, 1)
	msgs, grown := applyAll(st, 1, user("fix the failing test"), calls("c1", "c2"), result("c1", words(50)))

	var tokens uint64
	var mem int64
	for _, m := range msgs {
		tokens += m.Tokens
		mem += int64(history.SizeHint(m))
	}
	if st.activeTokens != tokens || grown != mem {
		t.Errorf("active tokens %d, memory %d; want %d and %d", st.activeTokens, grown, tokens, mem)
	}
	if st.first == nil || st.first.msg.Seq != 1 || st.req == nil || st.req.msg.Seq != 1 {
		t.Fatalf("first and current request: %v, %v; want seq 1 for both", st.first, st.req)
	}
	res := st.active[2]
	if res.turn != 1 || res.tool != "read" || res.chars == 0 {
		t.Errorf("the result's turn %d, tool %q, chars %d; want turn 1 of tool read, its size counted", res.turn, res.tool, res.chars)
	}
	if len(st.active[1].inputs) != 2 {
		t.Errorf("the calls' input strings: %+v; want both calls", st.active[1].inputs)
	}
	if _, open := st.calls["c2"]; !open || len(st.calls) != 1 || !st.openRound() {
		t.Errorf("open calls %v, open round %v; want c2 alone, open", st.calls, st.openRound())
	}

	// A new prompt abandons the open call and becomes the current request;
	// the first request stays.
	applyAll(st, 4, user("now the docs"))
	if len(st.calls) != 0 || st.req.msg.Seq != 4 || st.first.msg.Seq != 1 || st.messages != 4 || st.lastMsg != 4 {
		t.Errorf("calls %v, current request %d, first %d, messages %d, last %d; want none, 4, 1, 4, 4",
			st.calls, st.req.msg.Seq, st.first.msg.Seq, st.messages, st.lastMsg)
	}
}

func TestStateEstimateFollowsTheNewestUsage(t *testing.T) {
	st := testState(t, 1)
	applyAll(st, 1, user(words(2000)), withUsage(assistant(words(20)), 3000, 20))
	if n, src := st.estimate(); n != 3020 || src != SourceReported {
		t.Fatalf("after the answer: %d %s; want 3020 reported (input + output)", n, src)
	}
	if st.maxAccepted != 3000 {
		t.Errorf("max accepted %d; want 3000", st.maxAccepted)
	}
	next, _ := applyAll(st, 3, user(words(300)))
	if n, src := st.estimate(); n != 3020+next[0].Tokens || src != SourceEstimated {
		t.Errorf("after a prompt: %d %s; want %d estimated (the usage plus the prompt's estimate)", n, src, 3020+next[0].Tokens)
	}

	// An output the agent logged from a streaming snapshot (under half the
	// estimate) counts as the estimate.
	st = testState(t, 1)
	msgs, _ := applyAll(st, 1, user(words(2000)), withUsage(assistant(words(400)), 3000, 3))
	if n, _ := st.estimate(); n != 3000+msgs[1].Tokens {
		t.Errorf("with a snapshot's output: %d; want %d", n, 3000+msgs[1].Tokens)
	}
}

func TestStateCheckpointKeepsTheRetainedTailAndCarriedRequest(t *testing.T) {
	st := testState(t, 1)
	msgs, _ := applyAll(st, 1,
		user("the first request: "+words(200)), assistant(words(300)),
		user("the current request: "+words(100)), assistant(words(300)),
		user("more"), withUsage(assistant(words(50)), 5000, 50))
	st.failures, st.circuitOpen = 2, true

	cp := checkpoint.Checkpoint{Seq: 7, SnapshotSeq: 6, FirstRetainedSeq: 5, Summary: "what happened",
		SummarizedMessages: 3, TokensBefore: 5050, TokensAfter: 900, Request: &checkpoint.Carried{Seq: 3}}
	mem := st.applyCheckpoint(cp)

	if got := activeSeqs(st); !slices.Equal(got, []uint64{5, 6}) {
		t.Fatalf("active after the checkpoint: %v; want the retained 5 and 6", got)
	}
	if want := msgs[4].Tokens + msgs[5].Tokens; st.activeTokens != want || st.sinceUsage != want || st.usage != nil {
		t.Errorf("active tokens %d, since usage %d, usage %v; want %d, %d and none (usage before a checkpoint is never used again)",
			st.activeTokens, st.sinceUsage, st.usage, want, want)
	}
	if st.keptReq == nil || st.keptReq.msg.Seq != 3 || st.carriedTokens() != msgs[2].Tokens {
		t.Fatalf("carried request %v, %d tokens; want seq 3, %d", st.keptReq, st.carriedTokens(), msgs[2].Tokens)
	}
	sm := summaryMessage(cp)
	if want := int64(history.SizeHint(sm) + history.SizeHint(msgs[4]) + history.SizeHint(msgs[5])); mem != want {
		t.Errorf("memory %d; want %d (the summary and the retained messages)", mem, want)
	}
	if want := st.summaryTokens + msgs[2].Tokens + msgs[4].Tokens + msgs[5].Tokens; st.rawTokens() != want {
		t.Errorf("raw tokens %d; want %d", st.rawTokens(), want)
	}
	if n, src := st.estimate(); src != SourceEstimated || n != st.scaled(st.rawTokens()) {
		t.Errorf("estimate %d %s; want the scaled raw estimate %d", n, src, st.scaled(st.rawTokens()))
	}
	got := st.activeMessages()
	if len(got) != 4 || got[0].Content[0].Text != sm.Content[0].Text || got[1].Seq != 3 || got[2].Seq != 5 || got[3].Seq != 6 {
		t.Errorf("assembled: %v; want the summary, the carried request 3, then 5 and 6", seqs(got))
	}
	if st.failures != 0 || st.circuitOpen || st.checkpoints != 1 {
		t.Errorf("failures %d, circuit open %v, checkpoints %d; want a closed circuit after a checkpoint", st.failures, st.circuitOpen, st.checkpoints)
	}
	if f := st.rewrites[len(st.rewrites)-1]; !f.compaction || f.saved != 4150 || f.rewritten != 900 {
		t.Errorf("rewrite figure %+v; want a compaction saving 4150, rewriting 900", f)
	}

	// A stalled checkpoint counts a failure and leaves the circuit as it is.
	st.circuitOpen = true
	applyAll(st, 8, assistant("more"))
	st.applyCheckpoint(checkpoint.Checkpoint{Seq: 9, SnapshotSeq: 8, Summary: "again", Stalled: true})
	if st.failures != 1 || !st.circuitOpen || len(st.active) != 0 {
		t.Errorf("after a stall: failures %d, circuit open %v, active %v; want 1, open, nothing", st.failures, st.circuitOpen, activeSeqs(st))
	}
}

func TestStateRawAfterCountsWhatTheCheckpointLeaves(t *testing.T) {
	st := testState(t, 1)
	st.fixedTokens = 100
	msgs, _ := applyAll(st, 1, user("first "+words(50)), assistant(words(80)), user("second "+words(40)), assistant(words(60)), user("third"))
	// Snapshot at 4, retaining 4; 5 came after the snapshot; the current
	// request (5) is not carried, it is after the snapshot.
	cp := checkpoint.Checkpoint{SnapshotSeq: 4, FirstRetainedSeq: 4, Request: &checkpoint.Carried{Seq: 1, Stub: "[the first request, in part]"}}
	var est history.Estimator
	stub := est.Message(history.Message{Seq: 1, Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: "[the first request, in part]"}}})
	if got, want := st.rawAfter(cp, 30), 100+30+msgs[3].Tokens+msgs[4].Tokens+stub; got != want {
		t.Errorf("raw after: %d; want %d (fixed, summary, retained 4, later 5, the carried stub)", got, want)
	}
	// Nothing retained: only what followed the snapshot.
	cp = checkpoint.Checkpoint{SnapshotSeq: 4}
	if got, want := st.rawAfter(cp, 30), 100+30+msgs[4].Tokens; got != want {
		t.Errorf("raw after, nothing retained: %d; want %d", got, want)
	}
}

func TestStatePlanAppendClosesAbandonedRoundsAndNamesTheCallersMessage(t *testing.T) {
	st := testState(t, 1)
	applyAll(st, 1, user("go"), calls("c1"))

	b, err := st.planAppend([]history.Message{user("stop, do this instead")}, "m")
	if err != nil {
		t.Fatal(err)
	}
	if len(b.expanded) != 2 || b.expanded[0].Role != history.RoleTool || b.expanded[0].ToolCallID != "c1" ||
		len(b.closed) != 1 || !slices.Equal(b.origin, []int{0, 0}) {
		t.Fatalf("expanded %v, closed %v, origin %v; want c1's error result then the prompt, both from message 0",
			b.expanded, b.closed, b.origin)
	}
	if !st.openRound() {
		t.Error("planning changed the state: the round is no longer open")
	}

	// The second message is invalid (a result for no call): the error
	// names it by the caller's index, past the inserted result.
	_, err = st.planAppend([]history.Message{user("again"), result("nope", "x")}, "m")
	var fe *FieldError
	if !errors.As(err, &fe) || !errors.Is(err, ErrInvalid) || !strings.HasPrefix(fe.Field, "messages[1].") {
		t.Errorf("err %v; want ErrInvalid naming messages[1]", err)
	}

	// A thinking-bound model refuses a thinking block without signature.
	st.model.ThinkingBinding = true
	m := history.Message{Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockText, Text: "ok"}, {Type: history.BlockThinking, Text: "hmm"}}}
	_, err = st.planAppend([]history.Message{result("c1", "done"), m}, "m")
	if !errors.As(err, &fe) || fe.Field != "messages[1].content[1].signature" {
		t.Errorf("err %v; want the unsigned thinking block named", err)
	}
}

// What the provider's own context editing cleared before counting a
// request (Usage.ClearedInputTokens) is added back for the calibration:
// the growth between two requests is of the requests as sent, so an edit
// the provider began applying is not read as ctxd's estimate counting
// too much. And what a pass of ctxd removed since that usage is taken off
// the reported figure only beyond what the provider had cleared.
func TestStateProviderClearedInputs(t *testing.T) {
	st := testState(t, 1)
	applyAll(st, 1, user(words(2000)), withUsage(assistant(words(20)), 3000, 20))
	next, _ := applyAll(st, 3, user(words(3000)))
	grown := next[0].Tokens
	const cleared = 2500
	answer := withUsage(assistant(words(20)), 3020+grown-cleared, 20)
	answer.Usage.ClearedInputTokens = cleared
	applyAll(st, 4, answer)
	if f, n := st.cal.Factor(), st.cal.Samples(); n != 1 || f < 0.999 || f > 1.001 {
		t.Errorf("calibration after the provider cleared %d tokens: factor %v from %d samples; want 1 from 1 (the growth as sent)", cleared, f, n)
	}
	if n, src := st.estimate(); n != 3020+grown-cleared+20 || src != SourceReported {
		t.Errorf("estimate %d %s; want %d reported: what the provider counts", n, src, 3020+grown-cleared+20)
	}
	// A pass removing less than the provider cleared changes nothing of
	// the figure; more, only its excess.
	st.editedSinceUsage = 1000
	if n, _ := st.estimate(); n != 3020+grown-cleared+20 {
		t.Errorf("after a pass of 1000 tokens: %d; want %d (the provider had cleared %d)", n, 3020+grown-cleared+20, cleared)
	}
	st.editedSinceUsage = cleared + 400
	if n, _ := st.estimate(); n != 3020+grown-cleared+20-400 {
		t.Errorf("after a pass of %d tokens: %d; want %d", cleared+400, n, 3020+grown-cleared+20-400)
	}
}
