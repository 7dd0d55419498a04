package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/trigger"
	"github.com/ctxd/ctxd/wire/anthropic"
)

// A thinking-bound catalog model (docs/design.md §3): Claude.
const thinkingModel = "claude-sonnet-4-5"

func thinkingCall(thought string, ids ...string) history.Message {
	m := calls(ids...)
	m.Content = append([]history.Block{{Type: history.BlockThinking, Text: thought, Signature: "sig-" + thought}}, m.Content...)
	return m
}

func thinkingAnswer(thought, answer string) history.Message {
	return history.Message{Role: history.RoleAssistant, Content: []history.Block{
		{Type: history.BlockThinking, Text: thought, Signature: "sig-" + thought},
		{Type: history.BlockText, Text: answer},
	}}
}

// checkRules fails the test when the session's context, as the engine
// returns it, breaks a provider rule for a request with thinking enabled.
// presend runs the pre-send check first.
func checkRules(t *testing.T, h *harness, id string, presend bool, where string) *Assembled {
	t.Helper()
	a, err := h.e.Context(context.Background(), id, ContextOptions{NoPreSend: !presend})
	if err != nil {
		t.Fatalf("%s: context: %v", where, err)
	}
	info, err := h.e.Session(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	rules := history.Rules{Thinking: history.ThinkingOn, OpenTail: info.OpenRound}
	if vs := history.CheckRequest(history.Sendable(a.Messages), rules); len(vs) > 0 {
		t.Fatalf("%s: the context breaks a provider rule: %v\n%s", where, vs, encodeAll(t, a))
	}
	return a
}

// A thinking tool loop (docs/decisions.md "Rewrites inside a thinking tool
// loop"): claude-sonnet-4-5, default shape,
// user → assistant(thinking, tool_call) → result, twice, then a PATCH of the
// tools. The final assistant message must keep its thinking in the
// Anthropic rendering; the new tools take effect when the loop ends, with a
// prefix_reset then.
func TestToolChangeInsideAThinkingLoopWaitsForItsEnd(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	ctx := context.Background()
	if _, err := h.e.CreateSession(ctx, CreateParams{ID: "s", Model: thinkingModel, System: "sys",
		Tools: []history.ToolDef{{Name: "read"}}}); err != nil {
		t.Fatal(err)
	}
	h.append("s", user("fix the bug"), thinkingCall("look at a", "c1"), result("c1", "a"), thinkingCall("now b", "c2"), result("c2", "b"))
	newTools := []history.ToolDef{{Name: "read"}, {Name: "write"}}
	if _, err := h.e.UpdateSession(ctx, "s", Patch{Tools: &newTools}); err != nil {
		t.Fatal(err)
	}
	a := checkRules(t, h, "s", true, "after the PATCH")
	req := anthropic.Render(a.System, a.Tools, a.Messages)
	last := req.Messages[len(req.Messages)-2]
	if last.Role != "assistant" || last.Content[0].Type != "thinking" {
		t.Fatalf("final assistant message sent as %+v", last.Content)
	}
	if len(a.Tools) != 1 {
		t.Fatalf("the tools changed inside the loop: %+v", a.Tools)
	}
	if n := len(h.events("s", checkpoint.KindPrefixReset)); n != 0 {
		t.Fatalf("%d prefix resets inside the loop", n)
	}
	// The loop ends with the answer: the change takes effect, recorded.
	res := h.append("s", thinkingAnswer("done", "fixed"))
	if len(res.Events) != 2 || res.Events[0].Kind != checkpoint.KindSessionUpdated || res.Events[1].Kind != checkpoint.KindPrefixReset || res.Events[1].Seq == 0 {
		t.Fatalf("the append that ended the loop reports events %+v", res.Events)
	}
	a = checkRules(t, h, "s", true, "after the loop")
	if len(a.Tools) != 2 {
		t.Fatalf("the deferred tools did not take effect: %+v", a.Tools)
	}
	resets := h.events("s", checkpoint.KindPrefixReset)
	if len(resets) != 1 || !strings.Contains(string(resets[0].Data), `"cause":"tools"`) {
		t.Fatalf("prefix resets %v", resets)
	}
	h.append("s", user("next"))
	checkRules(t, h, "s", true, "after the next prompt")
}

// A change deferred by a tool loop survives a restart, and takes effect at
// the loop's end; a change outside a loop records prefix_reset, also when
// the engine restarted since the last one.
func TestToolChangeRecordsPrefixResetAcrossARestart(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, testConfig(), dir)
	ctx := context.Background()
	if _, err := h.e.CreateSession(ctx, CreateParams{ID: "s", Model: thinkingModel, Tools: []history.ToolDef{{Name: "read"}}}); err != nil {
		t.Fatal(err)
	}
	h.append("s", user("go"), thinkingAnswer("t0", "ok"))
	two := []history.ToolDef{{Name: "read"}, {Name: "grep"}}
	if _, err := h.e.UpdateSession(ctx, "s", Patch{Tools: &two}); err != nil {
		t.Fatal(err)
	}
	if n := len(h.events("s", checkpoint.KindPrefixReset)); n != 1 {
		t.Fatalf("%d prefix resets after a tool change, want 1", n)
	}
	h.append("s", user("more"), thinkingCall("t1", "c1"), result("c1", "x"))
	three := []history.ToolDef{{Name: "read"}, {Name: "grep"}, {Name: "write"}}
	if _, err := h.e.UpdateSession(ctx, "s", Patch{Tools: &three}); err != nil {
		t.Fatal(err)
	}
	h.Close()

	h2 := newHarness(t, testConfig(), dir)
	a := checkRules(t, h2, "s", false, "after the restart, inside the loop")
	if len(a.Tools) != 2 {
		t.Fatalf("inside the loop after a restart: %d tools, want the old 2", len(a.Tools))
	}
	h2.append("s", thinkingAnswer("t2", "done"))
	a = checkRules(t, h2, "s", false, "after the loop")
	resets := h2.events("s", checkpoint.KindPrefixReset)
	if len(a.Tools) != 3 || len(resets) != 2 {
		t.Fatalf("after the loop: %d tools, %d prefix resets; want 3 and 2", len(a.Tools), len(resets))
	}
	info, _ := h2.e.Session(ctx, "s")
	if info.ToolsDigest != digest(toolsJSON(three)) {
		t.Fatal("the stored tools digest is not the new set's")
	}
	h2.Close()

	// A change after another restart is detected against the stored digest.
	h3 := newHarness(t, testConfig(), dir)
	if _, err := h3.e.UpdateSession(ctx, "s", Patch{Tools: &two}); err != nil {
		t.Fatal(err)
	}
	if n := len(h3.events("s", checkpoint.KindPrefixReset)); n != 3 {
		t.Fatalf("%d prefix resets after a change following a restart, want 3", n)
	}
}

// thinkingScript is a session with two thinking tool loops.
func thinkingScript() []history.Message {
	return []history.Message{
		user("fix the bug " + words(200)),
		thinkingCall("t1", "c1"),
		result("c1", words(300)),
		thinkingCall("t2", "c2", "c3"),
		result("c2", words(300)),
		result("c3", words(300)),
		thinkingAnswer("t3", "fixed"),
		user("now the tests " + words(50)),
		thinkingCall("t4", "c4"),
		result("c4", words(300)),
		thinkingCall("t5", "c5"),
		result("c5", words(300)),
		thinkingAnswer("t6", "done"),
	}
}

// Each rewrite kind at every position of a thinking tool loop: the context the
// engine returns after the rewrite and after every later message is one the
// provider accepts with thinking on.
func TestRewritesAtEveryPositionOfAThinkingLoop(t *testing.T) {
	script := thinkingScript()
	type kind struct {
		name  string
		cfg   func(*config.Config)
		limit uint64
		// rewrite runs at the position; presend: read contexts with the
		// pre-send check.
		rewrite func(t *testing.T, h *harness)
		presend bool
	}
	compact := func(sig trigger.Signal) func(*testing.T, *harness) {
		return func(t *testing.T, h *harness) {
			_, err := h.e.Compact(context.Background(), "s", sig, true)
			if err != nil && !errors.Is(err, ErrConflict) {
				t.Fatalf("compact: %v", err)
			}
		}
	}
	// keep-tail with a budget that retains the newest loop's groups but not
	// the whole session.
	keepTail := func(c *config.Config) {
		c.Compaction.Shape = trigger.ShapeKeepTail
		c.ContextCompaction.KeepRecentTokens = 1000
	}
	// Pre-send: a threshold the session crosses inside its loops.
	presend := func(shape string) func(*config.Config) {
		return func(c *config.Config) {
			c.Compaction.Shape = shape
			c.ContextCompaction.Trigger = config.Trigger{Percent: 35}
			// The compaction at the pre-send check itself, not a
			// speculative summary prepared in the background: whether
			// one is ready by then is a race, and the fold count
			// below needs the check's own compaction.
			c.ContextCompaction.PreparePercent = config.PrepareOff
		}
	}
	kinds := []kind{
		{name: "tools", rewrite: func(t *testing.T, h *harness) {
			tools := []history.ToolDef{{Name: "read"}, {Name: fmt.Sprintf("tool%d", len(h.events("s", checkpoint.KindSessionUpdated)))}}
			if _, err := h.e.UpdateSession(context.Background(), "s", Patch{Tools: &tools}); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "system", rewrite: func(t *testing.T, h *harness) {
			sys := "a new system prompt"
			if _, err := h.e.UpdateSession(context.Background(), "s", Patch{System: &sys}); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "context-edit pass", cfg: eagerEditing, rewrite: func(*testing.T, *harness) {}},
		{name: "manual simple", rewrite: compact(trigger.Manual)},
		{name: "manual keep-tail", cfg: keepTail, rewrite: compact(trigger.Manual)},
		{name: "overflow keep-tail", cfg: keepTail, rewrite: compact(trigger.Overflow)},
		{name: "pre-send keep-tail", cfg: presend(trigger.ShapeKeepTail), limit: 4000, presend: true, rewrite: func(*testing.T, *harness) {}},
		{name: "pre-send simple", cfg: presend(trigger.ShapeSimple), limit: 4000, presend: true, rewrite: func(*testing.T, *harness) {}},
	}
	for _, k := range kinds {
		folds, passes := 0, 0
		for pos := range script {
			t.Run(fmt.Sprintf("%s/after message %d", k.name, pos), func(t *testing.T) {
				cfg := testConfig()
				if k.cfg != nil {
					k.cfg(&cfg)
				}
				h := newHarness(t, cfg, "")
				if _, err := h.e.CreateSession(context.Background(), CreateParams{ID: "s", Model: thinkingModel, ContextLimit: k.limit,
					System: "sys", Tools: []history.ToolDef{{Name: "read"}}}); err != nil {
					t.Fatal(err)
				}
				for i, m := range script {
					h.append("s", m)
					if i == pos {
						k.rewrite(t, h)
					}
					checkRules(t, h, "s", k.presend, fmt.Sprintf("after message %d", i))
				}
				folds += countCode(h, "loop_folded")
				passes += len(h.events("s", checkpoint.KindContextEdit))
			})
		}
		// The matrix exercises what it names.
		switch {
		case strings.Contains(k.name, "pre-send") || strings.Contains(k.name, "manual") || strings.Contains(k.name, "overflow"):
			if folds == 0 {
				t.Errorf("%s: no compaction inside a loop", k.name)
			}
		case k.name == "context-edit pass":
			if passes == 0 {
				t.Errorf("%s: no pass", k.name)
			}
		}
	}
}

// countCode counts the session's diagnostics with code.
func countCode(h *harness, code string) int {
	n := 0
	for _, ev := range h.events("s", checkpoint.KindDiagnostic) {
		var d struct{ Code string }
		_ = json.Unmarshal(ev.Data, &d)
		if d.Code == code {
			n++
		}
	}
	return n
}

// eagerEditing turns context editing on with bounds small enough that a
// pass runs after a few tool results of a test session: one recent turn
// kept, 1,000 characters of tool results at most, passes of ≥ 100.
func eagerEditing(c *config.Config) {
	c.ContextEditing.Enabled = true
	c.ContextEditing.KeepRecentTurns = 1
	c.ContextEditing.MaxTotalToolResultChars = 1000
	c.ContextEditing.MinCharsPerPass = 100
	c.ContextEditing.MinCharsToElide = 100
}

// A context-edit pass never lands inside an open thinking tool loop: it
// waits for the loop's end (docs/design.md §4a).
func TestPassWaitsForTheThinkingLoopEnd(t *testing.T) {
	cfg := testConfig()
	eagerEditing(&cfg)
	h := newHarness(t, cfg, "")
	if _, err := h.e.CreateSession(context.Background(), CreateParams{ID: "s", Model: thinkingModel}); err != nil {
		t.Fatal(err)
	}
	h.append("s", user("go"), thinkingCall("t1", "c1"), result("c1", words(400)), thinkingCall("t2", "c2"), result("c2", words(400)),
		thinkingCall("t3", "c3"), result("c3", words(400)))
	if n := len(h.events("s", checkpoint.KindContextEdit)); n != 0 {
		t.Fatalf("%d passes inside the loop", n)
	}
	checkRules(t, h, "s", false, "inside the loop")
	h.append("s", thinkingAnswer("t4", "done"))
	if n := len(h.events("s", checkpoint.KindContextEdit)); n != 1 {
		t.Fatalf("%d passes after the loop, want 1", n)
	}
	h.append("s", user("next"))
	checkRules(t, h, "s", false, "after the loop")
}

// A compaction inside a thinking tool loop says it folded the loop.
func TestCompactionInsideAThinkingLoopFoldsIt(t *testing.T) {
	cfg := testConfig()
	cfg.Compaction.Shape = trigger.ShapeKeepTail
	cfg.ContextCompaction.KeepRecentTokens = 400
	h := newHarness(t, cfg, "")
	if _, err := h.e.CreateSession(context.Background(), CreateParams{ID: "s", Model: thinkingModel}); err != nil {
		t.Fatal(err)
	}
	h.append("s", user("go "+words(300)), thinkingCall("t1", "c1"), result("c1", words(500)), thinkingCall("t2", "c2"), result("c2", words(500)))
	res, err := h.e.Compact(context.Background(), "s", trigger.Manual, true)
	if err != nil {
		t.Fatal(err)
	}
	if res.Checkpoint.FirstRetainedSeq != 0 {
		t.Fatalf("the loop was retained from seq %d, not folded", res.Checkpoint.FirstRetainedSeq)
	}
	if countCode(h, "loop_folded") != 1 {
		t.Fatal("no loop_folded diagnostic")
	}
	checkRules(t, h, "s", false, "after the fold")
	// Outside a loop keep-tail retains as configured.
	h.append("s", thinkingAnswer("t3", "done"), user("next "+words(300)), thinkingAnswer("t4", "ok"))
	res, err = h.e.Compact(context.Background(), "s", trigger.Manual, true)
	if err != nil {
		t.Fatal(err)
	}
	if res.Checkpoint.FirstRetainedSeq == 0 {
		t.Fatal("keep-tail retained nothing outside a loop")
	}
	checkRules(t, h, "s", false, "after a keep-tail compaction")
}
