package wire

import (
	"encoding/json"
	"testing"

	"github.com/ctxd/ctxd/history"
)

// An answer's signature matches the answer as a client sends it back
// re-flowed, re-encoded or with blank text blocks, and not once the
// client edited its text or a tool call's input.
func TestAnswerSig(t *testing.T) {
	msg := func(text, input string) history.Message {
		return history.Message{Role: history.RoleAssistant, Content: []history.Block{
			{Type: history.BlockText, Text: text},
			{Type: history.BlockToolCall, ID: "t1", Name: "Bash", Input: json.RawMessage(input)},
		}}
	}
	s := SigOf(msg("let me look\nat it", `{"a":1,"b":2}`))
	reflowed := msg("let me  look at it", `{ "b": 2, "a": 1 }`)
	reflowed.Content = append(reflowed.Content, history.Block{Type: history.BlockText, Text: "  "})
	if !s.Equal(reflowed) {
		t.Error("a re-flowed, re-encoded answer does not match")
	}
	if s.Equal(msg("let me look at this", `{"a":1,"b":2}`)) {
		t.Error("an edited text matches")
	}
	if s.Equal(msg("let me look\nat it", `{"a":1,"b":3}`)) {
		t.Error("an edited tool input matches")
	}
	old := *s
	old.Norm, old.Inputs = "", nil // a record written before they existed
	if !old.Equal(msg("let me look\nat it", `{"a":9}`)) || old.Equal(reflowed) {
		t.Error("a record without Norm and Inputs compares the exact text only")
	}
}
