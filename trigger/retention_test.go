package trigger

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/ctxd/ctxd/history"
)

func TestRetentionTarget(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    Retention
		want uint64
	}{
		{"keep_recent_tokens is the smallest", Retention{KeepRecentTokens: 16384, ContextLimit: 200000, FixedTokens: 20000, Shape: ShapeKeepTail}, 16384},
		{"a quarter of the window is the smallest", Retention{KeepRecentTokens: 16384, ContextLimit: 20000, FixedTokens: 1000, Shape: ShapeKeepTail}, 5000},
		{"available is the smallest", Retention{KeepRecentTokens: 16384, ContextLimit: 20000, FixedTokens: 17000, Shape: ShapeKeepTail}, 3000},
		{"fixed over the window leaves nothing", Retention{KeepRecentTokens: 16384, ContextLimit: 20000, FixedTokens: 25000, Shape: ShapeKeepTail}, 0},
		{"keep_recent_tokens 0 retains nothing", Retention{KeepRecentTokens: 0, ContextLimit: 200000, Shape: ShapeKeepTail}, 0},
		{"shape simple retains nothing", Retention{KeepRecentTokens: 16384, ContextLimit: 200000, Shape: ShapeSimple}, 0},
		{"shape server retains nothing", Retention{KeepRecentTokens: 16384, ContextLimit: 200000, Shape: ShapeServer}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.r.Target(); got != tc.want {
				t.Fatalf("Target = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestRetainGroups(t *testing.T) {
	for _, tc := range []struct {
		name   string
		groups []uint64
		target uint64
		want   int
	}{
		{"all fit", []uint64{10, 20, 30}, 100, 3},
		{"exact fit is kept", []uint64{10, 20, 30}, 50, 2},
		{"stop at the first that does not fit", []uint64{1, 100, 10, 10}, 50, 2},
		{"no skipping past a big group to older small ones", []uint64{5, 5, 60, 5}, 20, 1},
		{"oversized newest group retains nothing", []uint64{1, 2, 500}, 100, 0},
		{"target 0 retains nothing", []uint64{1, 2, 3}, 0, 0},
		{"zero-token groups fit a zero target", []uint64{5, 0, 0}, 0, 2},
		{"no groups", nil, 100, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := RetainGroups(tc.groups, tc.target); got != tc.want {
				t.Fatalf("RetainGroups = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestResolveShape(t *testing.T) {
	for _, tc := range []struct {
		configured string
		thinking   bool
		want       string
	}{
		{ShapeAuto, true, ShapeSimple},
		{ShapeAuto, false, ShapeKeepTail},
		{"", false, ShapeKeepTail},
		{ShapeKeepTail, true, ShapeKeepTail},
		{ShapeSimple, false, ShapeSimple},
		{ShapeServer, false, ShapeServer},
	} {
		if got := ResolveShape(tc.configured, tc.thinking); got != tc.want {
			t.Errorf("ResolveShape(%q, %v) = %q, want %q", tc.configured, tc.thinking, got, tc.want)
		}
	}
}

// parallelCalls builds an assistant message with n parallel tool calls and
// their n results, each result of resultTokens tokens.
func parallelCalls(n int) []history.Message {
	calls := history.Message{Role: history.RoleAssistant}
	var results []history.Message
	for i := range n {
		id := fmt.Sprintf("call_%d", i)
		calls.Content = append(calls.Content, history.Block{Type: history.BlockToolCall, ID: id, Name: "read", Input: json.RawMessage(`{}`)})
		results = append(results, history.Message{Role: history.RoleTool, ToolCallID: id, ToolName: "read",
			Content: []history.Block{{Type: history.BlockText, Text: "x"}}})
	}
	return append([]history.Message{calls}, results...)
}

func TestRetainedStartKeepsWholeGroups(t *testing.T) {
	// user, [assistant + 8 parallel calls + 8 results], assistant text, user.
	msgs := []history.Message{{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: "go"}}}}
	msgs = append(msgs, parallelCalls(8)...)
	msgs = append(msgs,
		history.Message{Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockText, Text: "done"}}},
		history.Message{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: "thanks"}}},
	)
	a := history.Groups(msgs)
	if !a.Valid() || len(a.Groups) != 4 {
		t.Fatalf("groups = %+v", a)
	}
	tokens := make([]uint64, len(msgs))
	for i := range tokens {
		tokens[i] = 10
	}
	for i := 2; i <= 9; i++ {
		tokens[i] = 2000 // the 8 results fill most of a 20k window
	}
	tail := len(msgs) - 2
	for _, tc := range []struct {
		name   string
		target uint64
		want   int
	}{
		{"only the short exchange fits", 5000, tail},
		{"everything fits", 100000, 0},
		{"the tool group fits with the exchange", 16030, 1},
		{"one token short of the tool group", 16029, tail},
		{"nothing fits", 5, len(msgs)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := RetainedStart(a.Groups, tokens, tc.target)
			if got != tc.want {
				t.Fatalf("RetainedStart = %d, want %d", got, tc.want)
			}
			if kept := history.Groups(msgs[got:]); !kept.Valid() {
				t.Fatalf("retained suffix splits a group: %+v", kept)
			}
		})
	}
}
