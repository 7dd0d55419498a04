package anthropic

import (
	"strings"
	"testing"
)

// TestStreamServerToolInput: a block the canonical model keeps whole
// (server_tool_use, mcp_tool_use) whose input streams in input_json_delta
// events is recorded with that input, compact, in place of the {} it
// started with, its other members' bytes and order kept; a tool_use is
// recorded as before.
func TestStreamServerToolInput(t *testing.T) {
	rows := []struct{ name, start, deltas, want string }{
		{"server_tool_use", `{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}}`, `{\"query\": ` + "|" + `\"go 1.26\"}`,
			`{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"go 1.26"}}`},
		{"mcp_tool_use", `{"type":"mcp_tool_use","id":"mcptoolu_1","name":"echo","server_name":"s","input":{}}`, `{\"text\":` + "|" + `\"hi\"}`,
			`{"type":"mcp_tool_use","id":"mcptoolu_1","name":"echo","server_name":"s","input":{"text":"hi"}}`},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			var b strings.Builder
			b.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"m\",\"usage\":{\"input_tokens\":1}}}\n\n")
			b.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":" + row.start + "}\n\n")
			for _, d := range strings.Split(row.deltas, "|") {
				b.WriteString("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"" + d + "\"}}\n\n")
			}
			b.WriteString("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n")
			b.WriteString("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
			s := NewStreamReader()
			_, _ = s.Write([]byte(b.String()))
			r, err := s.Response()
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Content) != 1 || string(r.Content[0].Raw) != row.want {
				t.Fatalf("recorded %s, want %s", r.Content[0].Raw, row.want)
			}
			if got := r.Content[0].Canonical(); string(got.JSON) != row.want {
				t.Errorf("canonical json %s, want %s", got.JSON, row.want)
			}
		})
	}
}
