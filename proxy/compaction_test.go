package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/trigger"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/internal/corpustest"
	"github.com/ctxd/ctxd/server"
)

// longConversation runs rounds tool rounds through the proxy, each with a
// result of about words words, and returns the conversation after the
// last results (the next request to send).
func longConversation(f *fixture, rounds, words int, hdr map[string]string) *conversation {
	return longConversationUsage(f, rounds, words, hdr, func(int) int { return 100 })
}

// longConversationUsage is longConversation with the usage the upstream
// reports for round i's request.
func longConversationUsage(f *fixture, rounds, words int, hdr map[string]string, usage func(i int) int) *conversation {
	c := newConversation().user("investigate the failing build")
	for i := range rounds {
		id := fmt.Sprintf("toolu_%02d", i)
		f.up.script(reply{stream: true, body: sse("", "", [][3]string{{id, "Bash", fmt.Sprintf(`{"command":"step %d"}`, i)}}, usage(i), 5)})
		f.post(c.body(), hdr)
		var sb strings.Builder
		for w := range words {
			fmt.Fprintf(&sb, "word%d-%d ", i, w)
		}
		c.assistant(assistantCall(id, "Bash", fmt.Sprintf(`{"command":"step %d"}`, i))).results([2]string{id, sb.String()})
	}
	return c
}

// crossingAnswer is the answer to the request that crosses the threshold
// after longConversationUsage(…, usage): its usage reports that request's
// size, as a provider's does. The default answer's 100 input tokens would
// make a compaction that starts after the answer is recorded (a loaded
// machine, past the engine's start grace) find the session small and do
// nothing.
func crossingAnswer(tokens int) reply {
	return reply{stream: true, body: sse("", "ok", nil, tokens, 5)}
}

// overflowBody is a real Anthropic context-length refusal from the corpus.
func overflowBody(t *testing.T, id string) string {
	_, body := corpustest.ErrorBodyOf(t, id)
	return body
}

// sessionLog is the kinds of a session's events and the text of its
// diagnostics and failed compactions, for a test's failure message.
func sessionLog(f *fixture, id string) string {
	var b strings.Builder
	_ = f.eng.Events(context.Background(), id, 1, false, func(ev checkpoint.Event) error {
		fmt.Fprintf(&b, "\n  %d %s", ev.Seq, ev.Kind)
		if ev.Kind == checkpoint.KindDiagnostic || ev.Kind == checkpoint.KindCompactionFailed || ev.Kind == checkpoint.KindCompactionStarted {
			fmt.Fprintf(&b, " %.300s", ev.Data)
		}
		return nil
	})
	return b.String()
}

func compactions(t *testing.T, f *fixture, id string) []map[string]any {
	t.Helper()
	var out []map[string]any
	_ = f.eng.Events(context.Background(), id, 1, false, func(ev checkpoint.Event) error {
		if ev.Kind == checkpoint.KindCompactionStarted {
			var d map[string]any
			_ = json.Unmarshal(ev.Data, &d)
			out = append(out, d)
		}
		return nil
	})
	return out
}

// An upstream context-length refusal before any byte streamed: ctxd
// compacts (reason overflow) and retries once; the client sees only the
// answer.
func TestOverflowCompactsAndRetries(t *testing.T) {
	for _, body := range []string{"anthropic_400_prompt_too_long_with_request_id_1", "anthropic_400_input_plus_max_tokens_exceed_context"} {
		t.Run(body, func(t *testing.T) {
			f := newFixture(t, testConfig())
			c := longConversation(f, 6, 300, nil)
			before := len(f.up.requests())
			f.up.script(reply{status: 400, body: overflowBody(t, body)}, textAnswer("fixed"))
			resp, got := f.post(c.body(), nil)
			if resp.StatusCode != 200 || !strings.Contains(string(got), "fixed") {
				t.Fatalf("client got %d %s", resp.StatusCode, got)
			}
			reqs := f.up.requests()[before:]
			if len(reqs) != 2 {
				t.Fatalf("%d upstream requests", len(reqs))
			}
			refused, retried := outgoingMessages(t, reqs[0].body), outgoingMessages(t, reqs[1].body)
			if len(retried) >= len(refused) {
				t.Errorf("the retry has %d messages, the refused request %d", len(retried), len(refused))
			}
			cs := compactions(t, f, resp.Header.Get(HeaderSessionID))
			if len(cs) != 1 || cs[0]["reason"] != "overflow" {
				t.Errorf("compactions %v", cs)
			}
			if f.p.Stats().Overflows != 1 {
				t.Errorf("stats %+v", f.p.Stats())
			}
		})
	}
}

// When the retry is refused too, the client gets the provider's error
// unchanged, and the overflow retries metric counts the recovery as
// retried, then failed (it used to stay "retried" only).
func TestOverflowTwiceGivesTheProviderError(t *testing.T) {
	f := newFixture(t, testConfig())
	c := longConversation(f, 6, 300, nil)
	refusal := overflowBody(t, "anthropic_400_prompt_too_long_no_request_id")
	f.up.script(reply{status: 400, body: refusal}, reply{status: 400, body: refusal})
	resp, got := f.post(c.body(), nil)
	if resp.StatusCode != 400 || string(got) != refusal {
		t.Fatalf("client got %d %s", resp.StatusCode, got)
	}
	// The outcome is counted after the answer went to the client.
	f.settle()
	for outcome, want := range map[string]float64{"retried": 1, "failed": 1} {
		if got := gathered(t, f, server.MetricProxyOverflowRetries, map[string]string{"api": "anthropic", "outcome": outcome}); got != want {
			t.Errorf("overflow retries %s = %v, want %v", outcome, got, want)
		}
	}
}

// jobsDone waits until every request's records are written and session
// id's compaction or speculative summary job, if one is queued or
// running, has ended: the job a request's check deferred until the
// upstream accepted it is queued by then (engine.Staged.Commit).
func (f *fixture) jobsDone(id string) {
	f.t.Helper()
	f.settle()
	if t := f.pool.Active(id); t != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := t.Wait(ctx); err != nil && ctx.Err() != nil {
			f.t.Fatalf("session %s's job did not end: %v", id, err)
		}
	}
}

// Over the threshold, ctxd compacts: not before forwarding the request
// that crossed it — the upstream has not accepted its credential yet, so
// it is sent as it is, saying why — but once the upstream accepted it,
// and the next request the upstream sees is compacted.
func TestPreSendCompaction(t *testing.T) {
	f := newFixture(t, testConfig())
	hdr := map[string]string{HeaderContextLimit: "6000"}
	// The post-check stays under the threshold (4200 of 6000); the
	// last results push the estimate over it.
	c := longConversationUsage(f, 8, 250, hdr, func(i int) int { return 500 * (i + 1) })
	before := len(f.up.requests())
	f.up.script(reply{stream: true, body: sse("", "ok", nil, 4000, 5)})
	resp, _ := f.post(c.body(), hdr)
	id := resp.Header.Get(HeaderSessionID)
	if d := resp.Header.Get(HeaderDiagnostic); !strings.Contains(d, "deferred until the upstream accepts the request") {
		t.Errorf("diagnostic %q", d)
	}
	if out := outgoingMessages(t, f.up.requests()[before].body); len(out) != len(c.msgs) {
		t.Errorf("the request that crossed the threshold went with %d messages for the client's %d", len(out), len(c.msgs))
	}
	f.jobsDone(id)
	cs := compactions(t, f, id)
	if len(cs) != 1 || cs[0]["signal"] != "post-check" {
		t.Fatalf("compactions %v", cs)
	}
	c.assistant(assistantText("ok")).user("next")
	f.post(c.body(), hdr)
	out := outgoingMessages(t, f.up.requests()[before+1].body)
	if len(out) >= len(c.msgs) {
		t.Errorf("the upstream got %d messages for the client's %d", len(out), len(c.msgs))
	}
	info, _ := f.eng.Session(context.Background(), id)
	if info.Checkpoints == 0 {
		t.Errorf("no checkpoint: %+v", info)
	}
}

// A proxied session is summarized through its own upstream, with its own
// model and the client's credential and prompt prefix (docs/design.md §10); the
// checkpoint names that binding.
func TestSummaryPaidByTheClient(t *testing.T) {
	f := newFixture(t, testConfig())
	hdr := map[string]string{HeaderContextLimit: "6000"}
	c := longConversationUsage(f, 8, 250, hdr, func(i int) int { return 500 * (i + 1) })
	resp, _ := f.post(c.body(), hdr)
	f.jobsDone(resp.Header.Get(HeaderSessionID))
	sums := f.up.summaries()
	if len(sums) != 1 {
		t.Fatalf("%d summarizer requests upstream", len(sums))
	}
	s := sums[0]
	if s.header.Get("X-Api-Key") != testKey || s.path != "/v1/messages" {
		t.Errorf("summarizer request %s with key %q", s.path, s.header.Get("X-Api-Key"))
	}
	var body struct {
		Model  string          `json:"model"`
		System json.RawMessage `json:"system"`
		Tools  json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(s.body, &body); err != nil {
		t.Fatal(err)
	}
	conv := newConversation()
	if body.Model != conv.model || string(body.System) != conv.system || string(body.Tools) != conv.tools {
		t.Errorf("summarizer request model %q system %s tools %s", body.Model, body.System, body.Tools)
	}
	info, _ := f.eng.Session(context.Background(), resp.Header.Get(HeaderSessionID))
	if info.Checkpoint == nil || info.Checkpoint.Binding != ClientBinding {
		t.Errorf("checkpoint %+v", info.Checkpoint)
	}
}

// With proxy.summarizer = "bindings" the operator's bindings (here the
// default extractive one) summarize proxied sessions; nothing goes upstream.
func TestSummaryByConfiguredBindings(t *testing.T) {
	cfg := testConfig()
	cfg.Proxy.Summarizer = config.ProxySummarizerBindings
	f := newFixture(t, cfg)
	hdr := map[string]string{HeaderContextLimit: "6000"}
	c := longConversationUsage(f, 8, 250, hdr, func(i int) int { return 500 * (i + 1) })
	f.up.script(crossingAnswer(4500))
	resp, _ := f.post(c.body(), hdr)
	f.jobsDone(resp.Header.Get(HeaderSessionID))
	if n := len(f.up.summaries()); n != 0 {
		t.Errorf("%d summarizer requests upstream", n)
	}
	info, _ := f.eng.Session(context.Background(), resp.Header.Get(HeaderSessionID))
	if info.Checkpoint == nil || info.Checkpoint.Binding != "extractive" {
		t.Errorf("checkpoint %+v; the session's log:%s", info.Checkpoint, sessionLog(f, resp.Header.Get(HeaderSessionID)))
	}
}

// After a restart the client's credential is gone: a compaction of the
// proxied session waits for the client's next request, and is made with
// the credential it brings once the upstream accepted it.
func TestCompactionWaitsForTheClientAfterRestart(t *testing.T) {
	f := newFixture(t, testConfig())
	hdr := map[string]string{HeaderContextLimit: "6000"}
	c := longConversationUsage(f, 7, 250, hdr, func(i int) int { return 400 * (i + 1) })
	f.up.script(reply{stream: true, body: sse("", "ok", nil, 4000, 5)}) // under the threshold of 4200
	resp, _ := f.post(c.body(), hdr)
	id := resp.Header.Get(HeaderSessionID)
	f.restart()
	_, err := f.eng.Compact(context.Background(), id, trigger.Manual, true)
	if !errors.Is(err, engine.ErrUnavailable) || !strings.Contains(err.Error(), "next request") {
		t.Fatalf("compaction without the credential: %v", err)
	}
	if n := len(f.up.summaries()); n != 0 {
		t.Fatalf("%d summarizer requests", n)
	}
	c.assistant(assistantText("ok")).user(strings.Repeat("a long new request with many words ", 200))
	f.post(c.body(), hdr)
	f.jobsDone(id)
	if n := len(f.up.summaries()); n != 1 {
		info, _ := f.eng.Session(context.Background(), id)
		b, _ := json.Marshal(info)
		t.Fatalf("the next request made %d summarizer requests: %s", n, b)
	}
	info, _ := f.eng.Session(context.Background(), id)
	if info.Checkpoint == nil || info.Checkpoint.Binding != ClientBinding {
		t.Errorf("checkpoint %+v", info.Checkpoint)
	}
}

// The estimate of a proxied session after a restart is the one before it:
// the newest reported usage and the calibration are rebuilt from the log,
// and the client's next request (which Claude Code's --continue resends
// with its first prompt as a string) stays on its branch.
func TestEstimateSurvivesRestart(t *testing.T) {
	f := newFixture(t, testConfig())
	hdr := map[string]string{HeaderContextLimit: "200000"}
	c := longConversationUsage(f, 5, 250, hdr, func(i int) int { return 3000 + 900*i })
	f.up.script(reply{stream: true, body: sse("", "ok", nil, 8000, 5)})
	resp, _ := f.post(c.body(), hdr)
	id := resp.Header.Get(HeaderSessionID)
	f.settle()
	ctx := context.Background()
	before, err := f.eng.Session(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	f.restart()
	after, err := f.eng.Session(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if after.Tokens != before.Tokens || after.TokensSource != before.TokensSource {
		t.Errorf("estimate %d (%s) after the restart, %d (%s) before", after.Tokens, after.TokensSource, before.Tokens, before.TokensSource)
	}
	// The first prompt as a string now, as after --continue.
	c.msgs[0] = strings.Replace(strings.Replace(c.msgs[0], `"content":[{"type":"text","text":`, `"content":`, 1), `}]}`, `}`, 1)
	if c.msgs[0] != `{"role":"user","content":"investigate the failing build"}` {
		t.Fatalf("first message %s", c.msgs[0])
	}
	c.assistant(assistantText("ok")).user("next")
	resp, _ = f.post(c.body(), hdr)
	if got := resp.Header.Get(HeaderSessionID); got != id || f.p.Stats().Branches != 0 {
		t.Errorf("after the restart the request went to %s (want %s), stats %+v; first message %s", got, id, f.p.Stats(), c.msgs[0])
	}
}

// An overflow whose provider count shows the request far larger than ctxd
// estimated: the count corrects the session's estimate, the window the
// refusal names is learned, and the request is retried only when the
// compaction brought it under that window by the provider's count (with
// trigger.OverflowMargin) — else no retry: the provider's error goes to the client
// with a diagnostic, and the upstream sees no second refusal.
func TestOverflowRetriesOnlyWhatFits(t *testing.T) {
	refusal := func(count, limit uint64) string {
		return fmt.Sprintf(`{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: %d tokens > %d maximum"}}`, count, limit)
	}
	t.Run("fits", func(t *testing.T) {
		f := newFixture(t, testConfig())
		c := longConversation(f, 12, 600, nil)
		id := onlySession(t, f)
		count := uint64(len(c.body())) / 4 * 3 / 2 // about 1.5 × ctxd's estimate
		before := len(f.up.requests())
		f.up.script(reply{status: 400, body: refusal(count, count*9/10)}, textAnswer("fixed"))
		resp, got := f.post(c.body(), nil)
		if resp.StatusCode != 200 || !strings.Contains(string(got), "fixed") {
			t.Fatalf("client got %d %s (%s)", resp.StatusCode, got, resp.Header.Get(HeaderDiagnostic))
		}
		if n := len(f.up.requests()) - before; n != 2 {
			t.Errorf("%d upstream requests, want the refused one and the retry", n)
		}
		in, _ := f.eng.Session(context.Background(), id)
		if in.WindowSource != engine.WindowLearned || in.ContextLimit != count*9/10 {
			t.Errorf("window %d (%s), want %d learned", in.ContextLimit, in.WindowSource, count*9/10)
		}
		if cp := in.Checkpoint; cp == nil || cp.TokensAfter > uint64(float64(in.ContextLimit)*(1-trigger.OverflowMargin)) {
			t.Errorf("checkpoint %+v over the learned window's margin", cp)
		}
	})
	t.Run("does not fit", func(t *testing.T) {
		f := newFixture(t, testConfig())
		c := longConversation(f, 12, 600, nil)
		count := uint64(len(c.body())) / 4 * 3 // about 3 × ctxd's estimate
		body := refusal(count, 1000)
		before := len(f.up.requests())
		f.up.script(reply{status: 400, body: body}, textAnswer("never"))
		resp, got := f.post(c.body(), nil)
		if resp.StatusCode != 400 || string(got) != body {
			t.Fatalf("client got %d %s, want the provider's error", resp.StatusCode, got)
		}
		if d := resp.Header.Get(HeaderDiagnostic); !strings.Contains(d, "overflow not recovered") || !strings.Contains(d, "by the provider's count") {
			t.Errorf("diagnostic %q", d)
		}
		if n := len(f.up.requests()) - before; n != 1 {
			t.Errorf("%d upstream requests, want only the refused one (no retry that would be refused again)", n)
		}
	})
}

// onlySession is the id of the fixture's one session.
func onlySession(t *testing.T, f *fixture) string {
	t.Helper()
	ids, err := f.eng.ListSessions(context.Background())
	if err != nil || len(ids) != 1 {
		t.Fatalf("sessions %v, %v", ids, err)
	}
	return ids[0]
}
