package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/ctxd/ctxd/api"
)

// BenchmarkDecodeAppend compares the strict json/v2 decoding of an append
// body (docs/decisions.md "Strict request decoding with json/v2
// semantics") with the encoding/json decoding it replaced, on a batch of
// 20 messages with a 30 KB tool result.
func BenchmarkDecodeAppend(b *testing.B) {
	var msgs []api.Message
	for i := range 10 {
		msgs = append(msgs, api.Message{Role: api.RoleAssistant, Content: []api.Block{{Type: api.BlockText, Text: fmt.Sprintf("step %d", i)},
			{Type: api.BlockToolCall, ID: fmt.Sprintf("c%d", i), Name: "bash", Input: json.RawMessage(`{"command":"ls -la /tmp","timeout":30}`)}},
			Usage: &api.Usage{InputTokens: 1000, OutputTokens: 20}},
			api.Message{Role: api.RoleTool, ToolCallID: fmt.Sprintf("c%d", i), ToolName: "bash", Content: []api.Block{{Type: api.BlockText, Text: strings.Repeat("drwxr-xr-x 2 root root 4096 file\n", 100*i)}}})
	}
	body, err := json.Marshal(api.AppendMessagesRequest{Messages: msgs})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("encoding-json-v1", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var req api.AppendMessagesRequest
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json-v2-strict", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var req api.AppendMessagesRequest
			if err := jsonv2.Unmarshal(body, &req, decodeOptions); err != nil {
				b.Fatal(err)
			}
		}
	})
}
