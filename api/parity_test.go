package api_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/history"
)

// TestWireParityWithHistory keeps api's copies of the message model in step
// with package history: same fields, same JSON tags, same kinds. (Only this
// test imports history; the package itself stays standard-library only.)
func TestWireParityWithHistory(t *testing.T) {
	pairs := []struct {
		name      string
		api, hist any
	}{
		{"Message", api.Message{}, history.Message{}},
		{"Block", api.Block{}, history.Block{}},
		{"Usage", api.Usage{}, history.Usage{}},
		{"ToolDef", api.ToolDef{}, history.ToolDef{}},
	}
	for _, p := range pairs {
		t.Run(p.name, func(t *testing.T) {
			a, h := reflect.TypeOf(p.api), reflect.TypeOf(p.hist)
			if a.NumField() != h.NumField() {
				t.Fatalf("api.%s has %d fields, history.%s %d", p.name, a.NumField(), p.name, h.NumField())
			}
			for i := range a.NumField() {
				af, hf := a.Field(i), h.Field(i)
				if af.Name != hf.Name || af.Tag.Get("json") != hf.Tag.Get("json") || af.Type.Kind() != hf.Type.Kind() {
					t.Errorf("field %d: api %s %s `json:%q`, history %s %s `json:%q`",
						i, af.Name, af.Type, af.Tag.Get("json"), hf.Name, hf.Type, hf.Tag.Get("json"))
				}
			}
		})
	}
}

// TestWireRoundTripWithHistory: a history message with every field set
// encodes to the same bytes after a trip through api.Message.
func TestWireRoundTripWithHistory(t *testing.T) {
	msgs := []history.Message{
		{
			Seq: 7, Role: history.RoleAssistant, Model: "claude-sonnet-4-5", Tokens: 42,
			Time: time.Date(2025, 3, 1, 12, 0, 0, 5, time.UTC),
			Content: []history.Block{
				{Type: history.BlockThinking, Text: "hmm", Signature: "sig"},
				{Type: history.BlockRedactedThinking, Data: "opaque"},
				{Type: history.BlockText, Text: "calling"},
				{Type: history.BlockToolCall, ID: "c1", Name: "bash", Input: json.RawMessage(`{"cmd":"ls"}`)},
			},
			Usage: &history.Usage{InputTokens: 1, CacheCreationInputTokens: 2, CacheReadInputTokens: 3, OutputTokens: 4},
		},
		{
			Seq: 8, Role: history.RoleTool, ToolCallID: "c1", ToolName: "bash", IsError: true,
			Content: []history.Block{
				{Type: history.BlockImage, MediaType: "image/png", Artifact: "artifact://ab"},
				{Type: history.BlockImage, MediaType: "image/png", Data: "aGk="},
				{Type: history.BlockJSON, JSON: json.RawMessage(`[1,2]`)},
			},
		},
		{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: "hi"}}},
	}
	for _, m := range msgs {
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var a api.Message
		if err := json.Unmarshal(want, &a); err != nil {
			t.Fatal(err)
		}
		got, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("round trip differs:\n got %s\nwant %s", got, want)
		}
	}
	td := history.ToolDef{Name: "bash", Description: "run", InputSchema: json.RawMessage(`{"type":"object"}`)}
	want, _ := json.Marshal(td)
	var a api.ToolDef
	if err := json.Unmarshal(want, &a); err != nil {
		t.Fatal(err)
	}
	if got, _ := json.Marshal(a); !bytes.Equal(got, want) {
		t.Errorf("tooldef round trip: %s, want %s", got, want)
	}
}
