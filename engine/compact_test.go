package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/trigger"
)

// A 20k-token window, one assistant message with 8 parallel calls whose
// results fill most of it, then a short exchange: compaction keeps exactly
// the trailing groups that fit and never a result without its call.
func TestCompactionKeepsTrailingGroupsThatFit(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	h.create("s", 20000)
	ids := []string{"c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8"}
	msgs := []history.Message{user("read all eight files"), calls(ids...)}
	for _, id := range ids {
		msgs = append(msgs, result(id, words(1800)))
	}
	msgs = append(msgs, assistant("All eight files read; the bug is in c3."), user("thanks, fix it"), assistant("Fixing c3 now."))
	h.append("s", msgs...)
	before := h.context("s")

	res, err := h.e.Compact(context.Background(), "s", trigger.Manual, true)
	if err != nil {
		t.Fatal(err)
	}
	cp := res.Checkpoint
	if cp == nil {
		t.Fatal("no checkpoint")
	}
	// Target = min(16384, 20000/4, available) = 5000: the tool group (~14k
	// tokens) does not fit, the three short messages after it do.
	stored := before.Messages
	wantFirst := stored[len(stored)-3].Seq
	if cp.FirstRetainedSeq != wantFirst {
		t.Fatalf("FirstRetainedSeq = %d, want %d (the short exchange)", cp.FirstRetainedSeq, wantFirst)
	}
	after := h.context("s")
	if got := len(after.Messages); got != 5 {
		t.Fatalf("context has %d messages, want first request + summary + 3", got)
	}
	checkValid(t, after.Messages)
	// The first request is carried as pinned context (keep_first_request),
	// byte-identical; the retained suffix too.
	if a, b := encodeMsg(t, after.Messages[0]), encodeMsg(t, stored[0]); a != b {
		t.Fatalf("first request carried as %s, want %s", a, b)
	}
	after.Messages = after.Messages[1:]
	for i, m := range after.Messages[1:] {
		a, _ := history.Encode(m)
		b, _ := history.Encode(stored[len(stored)-3+i])
		if string(a) != string(b) {
			t.Fatalf("retained message %d differs from the stored one", i)
		}
	}
	if !strings.Contains(after.Messages[0].Content[0].Text, "summary of the 9 earlier messages") {
		t.Fatalf("summary message = %.120q", after.Messages[0].Content[0].Text)
	}
	if cp.TokensAfter >= cp.TokensBefore {
		t.Fatalf("tokens after %d ≥ before %d", cp.TokensAfter, cp.TokensBefore)
	}
}

func TestRetentionOfAnOversizedNewestGroupKeepsNothing(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	h.create("s", 20000)
	h.append("s", user("go"), calls("a"), result("a", words(6000)))
	res, err := h.e.Compact(context.Background(), "s", trigger.Manual, true)
	if err != nil {
		t.Fatal(err)
	}
	if res.Checkpoint.FirstRetainedSeq != 0 {
		t.Fatalf("FirstRetainedSeq = %d, want 0", res.Checkpoint.FirstRetainedSeq)
	}
	if n := len(h.context("s").Messages); n != 2 {
		t.Fatalf("%d messages after compaction, want the summary and the current request", n)
	}
}

func TestShapeSimpleRetainsNothing(t *testing.T) {
	cfg := testConfig()
	cfg.Compaction.Shape = trigger.ShapeSimple
	h := newHarness(t, cfg, "")
	h.create("s", 200000)
	h.append("s", user("hello"), assistant("hi"))
	res, err := h.e.Compact(context.Background(), "s", trigger.Manual, true)
	if err != nil {
		t.Fatal(err)
	}
	if res.Checkpoint.FirstRetainedSeq != 0 || res.Checkpoint.Shape != trigger.ShapeSimple {
		t.Fatalf("checkpoint = %+v", res.Checkpoint)
	}
}

func TestManualCompactionOfAnOpenRound(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	h.create("s", 200000)
	h.append("s", user("go"), calls("a"))
	_, err := h.e.Compact(context.Background(), "s", trigger.Manual, true)
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("err = %v, want ErrConflict", err)
	}
	if !strings.HasSuffix(err.Error(), "Not compacting now: a tool call is still waiting on its result.") {
		t.Fatalf("err = %q", err)
	}
	if cps, _ := h.e.Checkpoints(context.Background(), "s"); len(cps) != 0 {
		t.Fatal("a checkpoint was written")
	}
}

// A summary as large as what it replaces: stalled, counted, and after three
// such the circuit is open with one diagnostic; a new user prompt closes it.
func TestStallsOpenTheCircuitOnceAndAUserPromptClosesIt(t *testing.T) {
	big := words(15000) // over the 14,000-token threshold on its own
	f := newFakeAnthropic(t, okSummary(big))
	cfg := testConfig()
	cfg.Summarizer.Bindings = []config.Binding{f.binding()}
	h := newHarness(t, cfg, "")
	h.create("s", 20000)
	h.append("s", user("start"), assistant(words(5000)))

	for i := range 4 {
		_, err := h.e.Compact(context.Background(), "s", trigger.Manual, true)
		if err == nil || !strings.Contains(err.Error(), "stalled") {
			t.Fatalf("compaction %d: err = %v, want a stall", i+1, err)
		}
		info, _ := h.e.Session(context.Background(), "s")
		if info.Failures != i+1 {
			t.Fatalf("after stall %d: failures = %d", i+1, info.Failures)
		}
		if want := i+1 >= 3; info.CircuitOpen != want {
			t.Fatalf("after stall %d: circuit open = %v, want %v", i+1, info.CircuitOpen, want)
		}
		// Too big to be retained: each compaction summarizes it.
		h.append("s", assistant(fmt.Sprintf("still working %d: %s", i, words(5200))))
	}
	cps, _ := h.e.Checkpoints(context.Background(), "s")
	for _, cp := range cps {
		if !cp.Stalled {
			t.Fatalf("checkpoint %d not marked stalled", cp.Seq)
		}
	}
	if n := len(h.events("s", checkpoint.KindCircuitOpen)); n != 1 {
		t.Fatalf("%d circuit_open events, want exactly 1", n)
	}
	// With the circuit open the post-check does not queue a compaction.
	res := h.append("s", withUsage(assistant("over"), 19000, 10))
	if res.CompactionQueued || !strings.Contains(res.Decision, "circuit open") {
		t.Fatalf("post-check with the circuit open: queued=%v decision=%q", res.CompactionQueued, res.Decision)
	}
	// A new user prompt starts a new run and closes the circuit.
	h.append("s", user("new prompt"))
	info, _ := h.e.Session(context.Background(), "s")
	if info.CircuitOpen || info.Failures != 0 {
		t.Fatalf("after a user prompt: circuit open %v failures %d", info.CircuitOpen, info.Failures)
	}
}

func TestFailedCompactionCommitsNothingAndCounts(t *testing.T) {
	f := newFakeAnthropic(t, fakeReply{status: 400, body: `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: must be positive"}}`})
	cfg := testConfig()
	cfg.Summarizer.Bindings = []config.Binding{f.binding()}
	cfg.Compaction.Fallback = config.FallbackNone
	cfg.ContextCompaction.KeepRecentTokens = 0 // something to summarize
	h := newHarness(t, cfg, "")
	h.create("s", 200000)
	h.append("s", user("hello"), assistant("hi"))
	before := h.context("s")
	_, err := h.e.Compact(context.Background(), "s", trigger.Manual, true)
	if err == nil {
		t.Fatal("compaction succeeded")
	}
	if cps, _ := h.e.Checkpoints(context.Background(), "s"); len(cps) != 0 {
		t.Fatal("a checkpoint was written")
	}
	if n := len(h.events("s", checkpoint.KindCompactionFailed)); n != 1 {
		t.Fatalf("%d compaction_failed events", n)
	}
	after := h.context("s")
	if len(after.Messages) != len(before.Messages) {
		t.Fatal("history changed")
	}
}

// Messages appended while a compaction runs follow the summary, none lost,
// order kept.
func TestAppendsDuringACompactionFollowTheSummary(t *testing.T) {
	f := newFakeAnthropic(t, okSummary("## Goal\nA test summary."))
	release := make(chan struct{})
	f.release = release
	cfg := testConfig()
	cfg.ContextCompaction.KeepRecentTokens = 0 // summarize everything
	cfg.Summarizer.Bindings = []config.Binding{f.binding()}
	h := newHarness(t, cfg, "")
	h.create("s", 200000)
	h.append("s", user("start"), assistant("working"))

	errc := make(chan error, 1)
	go func() {
		_, err := h.e.Compact(context.Background(), "s", trigger.Manual, true)
		errc <- err
	}()
	<-f.received // the summarizer call is in flight
	const n = 50
	for i := range n {
		h.append("s", assistant(fmt.Sprintf("appended during compaction %02d", i)))
	}
	close(release)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	a := h.context("s")
	if len(a.Messages) < n+1 {
		t.Fatalf("%d messages after the compaction, want at least %d", len(a.Messages), n+1)
	}
	tail := a.Messages[len(a.Messages)-n:]
	for i, m := range tail {
		if want := fmt.Sprintf("appended during compaction %02d", i); m.Content[0].Text != want {
			t.Fatalf("message %d = %q, want %q", i, m.Content[0].Text, want)
		}
	}
	if !strings.HasPrefix(a.Messages[0].Content[0].Text, "This is a summary") {
		t.Fatal("the context does not start with the summary")
	}
}

func TestPostCheckQueuesACompactionInTheBackground(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	h.create("s", 100000) // threshold 70,000
	h.append("s", user("start"))
	// Answers longer than keep_recent_tokens: a compaction has something
	// to replace.
	res := h.append("s", withUsage(assistant(words(17000)), 40000, 17000))
	if res.CompactionQueued {
		t.Fatal("queued below the threshold")
	}
	res = h.append("s", withUsage(assistant(words(17000)), 70000, 17000))
	if !res.CompactionQueued {
		t.Fatalf("not queued at the threshold: %s", res.Decision)
	}
	ev := h.waitEvent("s", 1, checkpoint.KindCheckpoint)
	if ev.Seq == 0 {
		t.Fatal("no checkpoint")
	}
	cps, _ := h.e.Checkpoints(context.Background(), "s")
	if len(cps) != 1 || cps[0].Reason != "auto" {
		t.Fatalf("checkpoints = %+v", cps)
	}
	// No loop: nothing new since the checkpoint, so the pre-send does not
	// compact again even though the estimate is stale.
	info, _ := h.e.Session(context.Background(), "s")
	if info.TokensSource != SourceEstimated {
		t.Fatalf("after a checkpoint the figure is %s, want estimated", info.TokensSource)
	}
}

func TestAutoOffStopsAutomaticButNotManual(t *testing.T) {
	cfg := testConfig()
	cfg.ContextCompaction.Auto = false
	h := newHarness(t, cfg, "")
	h.create("s", 100000)
	res := h.append("s", user("x"), withUsage(assistant("y"), 99000, 10))
	if res.CompactionQueued {
		t.Fatal("post-check queued with auto = false")
	}
	a, err := h.e.Context(context.Background(), "s", ContextOptions{})
	if err != nil || a.Compacted {
		t.Fatalf("pre-send compacted with auto = false: %v", err)
	}
	if _, err := h.e.Compact(context.Background(), "s", trigger.Overflow, true); err != nil {
		t.Fatalf("overflow compaction with auto = false: %v", err)
	}
}

func TestPreSendWaitsForTheCompaction(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	h.create("s", 10000) // threshold 7,000
	h.append("s", user("go"), calls("a"), result("a", words(8000)), assistant("done"))
	a, err := h.e.Context(context.Background(), "s", ContextOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !a.Compacted || a.CheckpointSeq == 0 {
		t.Fatalf("pre-send did not compact: %+v", a.Diagnostic)
	}
	if a.Tokens >= a.Threshold {
		t.Fatalf("after pre-send compaction %d tokens ≥ threshold %d", a.Tokens, a.Threshold)
	}
	checkValid(t, a.Messages)
}

func TestPreSendFailureReturnsTheUncompactedContextWithADiagnostic(t *testing.T) {
	f := newFakeAnthropic(t, fakeReply{status: 401, body: `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`})
	cfg := testConfig()
	cfg.Summarizer.Bindings = []config.Binding{f.binding()}
	cfg.Compaction.Fallback = config.FallbackNone
	// The check compacts at the trigger (speculative summaries off): with
	// them on, the context fits the window and is served while the
	// summary is made in the background.
	cfg.ContextCompaction.PreparePercent = config.PrepareOff
	h := newHarness(t, cfg, "")
	h.create("s", 10000)
	h.append("s", user("go"), calls("a"), result("a", words(8000)), assistant("done"))
	a, err := h.e.Context(context.Background(), "s", ContextOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Compacted || a.Diagnostic == "" || len(a.Messages) != 4 || a.DiagnosticCode != api.DiagCompactionFailed {
		t.Fatalf("compacted=%v diagnostic=%q (%s) messages=%d", a.Compacted, a.Diagnostic, a.DiagnosticCode, len(a.Messages))
	}
}

// TestNothingToCompactIsItsOwnCode: over the threshold with nothing a
// compaction could do (the session holds only the current request), the
// context's diagnostic code says why — futile or nothing_to_compact, as
// its text does — never compaction_failed.
func TestNothingToCompactIsItsOwnCode(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	h.create("s", 10000)
	h.append("s", user(words(8000)))
	a, err := h.e.Context(context.Background(), "s", ContextOptions{})
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case strings.Contains(a.Diagnostic, "futile") && a.DiagnosticCode == api.DiagFutile:
	case strings.Contains(a.Diagnostic, "nothing to compact") && a.DiagnosticCode == api.DiagNothingToCompact:
	default:
		t.Fatalf("diagnostic %q with code %q", a.Diagnostic, a.DiagnosticCode)
	}
}

func TestAbandonedRoundIsClosedBeforeTheUserPrompt(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	h.create("s", 200000)
	h.append("s", user("go"), calls("a", "b"), result("a", "ok"))
	res := h.append("s", user("stop, do something else"))
	if res.Abandoned != 1 || len(res.Messages) != 2 {
		t.Fatalf("abandoned=%d stored=%d", res.Abandoned, len(res.Messages))
	}
	r := res.Messages[0]
	if r.Role != history.RoleTool || r.ToolCallID != "b" || !r.IsError || r.Content[0].Text != history.AbandonedText {
		t.Fatalf("inserted result = %+v", r)
	}
	if n := len(h.events("s", checkpoint.KindAbandonedRound)); n != 1 {
		t.Fatalf("%d abandoned_round events", n)
	}
	checkValid(t, h.context("s").Messages)
}

func TestBadAppendStoresNothing(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	h.create("s", 200000)
	h.append("s", user("go"))
	before := h.context("s")
	for _, tc := range []struct {
		name  string
		msgs  []history.Message
		field string
	}{
		{"result for an unknown call", []history.Message{assistant("ok"), result("nope", "x")}, "messages[1].tool_call_id"},
		{"empty role", []history.Message{{Content: []history.Block{{Type: history.BlockText, Text: "x"}}}}, "messages[0].role"},
		{"unknown block type", []history.Message{{Role: history.RoleUser, Content: []history.Block{{Type: "video"}}}}, "messages[0].content[0].type"},
		{"seq given", []history.Message{{Seq: 9, Role: history.RoleUser}}, "messages[0].seq"},
		{"no messages", nil, "messages"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.e.Append(context.Background(), "s", tc.msgs)
			var fe *FieldError
			if !errors.As(err, &fe) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want a FieldError wrapping ErrInvalid", err)
			}
			if fe.Field != tc.field {
				t.Fatalf("field = %q, want %q", fe.Field, tc.field)
			}
		})
	}
	after := h.context("s")
	if after.LastSeq != before.LastSeq || len(after.Messages) != len(before.Messages) {
		t.Fatal("a bad append changed the session")
	}
}

func TestUnknownModelNeedsALimit(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	_, err := h.e.CreateSession(context.Background(), CreateParams{ID: "x", Model: "no-such-model"})
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "context_limit" {
		t.Fatalf("err = %v, want a context_limit FieldError", err)
	}
	if _, err := h.e.Session(context.Background(), "x"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the failed session exists: %v", err)
	}
	info, err := h.e.CreateSession(context.Background(), CreateParams{ID: "y", Model: "claude-sonnet-4-5-20250929"})
	if err != nil {
		t.Fatal(err)
	}
	if info.ContextLimit != 200000 || info.Threshold != 140000 {
		t.Fatalf("catalog model: limit %d threshold %d", info.ContextLimit, info.Threshold)
	}
}

// A restarted engine serves the same assembled context bytes.
func TestRestartServesTheSameContext(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, testConfig(), dir)
	h.create("s", 20000)
	ids := []string{"a", "b"}
	h.append("s", user("go"), calls(ids...), result("a", words(3000)), result("b", words(3000)), assistant("done"))
	if _, err := h.e.Compact(context.Background(), "s", trigger.Manual, true); err != nil {
		t.Fatal(err)
	}
	h.append("s", user("next"), withUsage(assistant("answer"), 4000, 20), calls("c"))
	want := h.context("s")
	wantInfo, _ := h.e.Session(context.Background(), "s")
	h.Close()

	h2 := newHarness(t, testConfig(), dir)
	got := h2.context("s")
	if a, b := encodeAll(t, want), encodeAll(t, got); a != b {
		t.Fatalf("context differs after a restart:\nbefore %s\nafter  %s", a, b)
	}
	info, _ := h2.e.Session(context.Background(), "s")
	if info.Tokens != wantInfo.Tokens || !info.OpenRound {
		t.Fatalf("after restart tokens %d (was %d), open round %v", info.Tokens, wantInfo.Tokens, info.OpenRound)
	}
	// The open call still accepts its result after the restart.
	h2.append("s", result("c", "late result"))
}

func encodeMsg(t *testing.T, m history.Message) string {
	t.Helper()
	m.Tokens = 0
	b, err := history.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func encodeAll(t *testing.T, a *Assembled) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(a.System)
	for _, m := range a.Messages {
		enc, err := history.Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(enc)
		b.WriteByte('\n')
	}
	return b.String()
}

func TestPinnedContextComesFirstAndSurvivesCompaction(t *testing.T) {
	cfg := testConfig()
	cfg.ContextCompaction.KeepRecentTokens = 0
	h := newHarness(t, cfg, "")
	pinned := []history.Block{{Type: history.BlockText, Text: "Always answer in French."}}
	if _, err := h.e.CreateSession(context.Background(), CreateParams{ID: "p", Model: "test-model", ContextLimit: 200000, Pinned: pinned}); err != nil {
		t.Fatal(err)
	}
	h.append("p", user("hello"), assistant("bonjour"))
	if _, err := h.e.Compact(context.Background(), "p", trigger.Manual, true); err != nil {
		t.Fatal(err)
	}
	a := h.context("p")
	if a.Messages[0].Content[0].Text != "Always answer in French." || !strings.HasPrefix(a.Messages[1].Content[0].Text, "This is a summary") {
		t.Fatalf("context starts %q, %q", a.Messages[0].Content[0].Text, a.Messages[1].Content[0].Text)
	}
	_, err := h.e.CreateSession(context.Background(), CreateParams{ID: "q", Model: "test-model", ContextLimit: 1000, Pinned: []history.Block{{Type: "video"}}})
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "pinned[0].type" {
		t.Fatalf("bad pinned block: %v", err)
	}
}

// Repeated manual compactions with nothing new say so instead of
// re-summarizing; a compaction that would summarize nothing is not committed.
func TestNothingToCompact(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	h.create("s", 200000)
	h.append("s", user("hello"), assistant("hi"))
	// Everything fits in keep_recent_tokens: nothing would be summarized.
	_, err := h.e.Compact(context.Background(), "s", trigger.Manual, true)
	if !errors.Is(err, ErrNothingToCompact) {
		t.Fatalf("err = %v, want ErrNothingToCompact", err)
	}
	if cps, _ := h.e.Checkpoints(context.Background(), "s"); len(cps) != 0 {
		t.Fatal("a checkpoint that summarizes nothing was committed")
	}
	// After a real compaction, a second one with nothing appended refuses.
	h.append("s", calls("a"), result("a", words(20000)), assistant("done"))
	res, err := h.e.Compact(context.Background(), "s", trigger.Manual, true)
	if err != nil {
		t.Fatal(err)
	}
	if res.Checkpoint.SummarizedMessages != 5-2 {
		t.Fatalf("summarized %d messages, want 3 (all but the retained answer and the carried request)", res.Checkpoint.SummarizedMessages)
	}
	for range 3 {
		if _, err := h.e.Compact(context.Background(), "s", trigger.Manual, true); !errors.Is(err, ErrNothingToCompact) {
			t.Fatalf("err = %v, want ErrNothingToCompact", err)
		}
	}
	info, _ := h.e.Session(context.Background(), "s")
	if info.LastCheck == nil || info.LastCheck.Fired {
		t.Fatalf("last check = %+v, want not fired", info.LastCheck)
	}
	cps, _ := h.e.Checkpoints(context.Background(), "s")
	if len(cps) != 1 {
		t.Fatalf("%d checkpoints, want 1", len(cps))
	}
}

func TestContextOverTheWindowCarriesADiagnostic(t *testing.T) {
	cfg := testConfig()
	cfg.ContextCompaction.Auto = false
	h := newHarness(t, cfg, "")
	h.create("s", 1000)
	h.append("s", user(words(3000)))
	a, err := h.e.Context(context.Background(), "s", ContextOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(a.Diagnostic, "exceeds the context window of 1000 tokens") {
		t.Fatalf("diagnostic = %q", a.Diagnostic)
	}
}

// A compaction_started with no end (the daemon was killed mid-compaction) is
// closed by a compaction_failed event when the session is next loaded.
func TestInterruptedCompactionIsClosedOnLoad(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, testConfig(), dir)
	h.create("s", 200000)
	h.append("s", user("go"))
	if _, err := h.log.Append(context.Background(), "s", []checkpoint.Event{{Kind: checkpoint.KindCompactionStarted, Data: []byte(`{"reason":"manual"}`)}}); err != nil {
		t.Fatal(err)
	}
	h.Close()
	h2 := newHarness(t, testConfig(), dir)
	h2.context("s")
	evs := h2.events("s", checkpoint.KindCompactionFailed)
	if len(evs) != 1 || !strings.Contains(string(evs[0].Data), "interrupted") {
		t.Fatalf("compaction_failed events: %+v", evs)
	}
	// Loading again adds nothing.
	h2.e.mu.Lock()
	h2.e.opts.MaxLoadedSessions = 0
	h2.e.evictLocked("")
	h2.e.opts.MaxLoadedSessions = DefaultMaxLoadedSessions
	if len(h2.e.sessions) != 0 {
		t.Fatal("the session was not evicted")
	}
	h2.e.mu.Unlock()
	h2.context("s")
	if n := len(h2.events("s", checkpoint.KindCompactionFailed)); n != 1 {
		t.Fatalf("%d compaction_failed events after a reload", n)
	}
}

func TestPatchThatChangesNothingRecordsNothing(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	h.create("s", 200000)
	before := h.context("s").LastSeq
	same := "You are a test agent."
	if _, err := h.e.UpdateSession(context.Background(), "s", Patch{System: &same}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.e.UpdateSession(context.Background(), "s", Patch{}); err != nil {
		t.Fatal(err)
	}
	if after := h.context("s").LastSeq; after != before {
		t.Fatalf("a no-op PATCH wrote events: last seq %d → %d", before, after)
	}
	other := "You are another agent."
	if _, err := h.e.UpdateSession(context.Background(), "s", Patch{System: &other}); err != nil {
		t.Fatal(err)
	}
	if n := len(h.events("s", checkpoint.KindSessionUpdated)); n != 1 {
		t.Fatalf("%d session_updated events, want 1", n)
	}
}

func TestContextLimitBounds(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	for _, limit := range []uint64{1, 999, MaxContextLimit + 1} {
		_, err := h.e.CreateSession(context.Background(), CreateParams{ID: fmt.Sprintf("l%d", limit), Model: "m", ContextLimit: limit})
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != "context_limit" {
			t.Errorf("limit %d: err = %v, want a context_limit FieldError", limit, err)
		}
	}
}

func TestAgentFilePromptIsUsed(t *testing.T) {
	f := newFakeAnthropic(t, okSummary("## Goal\nshort"))
	path := writeAgentFile(t, "+++\n[limits]\ntimeout_ms = 5000\n+++\nSUMMARIZE FOR THE ON-CALL ENGINEER\n")
	cfg := testConfig()
	cfg.Compaction.AgentFile = path
	cfg.ContextCompaction.KeepRecentTokens = 0
	cfg.Summarizer.Bindings = []config.Binding{f.binding()}
	h := newHarness(t, cfg, "")
	h.create("s", 200000)
	h.append("s", user("hello"), assistant("hi"))
	if _, err := h.e.Compact(context.Background(), "s", trigger.Manual, true); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.requests) != 1 || !strings.Contains(string(f.requests[0]), "SUMMARIZE FOR THE ON-CALL ENGINEER") {
		t.Fatalf("the agent file's prompt was not sent")
	}
}

func TestDeletedSessionIsNotUsedThroughAHeldCopy(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	h.create("s", 200000)
	held, err := h.e.session(context.Background(), "s")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.e.DeleteSession(context.Background(), "s"); err != nil {
		t.Fatal(err)
	}
	held.mu.Lock()
	evicted := held.evicted
	held.mu.Unlock()
	if !evicted {
		t.Fatal("the deleted session's copy is still live")
	}
	if _, err := h.e.Append(context.Background(), "s", []history.Message{user("x")}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("append after delete: %v", err)
	}
}

// TestOverflowCutsIntoRetainedTail: the provider refused the prompt as too
// long although every message fits the retention budget by ctxd's
// estimate; the overflow compaction still summarizes (retention does not
// block it) and keeps at most half the budget (overflow
// recovery).
func TestOverflowCutsIntoRetainedTail(t *testing.T) {
	f := newFakeAnthropic(t, okSummary("## Goal\nthe task"))
	cfg := testConfig()
	cfg.Summarizer.Bindings = []config.Binding{f.binding()}
	h := newHarness(t, cfg, "")
	h.create("s", 200000)
	h.append("s", user("go"), calls("a"), result("a", words(3000)), assistant("done a"),
		user("next"), calls("b"), result("b", words(3000)), assistant("done b"))
	res, err := h.e.Compact(context.Background(), "s", trigger.Overflow, true)
	if err != nil {
		t.Fatalf("overflow compaction: %v", err)
	}
	cp := res.Checkpoint
	if cp == nil || cp.FirstRetainedSeq == 0 || cp.SummarizedMessages == 0 {
		t.Fatalf("checkpoint %+v: want messages summarized and a tail retained", cp)
	}
	if cp.TokensAfter >= cp.TokensBefore {
		t.Errorf("tokens %d → %d: the overflow compaction did not shrink the context", cp.TokensBefore, cp.TokensAfter)
	}
	if f.count() != 1 {
		t.Errorf("%d summarizer requests, want 1", f.count())
	}
	checkValid(t, h.context("s").Messages)
}

// TestOverflowNothingToCompactBeforeTheSummarizer: an overflow compaction
// of a session whose every message is carried beside a summary (the first
// and the current request) finds nothing to compact without calling the
// summarizer (overflow recovery).
func TestOverflowNothingToCompactBeforeTheSummarizer(t *testing.T) {
	f := newFakeAnthropic(t, okSummary("## Goal\nthe task"))
	cfg := testConfig()
	cfg.Summarizer.Bindings = []config.Binding{f.binding()}
	h := newHarness(t, cfg, "")
	h.create("s", 200000)
	h.append("s", user("first "+words(200)), user("second "+words(200)))
	_, err := h.e.Compact(context.Background(), "s", trigger.Overflow, true)
	if !errors.Is(err, ErrNothingToCompact) {
		t.Fatalf("err = %v, want nothing to compact", err)
	}
	if f.count() != 0 {
		t.Errorf("the summarizer was called %d times for nothing", f.count())
	}
}

// An append with NoCompaction (the answer to the client's own
// compaction) records its usage but queues no post-check compaction, at
// or above the threshold; the next append without it does.
func TestPostCheckNoCompaction(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	h.create("s", 100000) // threshold 70,000
	h.append("s", user("start"))
	h.append("s", withUsage(assistant(words(17000)), 40000, 17000))
	res, err := h.e.AppendWith(context.Background(), "s", []history.Message{withUsage(assistant(words(17000)), 70000, 17000)}, AppendOptions{NoCompaction: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.CompactionQueued || !strings.Contains(res.Decision, "client is compacting") {
		t.Fatalf("queued with NoCompaction: %v, decision %q", res.CompactionQueued, res.Decision)
	}
	if info, _ := h.e.Session(context.Background(), "s"); info.Tokens < 87000 {
		t.Errorf("the usage was not recorded: %d tokens", info.Tokens)
	}
	res = h.append("s", user("go on"), withUsage(assistant(words(100)), 88000, 100))
	if !res.CompactionQueued {
		t.Fatalf("not queued without NoCompaction: %s", res.Decision)
	}
}
