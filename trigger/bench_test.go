package trigger

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/ctxd/ctxd/history"
)

// BenchmarkRetention2000 measures the retention decision of a 2,000-message
// session — grouping, then walking groups from the newest back — beside the
// trigger decision (goal ≤ 1 ms together).
func BenchmarkRetention2000(b *testing.B) {
	var msgs []history.Message
	for i := range 500 {
		id := fmt.Sprintf("c%d", i)
		msgs = append(msgs,
			history.Message{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: "go"}}},
			history.Message{Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockToolCall, ID: id, Name: "read", Input: json.RawMessage(`{}`)}}},
			history.Message{Role: history.RoleTool, ToolCallID: id, Content: []history.Block{{Type: history.BlockText, Text: "ok"}}},
			history.Message{Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockText, Text: "done"}}},
		)
	}
	tokens := make([]uint64, len(msgs))
	for i := range tokens {
		tokens[i] = 40
	}
	r := Retention{KeepRecentTokens: 16384, ContextLimit: 200000, FixedTokens: 20000, Shape: ShapeKeepTail}
	for b.Loop() {
		groups := history.Groups(msgs).Groups
		start := RetainedStart(groups, tokens, r.Target())
		d := Decide(PreSend, State{Auto: true, Threshold: 140000, Tokens: 150000, NewGroupSinceCheckpoint: true})
		if start == 0 || !d.Compact {
			b.Fatal("unexpected")
		}
	}
}
