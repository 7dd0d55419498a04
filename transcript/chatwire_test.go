package transcript

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/wire/openai/chat"
)

// TestChatImportAgreesWithTheWireParser: a Chat Completions conversation
// imported as a transcript and read by wire/openai's ParseChat (the
// proxy's reader) gives the same messages — roles, text, tool call ids,
// names and inputs (arguments that are a compact JSON object), tool
// results — since both decode a message with chat.DecodeChatIn.
func TestChatImportAgreesWithTheWireParser(t *testing.T) {
	msgs := []string{
		`{"role":"user","content":"list the files"}`,
		`{"role":"assistant","content":"Listing.","tool_calls":[{"id":"c1","type":"function","function":{"name":"ls","arguments":"{\"path\":\".\"}"}}]}`,
		`{"role":"tool","tool_call_id":"c1","content":"a.go\nb.go"}`,
		`{"role":"assistant","content":[{"type":"text","text":"Two files."}]}`,
		`{"role":"user","content":[{"type":"text","text":"thanks"}]}`,
	}
	arr := "[" + strings.Join(msgs, ",") + "]"
	imported, err := ImportOpenAIChat(strings.NewReader(arr), Options{})
	if err != nil {
		t.Fatal(err)
	}
	raws := make([]json.RawMessage, len(msgs))
	for i, m := range msgs {
		raws[i] = json.RawMessage(m)
	}
	parsed, err := chat.ParseChat(raws, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(imported.Messages) != len(parsed) {
		t.Fatalf("imported %d messages, parsed %d", len(imported.Messages), len(parsed))
	}
	for i := range parsed {
		a, b := imported.Messages[i], parsed[i]
		if a.Role != b.Role || a.ToolCallID != b.ToolCallID || a.ToolName != b.ToolName || len(a.Content) != len(b.Content) {
			t.Fatalf("message %d: imported %+v, parsed %+v", i, a, b)
		}
		for k := range b.Content {
			x, y := a.Content[k], b.Content[k]
			if x.Type != y.Type || x.Text != y.Text || x.ID != y.ID || x.Name != y.Name || !bytes.Equal(x.Input, y.Input) {
				t.Errorf("message %d block %d: imported %+v, parsed %+v", i, k, x, y)
			}
		}
	}
	if got := parsed[1].Content[1]; got.Type != history.BlockToolCall || string(got.Input) != `{"path":"."}` {
		t.Errorf("tool call input %s", got.Input)
	}
}
