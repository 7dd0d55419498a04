package wirereplay

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/strict"
)

// TestReplayCostsNoMoreThanDirect replays every Claude Code and pi session
// of the corpus (Sources, Messages API) and every Codex session
// (CodexSources, Responses API) request by request, straight to the
// cache-modelling fake and through ctxd's proxy with its default
// configuration, and holds what docs/design.md §10 promises on real
// traffic (checkReplay): every request managed (no client_rule_breaks, no
// violation, no pass-through), no session costing more through ctxd than
// direct by the cache prices (Usage.Cost, ctxd's summaries included), the
// newest prompt and the first task a person wrote in every forwarded
// request; and Claude Code sessions of 100 requests or more at least 30 %
// cheaper (the two-turn recordings have nothing to save).
// CTXD_REPLAY_TABLE=FILE writes the figures as the Markdown table of
// docs/performance.md.
func TestReplayCostsNoMoreThanDirect(t *testing.T) {
	replayTable(t, append(append([]Source(nil), Sources...), CodexSources...), os.Getenv("CTXD_REPLAY_TABLE"), nil, func(t *testing.T, src Source, s *Session, ratio float64, _ int) {
		// A session of many requests is one ctxd has something to save
		// on; two turns of a scripted recording are not.
		if src.Agent == "claude-code" && len(s.Turns) >= 100 && ratio > 0.70 {
			t.Errorf("a Claude Code session of %d requests costs %.0f %% of direct through ctxd, want at most 70 %%", len(s.Turns), 100*ratio)
		}
	})
}

// replayTable replays each source direct and through ctxd with the default
// configuration (checkReplay, its cost bound where bound says, always when
// bound is nil), calls more with the figures, and writes them to file as a
// Markdown table when file is not "".
func replayTable(t *testing.T, sources []Source, file string, bound func(Source, Result) bool, more func(t *testing.T, src Source, s *Session, ratio float64, compactions int)) {
	var table strings.Builder
	table.WriteString("| session | window | requests | managed | cost direct | cost via ctxd | vs direct | cache writes direct | via ctxd | compactions | summaries |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, src := range sources {
		t.Run(path.Base(src.File), func(t *testing.T) {
			s := LoadSource(t, src, maxTurns())
			direct := Direct(t, s)
			via := Through(t, s, config.Defaults())
			compactions := checkReplay(t, s, direct, via, bound == nil || bound(src, direct))
			t.Logf("largest request: direct %d, via ctxd %d tokens", direct.Usage.MaxPrompt, via.Usage.MaxPrompt)
			if src.Limit > 0 && direct.Usage.MaxPrompt > src.Limit {
				// The agent's own requests exceed the window: ctxd
				// compacts, and every request it forwards fits.
				if compactions == 0 || via.Usage.MaxPrompt > src.Limit {
					t.Errorf("over the window (direct's largest request %d > %d): %d compactions, ctxd's largest request %d", direct.Usage.MaxPrompt, src.Limit, compactions, via.Usage.MaxPrompt)
				}
			}
			dc, vc := direct.Usage.Cost(), via.Usage.Cost()
			more(t, src, s, vc/dc, compactions)
			window := "model's"
			if src.Limit > 0 {
				window = fmt.Sprint(src.Limit)
			}
			fmt.Fprintf(&table, "| `%s` | %s | %d | %d/%d | %.0f | %.0f | %+.1f %% | %d | %d | %d | %d |\n", src.File, window, len(s.Turns), via.Managed, via.Turns,
				dc, vc, 100*(vc/dc-1), direct.Usage.CacheWrite, via.Usage.CacheWrite, compactions, via.Usage.Summaries)
		})
	}
	if file != "" {
		if err := os.WriteFile(file, []byte(table.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// thinkingMode is the rules' reading of a Source's thinking setting.
func thinkingMode(setting string) history.Thinking {
	switch {
	case strings.Contains(setting, `"adaptive"`):
		return history.ThinkingAdaptive
	case strings.Contains(setting, `"enabled"`):
		return history.ThinkingOn
	}
	return history.ThinkingOff
}

// TestValidatorFollowsTheProvider holds the two lists of docs/design.md
// §4a. Every request of the recorded real sessions — all accepted by the
// provider — passes the validator (history.CheckRequest) and the strict
// fake (internal/strict) under the thinking setting its agent sent, and
// under "enabled" too, since each final assistant message of an open loop
// is the provider's own answer (it names its model). Every shape the
// provider refuses fails both, and a loop the client edited (its final
// assistant message without thinking and without a model: not the
// provider's answer) fails under "enabled" and passes under "adaptive".
func TestValidatorFollowsTheProvider(t *testing.T) {
	for _, src := range Sources {
		s := Load(t, src, maxTurns())
		for _, mode := range []history.Thinking{thinkingMode(src.Thinking), history.ThinkingOn} {
			for i, turn := range s.Turns {
				if vs := history.CheckRequest(turn.Messages, history.Rules{Thinking: mode}); len(vs) > 0 {
					t.Fatalf("%s request %d (thinking %d): %v", src.File, i, mode, vs.Err())
				}
				if mode == thinkingMode(src.Thinking) {
					vs, err := strict.Anthropic(withoutSystem(t, turn.Body), mode, false)
					if err != nil || len(vs) > 0 {
						t.Fatalf("%s request %d: the strict fake refuses it: %v %v", src.File, i, err, vs.Err())
					}
				}
			}
		}
	}

	u := history.Message{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: "fix the build"}}}
	call := func(id string, first ...history.Block) history.Message {
		return history.Message{Role: history.RoleAssistant, Content: append(first, history.Block{Type: history.BlockToolCall, ID: id, Name: "Bash", Input: []byte(`{}`)})}
	}
	result := func(id string) history.Message {
		return history.Message{Role: history.RoleTool, ToolCallID: id, Content: []history.Block{{Type: history.BlockText, Text: "ok"}}}
	}
	think := history.Block{Type: history.BlockThinking, Text: "plan", Signature: "sig"}
	text := func(role history.Role, s string) history.Message {
		return history.Message{Role: role, Content: []history.Block{{Type: history.BlockText, Text: s}}}
	}
	edited := call("b")
	produced := call("b")
	produced.Model = "claude-opus-4-6"
	refused := []struct {
		name string
		msgs []history.Message
		mode history.Thinking
		rule string
	}{
		{"a call without its result", []history.Message{u, call("a")}, history.ThinkingOff, history.RuleMissingResult},
		{"a result without its call", []history.Message{u, result("x")}, history.ThinkingOff, history.RuleOrphanResult},
		{"a call id twice", []history.Message{u, call("a"), result("a"), call("a"), result("a")}, history.ThinkingOff, history.RuleDuplicateCallID},
		{"an empty text block", []history.Message{text(history.RoleUser, " ")}, history.ThinkingOff, history.RuleEmptyText},
		{"a message without content", []history.Message{u, {Role: history.RoleAssistant}}, history.ThinkingOff, history.RuleEmptyMessage},
		{"an assistant first", []history.Message{text(history.RoleAssistant, "hi"), u}, history.ThinkingOff, history.RuleFirstNotUser},
		{"thinking not first", []history.Message{u, {Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockText, Text: "x"}, think}}}, history.ThinkingAdaptive, history.RuleThinkingFirst},
		{"thinking last", []history.Message{u, {Role: history.RoleAssistant, Content: []history.Block{think}}}, history.ThinkingAdaptive, history.RuleThinkingLast},
		{"thinking off, a final assistant with thinking", []history.Message{u, {Role: history.RoleAssistant, Content: []history.Block{think, {Type: history.BlockText, Text: "x"}}}}, history.ThinkingOff, history.RuleThinkingOff},
		{"thinking enabled, a loop the client edited", []history.Message{u, call("a", think), result("a"), edited, result("b")}, history.ThinkingOn, history.RuleLoopThinking},
	}
	for _, tc := range refused {
		vs := history.CheckRequest(tc.msgs, history.Rules{Thinking: tc.mode})
		if len(vs) == 0 || vs[0].Rule != tc.rule {
			t.Errorf("%s: %v, want %s", tc.name, vs, tc.rule)
		}
	}
	for _, ok := range []struct {
		name string
		msgs []history.Message
		mode history.Thinking
	}{
		{"adaptive, a loop whose last answer did not think", []history.Message{u, call("a", think), result("a"), edited, result("b")}, history.ThinkingAdaptive},
		{"enabled, the provider's own answer without thinking", []history.Message{u, call("a", think), result("a"), produced, result("b")}, history.ThinkingOn},
	} {
		if vs := history.CheckRequest(ok.msgs, history.Rules{Thinking: ok.mode}); len(vs) > 0 {
			t.Errorf("%s: %v, want no violation", ok.name, vs)
		}
	}
}

// withoutSystem is body without its system field (the strict fake reads a
// string system prompt only; the rules are the messages').
func withoutSystem(t *testing.T, body []byte) []byte {
	var f map[string]json.RawMessage
	if err := json.Unmarshal(body, &f); err != nil {
		t.Fatal(err)
	}
	delete(f, "system")
	out, _ := json.Marshal(f)
	return out
}

// maxTurns is how many requests of each session the tests replay: all,
// except under the race detector or -short, the first 60 (the race is in
// the proxy's concurrency, not in a session's length; the full replay runs
// in the plain run).
func maxTurns() int {
	if raceOn || testing.Short() {
		return 60
	}
	return 0
}
