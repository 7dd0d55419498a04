package engine

import (
	"context"
	"errors"
	"fmt"
	"github.com/ctxd/ctxd/internal/corpustest"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/trigger"
)

// prompt61 is a 61-line user prompt, whose tail the extractive summarizer
// used to cut at 40 lines and an LLM summary dropped.
func prompt61() string {
	var b strings.Builder
	for i := 1; i <= 61; i++ {
		fmt.Fprintf(&b, "step %02d: change the handler so that case %d returns its own error\n", i, i)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// contains reports whether msgs holds a message byte-identical to want.
func containsMessage(t *testing.T, msgs []history.Message, want history.Message) int {
	t.Helper()
	w := encodeMsg(t, want)
	for i, m := range msgs {
		if encodeMsg(t, m) == w {
			return i
		}
	}
	return -1
}

// A default Claude session (shape simple) and a keep-tail one cross the
// threshold with a new 61-line user prompt: after the pre-send compaction,
// with an LLM summarizer or the extractive one, that prompt is in the
// context verbatim, right after the summary (docs/design.md §5.2).
func TestCurrentRequestSurvivesCompaction(t *testing.T) {
	for _, tc := range []struct {
		name, model, shape string
		llm                bool
	}{
		{"claude default shape, LLM summarizer", "claude-sonnet-4-5", "", true},
		{"claude default shape, extractive", "claude-sonnet-4-5", "", false},
		{"keep-tail, LLM summarizer", "test-model", config.ShapeKeepTail, true},
		{"keep-tail, extractive", "test-model", config.ShapeKeepTail, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			if tc.shape != "" {
				cfg.Compaction.Shape = tc.shape
			}
			var f *fakeAnthropic
			if tc.llm {
				f = newFakeAnthropic(t, okSummary("## Goal\nFix the handlers.\n## Next steps\nContinue."))
				cfg.Summarizer.Bindings = []config.Binding{f.binding()}
				// The pre-send check compacts at the trigger: with
				// speculative summaries on, a context that fits the window
				// is served while the summary is made in the background.
				cfg.ContextCompaction.PreparePercent = config.PrepareOff
			}
			h := newHarness(t, cfg, "")
			if _, err := h.e.CreateSession(context.Background(), CreateParams{ID: "s", Model: tc.model, ContextLimit: 20000, System: "You are a test agent."}); err != nil {
				t.Fatal(err)
			}
			h.append("s", user("look at the handlers"), calls("a"), result("a", words(6500)), assistant("read them"),
				user("and the tests"), calls("b"), result("b", words(7000)), assistant("read those too"))
			req := user(prompt61())
			res := h.append("s", req)
			stored := res.Messages[0]
			a, err := h.e.Context(context.Background(), "s", ContextOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !a.Compacted {
				t.Fatalf("no pre-send compaction: %s", a.Diagnostic)
			}
			i := containsMessage(t, a.Messages, stored)
			if i < 0 {
				t.Fatalf("the current request is not in the context verbatim (%d messages)", len(a.Messages))
			}
			sum := -1
			for k, m := range a.Messages {
				if strings.HasPrefix(m.Content[0].Text, "This is a summary") {
					sum = k
				}
			}
			if sum < 0 || i < sum {
				t.Fatalf("the request is at %d, the summary at %d: want it after the summary", i, sum)
			}
			if !strings.Contains(a.Messages[i].Content[0].Text, "step 61:") {
				t.Fatal("the request lost its last line")
			}
			// The first request too (keep_first_request), before the summary.
			if j := containsMessage(t, a.Messages, h.firstMessage("s")); j < 0 || j > sum {
				t.Fatalf("first request at %d, want before the summary at %d", j, sum)
			}
			if a.Tokens >= a.Threshold {
				t.Fatalf("%d tokens after compaction, threshold %d", a.Tokens, a.Threshold)
			}
			checkValid(t, a.Messages)
			// A restart rebuilds the same context.
			before := encodeAll(t, a)
			h.e.forget("s")
			if got := encodeAll(t, h.context("s")); got != before {
				t.Fatal("the context differs after a reload")
			}
		})
	}
}

// firstMessage is the session's first stored message.
func (h *harness) firstMessage(id string) history.Message {
	h.t.Helper()
	var first *history.Message
	err := h.e.Events(context.Background(), id, 1, false, func(ev checkpoint.Event) error {
		if ev.Kind == checkpoint.KindMessage && first == nil {
			m := *ev.Message
			first = &m
		}
		return nil
	})
	if err != nil || first == nil {
		h.t.Fatalf("no first message: %v", err)
	}
	return *first
}

// A session whose only content is one request that fits the window (14.2k
// tokens on a 20k window, threshold 14k) is sent whole: no compaction
// replaces it with a summary of itself, automatic or manual, and neither
// counts as a failure (docs/design.md §5.2).
func TestLoneRequestThatFitsIsSentWhole(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	h.create("s", 20000) // threshold 14,000
	res := h.append("s", user(words(14200)))
	a, err := h.e.Context(context.Background(), "s", ContextOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Tokens < a.Threshold {
		t.Fatalf("setup: %d tokens is below the threshold %d", a.Tokens, a.Threshold)
	}
	if a.Compacted || a.CheckpointSeq != 0 || len(a.Messages) != 1 || encodeMsg(t, a.Messages[0]) != encodeMsg(t, res.Messages[0]) {
		t.Fatalf("compacted=%v checkpoint=%d messages=%d: want the request whole", a.Compacted, a.CheckpointSeq, len(a.Messages))
	}
	if !strings.Contains(a.Diagnostic, "futile") {
		t.Fatalf("diagnostic = %q, want the futility reason", a.Diagnostic)
	}
	_, err = h.e.Compact(context.Background(), "s", trigger.Manual, true)
	if !errors.Is(err, ErrNothingToCompact) || !strings.Contains(NothingToCompactReason(err), "only the current request") {
		t.Fatalf("manual compaction: %v", err)
	}
	if n := len(h.events("s", checkpoint.KindCompactionFailed)); n != 0 {
		t.Fatalf("%d compaction_failed events", n)
	}
}

// A current request longer than the window is carried bounded: its head
// and tail with the artifact URI of the whole; the first request, longer
// than 2,000 tokens, likewise.
func TestLongRequestsAreCarriedBounded(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	h.create("s", 20000)
	first := user("FIRST-HEAD " + words(3000) + " FIRST-TAIL")
	h.append("s", first, assistant("ok"), calls("a"), result("a", words(3000)), assistant("done"))
	h.append("s", user("REQ-HEAD "+words(25000)+" REQ-TAIL"))
	if _, err := h.e.Compact(context.Background(), "s", trigger.Manual, true); err != nil {
		t.Fatal(err)
	}
	a := h.context("s")
	var all []string
	for _, m := range a.Messages {
		all = append(all, m.Content[0].Text)
	}
	text := strings.Join(all, "\n")
	for _, want := range []string{"FIRST-HEAD", "FIRST-TAIL", "REQ-HEAD", "REQ-TAIL", "first request of this session", "current request of this session", "artifact://"} {
		if !strings.Contains(text, want) {
			t.Fatalf("context lacks %q", want)
		}
	}
	if a.Tokens > a.ContextLimit {
		t.Fatalf("%d tokens after compaction, over the window %d", a.Tokens, a.ContextLimit)
	}
}

// keep_first_request = false carries no first request.
func TestKeepFirstRequestOff(t *testing.T) {
	cfg := testConfig()
	cfg.Compaction.KeepFirstRequest = false
	cfg.ContextCompaction.KeepRecentTokens = 0
	h := newHarness(t, cfg, "")
	h.create("s", 20000)
	res := h.append("s", user("the first request"), assistant("ok"), user("the second"), assistant("ok too"))
	if _, err := h.e.Compact(context.Background(), "s", trigger.Manual, true); err != nil {
		t.Fatal(err)
	}
	a := h.context("s")
	if containsMessage(t, a.Messages, res.Messages[0]) >= 0 {
		t.Fatal("first request carried with keep_first_request = false")
	}
	if containsMessage(t, a.Messages, res.Messages[2]) < 0 {
		t.Fatal("current request not carried")
	}
}

// A 7,600-token system prompt on a 10k window (threshold 7,000): the fixed
// prefix alone reaches the threshold, so ten turns run no compaction (they
// gave 7 stalled ones, each discarding history) and each run gets one
// futility diagnostic however often it asks (docs/design.md §5.2).
func TestFutileCompactionDoesNotRun(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	if _, err := h.e.CreateSession(context.Background(), CreateParams{ID: "s", Model: "test-model", ContextLimit: 10000, System: words(7600)}); err != nil {
		t.Fatal(err)
	}
	for turn := range 10 {
		h.append("s", user(fmt.Sprintf("turn %d: %s", turn, words(60))))
		for range 2 { // two pre-sends in the same run
			a, err := h.e.Context(context.Background(), "s", ContextOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if a.Compacted || !strings.Contains(a.Diagnostic, "fixed prefix") {
				t.Fatalf("turn %d: compacted=%v diagnostic=%q", turn, a.Compacted, a.Diagnostic)
			}
		}
		h.append("s", withUsage(assistant(words(80)), 7700+uint64(turn)*150, 80))
	}
	if cps, _ := h.e.Checkpoints(context.Background(), "s"); len(cps) != 0 {
		t.Fatalf("%d checkpoints, want 0", len(cps))
	}
	var futile int
	for _, ev := range h.events("s", checkpoint.KindDiagnostic) {
		if strings.Contains(string(ev.Data), `"code":"futile"`) {
			futile++
		}
	}
	if futile != 10 {
		t.Fatalf("%d futility diagnostics, want one per run (10)", futile)
	}
	if n := len(h.events("s", checkpoint.KindCompactionFailed)); n != 0 {
		t.Fatalf("%d compaction_failed events", n)
	}
}

// trigger = { buffer_tokens = N } with N ≥ the session's window: creating
// the session returns a warning.
func TestBufferAtOrAboveTheWindowWarnsAtCreation(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	in, err := h.e.CreateSession(context.Background(), CreateParams{ID: "s", Model: "test-model", ContextLimit: 8000,
		Overlay: "[context_compaction]\ntrigger = { buffer_tokens = 8000 }\n"})
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Warnings) != 1 || !strings.Contains(in.Warnings[0], "threshold is 0") {
		t.Fatalf("warnings = %q", in.Warnings)
	}
	in, err = h.e.CreateSession(context.Background(), CreateParams{ID: "t", Model: "test-model", ContextLimit: 8001,
		Overlay: "[context_compaction]\ntrigger = { buffer_tokens = 8000 }\n"})
	if err != nil || len(in.Warnings) != 0 {
		t.Fatalf("warnings = %q, %v; want none below the window", in.Warnings, err)
	}
}

// Repeated manual compactions of a small session are answers, not
// failures: no compaction_failed, no circuit; a real overflow afterwards
// still compacts automatically (docs/design.md §5.2, §5.5).
func TestNothingToCompactNeverOpensTheCircuit(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	h.create("s", 20000)
	h.append("s", user("hello"), assistant("hi"))
	for range 4 {
		_, err := h.e.Compact(context.Background(), "s", trigger.Manual, true)
		if !errors.Is(err, ErrNothingToCompact) {
			t.Fatalf("err = %v, want nothing to compact", err)
		}
		if why := NothingToCompactReason(err); !strings.Contains(why, "retention budget") {
			t.Fatalf("reason %q", why)
		}
	}
	if n := len(h.events("s", checkpoint.KindCompactionFailed)); n != 0 {
		t.Fatalf("%d compaction_failed events, want 0", n)
	}
	info, _ := h.e.Session(context.Background(), "s")
	if info.CircuitOpen || info.Failures != 0 {
		t.Fatalf("circuit open=%v failures=%d", info.CircuitOpen, info.Failures)
	}
	h.append("s", calls("a"), result("a", words(16000)), assistant("done"))
	a, err := h.e.Context(context.Background(), "s", ContextOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !a.Compacted {
		t.Fatalf("the overflow got no automatic compaction: %q", a.Diagnostic)
	}
}

// The reasons a session with no checkpoint gets are its own, not "since
// the last checkpoint".
func TestNothingToCompactReasons(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	h.create("s", 20000)
	_, err := h.e.Compact(context.Background(), "s", trigger.Manual, true)
	if why := NothingToCompactReason(err); why != "the session has no messages yet" {
		t.Fatalf("empty session: %q (%v)", why, err)
	}
	h.append("s", user("hello"))
	_, err = h.e.Compact(context.Background(), "s", trigger.Manual, true)
	if why := NothingToCompactReason(err); !strings.Contains(why, "only the current request") {
		t.Fatalf("request alone: %q (%v)", why, err)
	}
}

// A successful checkpoint of any reason closes an open circuit (docs/design.md
// §5.5): three failures open it, a manual compaction that succeeds (through
// the fallback) closes it.
func TestSuccessfulCheckpointClosesTheCircuit(t *testing.T) {
	f := newFakeAnthropic(t, fakeReply{status: 401, body: `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`})
	cfg := testConfig()
	cfg.Summarizer.Bindings = []config.Binding{f.binding()}
	cfg.Compaction.Fallback = config.FallbackNone
	cfg.ContextCompaction.KeepRecentTokens = 0
	h := newHarness(t, cfg, "")
	h.create("s", 20000)
	h.append("s", user("go"), calls("a"), result("a", words(15000)), assistant("done"))
	for range CircuitFailures {
		if _, err := h.e.Compact(context.Background(), "s", trigger.Manual, true); err == nil {
			t.Fatal("compaction succeeded")
		}
	}
	info, _ := h.e.Session(context.Background(), "s")
	if !info.CircuitOpen {
		t.Fatal("circuit not open after three failures")
	}
	// Over the threshold with the circuit open, the pre-send context says
	// why it was not compacted.
	a, err := h.e.Context(context.Background(), "s", ContextOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Compacted || !strings.Contains(a.Diagnostic, "circuit open") {
		t.Fatalf("compacted=%v diagnostic=%q", a.Compacted, a.Diagnostic)
	}
	cfg.Compaction.Fallback = config.FallbackExtractive
	h.e.SetConfig(cfg)
	if _, err := h.e.Compact(context.Background(), "s", trigger.Manual, true); err != nil {
		t.Fatal(err)
	}
	info, _ = h.e.Session(context.Background(), "s")
	if info.CircuitOpen || info.Failures != 0 {
		t.Fatalf("after a successful checkpoint: circuit open=%v failures=%d", info.CircuitOpen, info.Failures)
	}
}

// One LLM binding that refuses the history (60 KB and 90 KB of plain text,
// which the pruned retry cannot shrink: it only trims tool results) with
// Anthropic's recorded "prompt is too long": the overflow compaction
// succeeds through the implicit extractive fallback, and says so in its
// checkpoint event and a diagnostic (docs/design.md §5.5). With fallback =
// "none" it fails as before.
func TestExtractiveFallbackIsTheWayOut(t *testing.T) {
	status, body := corpustest.ErrorBodyOf(t, "anthropic_400_prompt_too_long_with_request_id_1")
	for _, fallback := range []string{config.FallbackExtractive, config.FallbackNone} {
		t.Run(fallback, func(t *testing.T) {
			f := newFakeAnthropic(t, fakeReply{status: status, body: body})
			cfg := testConfig()
			cfg.Summarizer.Bindings = []config.Binding{f.binding()}
			cfg.Compaction.Fallback = fallback
			h := newHarness(t, cfg, "")
			h.create("s", 200000)
			h.append("s", user("explain these logs: "+strings.Repeat("log line with some text\n", 60*1024/24)),
				assistant("They show: "+strings.Repeat("an explanation of a line\n", 90*1024/25)),
				user("and now?"), assistant("now it works"))
			res, err := h.e.Compact(context.Background(), "s", trigger.Overflow, true)
			if fallback == config.FallbackNone {
				if err == nil {
					t.Fatal("compaction succeeded with fallback = none")
				}
				if f.count() != 2 {
					t.Fatalf("%d summarizer requests, want the call and its pruned retry", f.count())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cp := res.Checkpoint
			if cp == nil || !cp.Fallback || cp.Binding != FallbackBinding {
				t.Fatalf("checkpoint = %+v, want one by %s marked fallback", cp, FallbackBinding)
			}
			evs := h.events("s", checkpoint.KindCheckpoint)
			if len(evs) != 1 || !strings.Contains(string(evs[0].Data), `"fallback":true`) {
				t.Fatalf("checkpoint event does not say fallback: %s", evs[0].Data)
			}
			var said bool
			for _, ev := range h.events("s", checkpoint.KindDiagnostic) {
				said = said || strings.Contains(string(ev.Data), `"code":"fallback"`)
			}
			if !said {
				t.Fatal("no fallback diagnostic")
			}
		})
	}
}

// A current request longer than the window is carried bounded, so it does
// not make compaction futile: the pre-send compacts and the context fits.
func TestRequestOverTheWindowIsNotFutile(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	h.create("s", 20000)
	h.append("s", user("first"), calls("a"), result("a", words(3000)), assistant("done"))
	h.append("s", user("REQ-HEAD "+words(25000)+" REQ-TAIL"))
	a, err := h.e.Context(context.Background(), "s", ContextOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !a.Compacted || a.Tokens > a.ContextLimit {
		t.Fatalf("compacted=%v tokens=%d diagnostic=%q", a.Compacted, a.Tokens, a.Diagnostic)
	}
	if !carriedBounded(a.Messages, h.context("s").Messages[len(a.Messages)-1].Seq) {
		t.Fatal("the request is not carried bounded")
	}
}
