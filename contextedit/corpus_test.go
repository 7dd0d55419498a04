package contextedit

import (
	"bytes"
	"slices"
	"testing"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/corpustest"
	"github.com/ctxd/ctxd/transcript"
)

// TestCorpusSession replays a real Claude Code session message by message
// with the default [context_editing] settings, planning after every append
// as the engine does, and checks each pass against the rules of docs/design.md §6
// computed independently here. Between passes, every rendered message stays
// byte-identical; at a pass only elided results and withheld thinking change.
func TestCorpusSession(t *testing.T) {
	tr, err := transcript.Import(bytes.NewReader(corpustest.Read(t, "claude-code/autocompact-150tools.jsonl")), transcript.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tr.CloseAbandoned()
	msgs := tr.Messages
	for i := range msgs {
		msgs[i].Seq = uint64(i + 1)
	}
	cfg := config.Defaults().ContextEditing
	thinkingBinding := true // a Claude model

	var l Ledger
	var passes []Pass
	var totalSaved uint64
	rendered := make([][]byte, 0, len(msgs))
	encode := func(m history.Message) []byte {
		b, err := history.Encode(l.Render(m, ""))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for i := range msgs {
		active := msgs[:i+1]
		rendered = append(rendered, encode(msgs[i]))
		p := Plan(cfg, active, &l, thinkingBinding)
		if p == nil {
			continue
		}
		checkPass(t, cfg, active, &l, p)
		l.Apply(*p)
		passes = append(passes, *p)
		totalSaved += p.CharsSaved
		// At the pass only elided results and withheld thinking change.
		changed := 0
		for j, m := range active {
			b := encode(m)
			if bytes.Equal(b, rendered[j]) {
				continue
			}
			changed++
			elidedNow := m.Role == history.RoleTool && slices.Contains(p.Elided, m.ToolCallID)
			thinkingNow := m.Role == history.RoleAssistant && m.Seq < p.WithheldThinkingBefore
			if !elidedNow && !thinkingNow {
				t.Errorf("pass %d changed message seq %d (%s), neither elided nor withheld", len(passes), m.Seq, m.Role)
			}
			rendered[j] = b
		}
		t.Logf("pass %d at seq %d: %d results elided, %d characters saved, thinking withheld before seq %d, %d messages rewritten",
			len(passes), active[len(active)-1].Seq, p.ElidedCount, p.CharsSaved, p.WithheldThinkingBefore, changed)
	}
	if len(passes) == 0 {
		t.Fatal("no pass over the whole session with the default settings")
	}
	var raw uint64
	for _, m := range msgs {
		if m.Role == history.RoleTool {
			raw += ResultChars(m)
		}
	}
	t.Logf("%d messages, %d characters of tool results: %d passes, %d results elided, %d characters saved",
		len(msgs), raw, len(passes), l.Len(), totalSaved)

	// Between passes nothing changed: the incremental rendering equals a
	// fresh one, and so does the rendering of a ledger rebuilt from the
	// recorded passes.
	var rebuilt Ledger
	for _, p := range passes {
		rebuilt.Apply(p)
	}
	for j, m := range msgs {
		if !bytes.Equal(encode(m), rendered[j]) {
			t.Fatalf("seq %d renders differently than when it was last sent", m.Seq)
		}
		b, _ := history.Encode(rebuilt.Render(m, ""))
		if !bytes.Equal(b, rendered[j]) {
			t.Fatalf("seq %d renders differently from the rebuilt ledger", m.Seq)
		}
	}
}

// checkPass checks p against docs/design.md §6, recomputing the rules here.
func checkPass(t *testing.T, cfg config.ContextEditing, active []history.Message, l *Ledger, p *Pass) {
	t.Helper()
	if p.ElidedCount != len(p.Elided) || p.ElidedCount == 0 {
		t.Errorf("pass elided_count %d for %d ids", p.ElidedCount, len(p.Elided))
	}
	if p.CharsSaved < cfg.MinCharsPerPass {
		t.Errorf("pass saves %d < min_chars_per_pass %d", p.CharsSaved, cfg.MinCharsPerPass)
	}
	var raw uint64
	result := map[string]history.Message{}
	resultIdx := map[string]int{}
	callAt := map[string]int{}
	for i, m := range active {
		switch m.Role {
		case history.RoleTool:
			raw += ResultChars(m)
			result[m.ToolCallID] = m
			resultIdx[m.ToolCallID] = i
		case history.RoleAssistant:
			for _, c := range m.ToolCalls() {
				callAt[c.ID] = i
			}
		}
	}
	if raw <= cfg.MaxTotalToolResultChars {
		t.Errorf("pass fired at %d raw characters, threshold %d", raw, cfg.MaxTotalToolResultChars)
	}
	prev := -1
	for _, id := range p.Elided {
		m, ok := result[id]
		if !ok {
			t.Errorf("elided %s is not a tool result of the active history", id)
			continue
		}
		if resultIdx[id] <= prev {
			t.Errorf("elided ids not in history order")
		}
		prev = resultIdx[id]
		if l.Elided(id) {
			t.Errorf("%s elided twice", id)
		}
		if slices.Contains(cfg.ProtectToolNames, m.ToolName) {
			t.Errorf("protected tool %s elided", m.ToolName)
		}
		if ResultChars(m) < cfg.MinCharsToElide {
			t.Errorf("%s has %d characters < min_chars_to_elide", id, ResultChars(m))
		}
		// Older than keep_recent_turns: at least that many assistant
		// messages come after the one that made the call.
		newer := uint64(0)
		for _, a := range active[callAt[id]+1:] {
			if a.Role == history.RoleAssistant {
				newer++
			}
		}
		if newer < cfg.KeepRecentTurns {
			t.Errorf("%s is in the %d newest turns (keep_recent_turns %d)", id, newer+1, cfg.KeepRecentTurns)
		}
	}
}
