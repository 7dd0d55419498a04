package engine

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/corpustest"
	"github.com/ctxd/ctxd/transcript"
	"github.com/ctxd/ctxd/trigger"
)

// serverShapeConfig is shape server with claude-sonnet-4-6 (the catalog
// lists its server_compaction).
func serverShapeConfig() config.Config {
	cfg := testConfig()
	cfg.Compaction.Shape = config.ShapeServer
	return cfg
}

// The Claude Code session of the corpus (150 tool calls, context up to
// 165k tokens) as a proxied Anthropic session with shape server, in a
// 100,000-token window: each time
// the estimate passes the threshold, the provider's next answer carries a
// compaction block (as compact_20260112 answers do). ctxd never runs its
// own summarizer (its automatic checks leave compaction to the provider),
// records every block as a checkpoint with binding server, the estimate
// falls back under the threshold after each, and the assembled context —
// a user line, then the answer that carries the block — stays valid
// (docs/design.md §4a).
func TestServerShapeOnTheCorpus(t *testing.T) {
	tr, err := transcript.Import(bytes.NewReader(corpustest.Read(t, "claude-code/autocompact-150tools.jsonl")), transcript.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tr.CloseAbandoned()
	h := newHarness(t, serverShapeConfig(), "")
	ctx := context.Background()
	if _, err := h.e.CreateSession(ctx, CreateParams{ID: "s", Model: "claude-sonnet-4-6", ContextLimit: 100000,
		Labels: map[string]string{LabelProxy: "anthropic"}}); err != nil {
		t.Fatal(err)
	}
	sh, _ := h.e.ServerShape(ctx, "s")
	if !sh.Active || sh.Trigger != 70000 {
		t.Fatalf("server shape %+v", sh)
	}
	over, injected := false, 0
	for i, m := range tr.Messages {
		m.Usage = nil // the recorded usage is of a session without server compaction
		if over && m.Role == history.RoleAssistant {
			summary := "Summary " + strings.Repeat("of the work so far. ", 40)
			m.Content = append([]history.Block{{Type: history.BlockCompaction, Text: summary}}, m.Content...)
			injected++
			over = false
		}
		res := h.append("s", m)
		if res.Tokens >= sh.Trigger {
			over = true
			// The pre-send check leaves it to the provider.
			if a, err := h.e.Context(ctx, "s", ContextOptions{}); err != nil || a.Compacted {
				t.Fatalf("message %d: pre-send at %d tokens: %v", i, res.Tokens, err)
			}
		}
		if history.LastCompaction(m) >= 0 {
			cps, _ := h.e.Checkpoints(ctx, "s")
			cp := cps[len(cps)-1]
			if len(cps) != injected || cp.Binding != BindingServer || cp.Shape != trigger.ShapeServer || cp.FirstRetainedSeq != res.Messages[0].Seq {
				t.Fatalf("message %d: %d checkpoints for %d provider compactions, the last %+v", i, len(cps), injected, cp)
			}
			if res.Tokens >= sh.Trigger || cp.TokensAfter >= cp.TokensBefore {
				t.Fatalf("message %d: %d tokens after the provider's compaction (%d → %d)", i, res.Tokens, cp.TokensBefore, cp.TokensAfter)
			}
			a := h.context("s")
			if vs := history.CheckRequest(history.Sendable(a.Messages), history.Rules{OpenTail: true}); len(vs) > 0 {
				t.Fatalf("message %d: invalid context: %v", i, vs)
			}
			if a.Messages[0].Role != history.RoleUser || history.LastCompaction(a.Messages[1]) < 0 {
				t.Fatalf("message %d: the context begins %v, %v", i, a.Messages[0].Role, a.Messages[1].Content[0].Type)
			}
		}
	}
	if injected < 2 {
		t.Fatalf("%d provider compactions over the session", injected)
	}
	if started := h.events("s", checkpoint.KindCompactionStarted); len(started) != 0 {
		t.Fatalf("ctxd ran %d compactions of its own", len(started))
	}
	a, err := h.e.Context(ctx, "s", ContextOptions{})
	if err != nil || a.Compacted {
		t.Fatalf("pre-send: %v, compacted %v", err, a != nil && a.Compacted)
	}
	t.Logf("%d messages, %d provider compactions recorded, %d tokens at the end", len(tr.Messages), injected, a.Tokens)
}

// Shape server where it cannot be in effect falls back to the summarizer
// bindings and says why: a session of the daemon API (no upstream), a
// Chat Completions session, a model without server_compaction. Its
// compactions are ctxd's own (binding extractive here), never "server",
// and a compaction block appended to such a session is not a checkpoint.
func TestServerShapeFallsBackToTheSummarizer(t *testing.T) {
	h := newHarness(t, serverShapeConfig(), "")
	ctx := context.Background()
	for _, c := range []struct {
		id, model, api, why string
	}{
		{"api", "claude-sonnet-4-6", "", "not proxied"},
		{"chat", "claude-sonnet-4-6", "chat", "Chat Completions API has no server-side compaction"},
		{"model", "claude-sonnet-4-5", "anthropic", `model "claude-sonnet-4-5" does not list server_compaction`},
	} {
		labels := map[string]string{}
		if c.api != "" {
			labels[LabelProxy] = c.api
		}
		if _, err := h.e.CreateSession(ctx, CreateParams{ID: c.id, Model: c.model, ContextLimit: 20000, Labels: labels}); err != nil {
			t.Fatal(err)
		}
		info, _ := h.e.Session(ctx, c.id)
		if info.ServerShape == nil || info.ServerShape.Active || !strings.Contains(info.ServerShape.Why, c.why) {
			t.Fatalf("%s: %+v", c.id, info.ServerShape)
		}
		for i := range 6 {
			h.append(c.id, user(words(1500)), assistant("ok "+words(10)))
			_ = i
		}
		h.append(c.id, history.Message{Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockCompaction, Text: "a block from elsewhere"}, {Type: history.BlockText, Text: "hi"}}})
		h.append(c.id, user("go on"))
		res, err := h.e.Compact(ctx, c.id, trigger.Manual, true)
		if err != nil {
			t.Fatalf("%s: %v", c.id, err)
		}
		cps, _ := h.e.Checkpoints(ctx, c.id)
		if len(cps) != 1 || res.Checkpoint == nil || res.Checkpoint.Binding == BindingServer || res.Checkpoint.Shape != trigger.ShapeSimple {
			t.Fatalf("%s: %d checkpoints, binding %v", c.id, len(cps), res.Checkpoint)
		}
	}
	// Refused by the upstream: the same, with the reason.
	if _, err := h.e.CreateSession(ctx, CreateParams{ID: "refused", Model: "claude-sonnet-4-6", ContextLimit: 80000, Labels: map[string]string{LabelProxy: "anthropic"}}); err != nil {
		t.Fatal(err)
	}
	if err := h.e.RefuseServerShape(ctx, "refused", "upstream status 400: Unexpected value(s)"); err != nil {
		t.Fatal(err)
	}
	if sh, _ := h.e.ServerShape(ctx, "refused"); sh.Active || !strings.Contains(sh.Why, "refused") || !strings.Contains(sh.Why, "Unexpected value(s)") {
		t.Fatalf("refused: %+v", sh)
	}
	if len(h.events("refused", checkpoint.KindDiagnostic)) != 1 {
		t.Fatal("no diagnostic event for the refusal")
	}
}
