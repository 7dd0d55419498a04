package summarizer

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/history"
)

// FuzzPrune: the pruned retry's rewriting, on any tool results:
// every message keeps its role, ids, tool name and error flag; every result
// that is not an artifact read becomes one PruneMarker whose URI reads back
// exactly the content that was retained (its text, or the JSON of its
// blocks), in the format the marker names; the request given is unchanged;
// tools are dropped.
func FuzzPrune(f *testing.F) {
	f.Add("ls output\nfile", `{"command":"ls"}`, "read", `{"filePath":"artifact://`+strings.Repeat("a", 64)+`"}`, false)
	f.Add("", `{}`, "Read", `{"path":"/etc/hosts"}`, true)
	f.Add("\x00\xff", `"not an object"`, "bash", `{"file_path":"artifact://x"}`, true)
	f.Fuzz(func(t *testing.T, out, input1, tool2, input2 string, jsonBlock bool) {
		if !json.Valid([]byte(input1)) || !json.Valid([]byte(input2)) {
			return
		}
		second := []history.Block{{Type: history.BlockText, Text: out}}
		if jsonBlock {
			second = append(second, history.Block{Type: history.BlockJSON, JSON: json.RawMessage(input1)})
		}
		req := Request{
			Tools: []history.ToolDef{{Name: "bash"}},
			Messages: []history.Message{
				{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: "go"}}},
				{Role: history.RoleAssistant, Content: []history.Block{
					{Type: history.BlockToolCall, ID: "a", Name: "bash", Input: json.RawMessage(input1)},
					{Type: history.BlockToolCall, ID: "b", Name: tool2, Input: json.RawMessage(input2)},
				}},
				{Role: history.RoleTool, ToolCallID: "a", ToolName: "bash", Content: []history.Block{{Type: history.BlockText, Text: out}}},
				{Role: history.RoleTool, ToolCallID: "b", ToolName: tool2, IsError: true, Content: second},
			},
		}
		orig := cloneRequest(req)
		store := newMemStore()
		pr, stats, err := Prune(context.Background(), req, store)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(req, orig) {
			t.Fatal("Prune modified its input")
		}
		if pr.Tools != nil || len(pr.Messages) != len(req.Messages) {
			t.Fatalf("tools %v, %d messages", pr.Tools, len(pr.Messages))
		}
		pruned := 0
		for i, m := range pr.Messages {
			o := req.Messages[i]
			if m.Role != o.Role || m.ToolCallID != o.ToolCallID || m.ToolName != o.ToolName || m.IsError != o.IsError {
				t.Fatalf("message %d lost its identity", i)
			}
			if m.Role != history.RoleTool {
				if !reflect.DeepEqual(m, o) {
					t.Fatalf("message %d changed", i)
				}
				continue
			}
			if len(m.Content) != 1 || m.Content[0].Type != history.BlockText {
				t.Fatalf("result %d is not one text block", i)
			}
			text := m.Content[0].Text
			if text == ArtifactReadOmitted {
				continue
			}
			pruned++
			want, format, _ := toolContent(o.Content)
			uri := text[strings.Index(text, `filePath="`)+len(`filePath="`) : len(text)-2]
			got, gotFormat, ok := store.get(uri)
			if !ok || string(got) != string(want) || gotFormat != format || text != PruneMarker(len(want), format, uri) {
				t.Fatalf("result %d: marker %q does not read back its content", i, text)
			}
		}
		if pruned != stats.Results {
			t.Fatalf("%d markers, stats say %d", pruned, stats.Results)
		}
	})
}
