package responses

import (
	"encoding/json"
	"testing"

	"github.com/ctxd/ctxd/history"
)

// TestHostedCallsStayInTheTurn: a call the provider ran itself (a web
// search, an MCP call) is part of the assistant's turn: with the reasoning
// before it and the message after it, one assistant message, rendered back
// as the same items; its output from the client (…_call_output) is not.
func TestHostedCallsStayInTheTurn(t *testing.T) {
	items := []string{
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"news?"}]}`,
		`{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAA"}`,
		`{"type":"web_search_call","id":"ws_1","status":"completed","action":{"type":"search","query":"go"}}`,
		`{"type":"mcp_call","id":"mcp_1","server_label":"s","name":"echo","arguments":"{}","output":"hi"}`,
		`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Go 1.26 is out."}]}`,
		`{"type":"local_shell_call_output","call_id":"c1","output":"ok"}`,
	}
	raw := make([]json.RawMessage, len(items))
	for i, it := range items {
		raw[i] = json.RawMessage(it)
	}
	msgs, err := ParseItems(raw, 0)
	if err != nil {
		t.Fatal(err)
	}
	var roles []history.Role
	for _, m := range msgs {
		roles = append(roles, m.Role)
	}
	if len(msgs) != 3 || msgs[1].Role != history.RoleAssistant || len(msgs[1].Content) != 4 || msgs[2].Role != history.RoleUser {
		t.Fatalf("roles %v, assistant blocks %d: want user, one assistant message of 4 blocks, user", roles, len(msgs[1].Content))
	}
	out := RenderItems(msgs[1:2], nil)
	want := items[1:4]
	if len(out) != 4 {
		t.Fatalf("rendered %d items: %s", len(out), out)
	}
	for i, w := range want {
		if string(out[i]) != w {
			t.Errorf("item %d: %s, want %s", i, out[i], w)
		}
	}
}
