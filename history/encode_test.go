package history

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestEncodeStable(t *testing.T) {
	paris := time.FixedZone("CET", 3600)
	tests := []struct {
		name string
		m    Message
		want string
	}{
		{
			"minimal nil content",
			Message{Role: RoleUser},
			`{"role":"user","content":[]}`,
		},
		{
			"html characters kept",
			text(RoleUser, "if a < b && c > d { }"),
			`{"role":"user","content":[{"type":"text","text":"if a < b && c > d { }"}]}`,
		},
		{
			"input compacted, key order and escapes kept",
			calls(Block{Type: BlockToolCall, ID: "t1", Name: "bash", Input: json.RawMessage("{ \"z\" : 1,\n \"a\": \"<\\u0026>\" }")}),
			`{"role":"assistant","content":[{"type":"tool_call","id":"t1","name":"bash","input":{"z":1,"a":"<\u0026>"}}]}`,
		},
		{
			"time in UTC, every field",
			Message{
				Seq: 7, Role: RoleAssistant, Model: "claude", Tokens: 12,
				Time:    time.Date(2026, 3, 1, 10, 0, 0, 5, paris),
				Usage:   &Usage{InputTokens: 1, CacheReadInputTokens: 3, OutputTokens: 4},
				Content: []Block{{Type: BlockThinking, Text: "hm", Signature: "sig"}, {Type: BlockJSON, JSON: json.RawMessage(` [ 1, 2 ] `)}},
			},
			`{"seq":7,"role":"assistant","content":[{"type":"thinking","text":"hm","signature":"sig"},{"type":"json","json":[1,2]}],"time":"2026-03-01T09:00:00.000000005Z","model":"claude","usage":{"input_tokens":1,"cache_creation_input_tokens":0,"cache_read_input_tokens":3,"output_tokens":4},"tokens":12}`,
		},
		{
			"tool result",
			Message{Role: RoleTool, ToolCallID: "t1", ToolName: "bash", IsError: true, Content: []Block{{Type: BlockImage, MediaType: "image/png", Artifact: "artifact://ab"}}},
			`{"role":"tool","content":[{"type":"image","media_type":"image/png","artifact":"artifact://ab"}],"tool_call_id":"t1","tool_name":"bash","is_error":true}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			orig := tt.m
			b1, err := Encode(tt.m)
			if err != nil {
				t.Fatal(err)
			}
			if string(b1) != tt.want {
				t.Fatalf("Encode =\n%s\nwant\n%s", b1, tt.want)
			}
			m, err := Decode(b1)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			b2, err := Encode(m)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b1, b2) {
				t.Fatalf("round trip changed bytes:\n%s\n%s", b1, b2)
			}
			if b3, _ := Encode(orig); !bytes.Equal(b1, b3) {
				t.Fatal("Encode changed its input")
			}
		})
	}
}

func TestEncodeErrors(t *testing.T) {
	tests := []struct {
		name string
		m    Message
		want string
	}{
		{"invalid input JSON", calls(Block{Type: BlockToolCall, ID: "a", Name: "n", Input: json.RawMessage(`{`)}), "content[0].input: invalid JSON"},
		{"invalid json block", Message{Role: RoleUser, Content: []Block{{Type: BlockJSON, JSON: json.RawMessage(`nope`)}}}, "content[0].json: invalid JSON"},
		{"invalid UTF-8 text", text(RoleUser, "\xff"), "content[0].text: invalid UTF-8"},
		{"invalid UTF-8 tool name", Message{Role: RoleTool, ToolName: "\xff"}, "tool_name: invalid UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Encode(tt.m)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Encode = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestDecodeStrict(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string // "" means accepted
	}{
		{"ok", `{"role":"user","content":[{"type":"text","text":"hi"}]}`, ""},
		{"ok raw keys not checked", `{"role":"assistant","content":[{"type":"tool_call","id":"a","name":"n","input":{"Role":1,"Role":2}}]}`, ""},
		{"null content and usage", `{"role":"user","content":null,"usage":null}`, ""},
		{"unknown field", `{"role":"user","content":[],"extra":1}`, `unknown field "extra"`},
		{"unknown block field", `{"role":"user","content":[{"type":"text","txt":"x"}]}`, `unknown field "content[0].txt"`},
		{"unknown usage field", `{"role":"assistant","content":[],"usage":{"input":1}}`, `unknown field "usage.input"`},
		{"field in other case", `{"Role":"user","content":[]}`, `unknown field "Role"`},
		{"duplicate field", `{"role":"user","role":"tool","content":[]}`, `duplicate field "role"`},
		{"duplicate block field", `{"role":"user","content":[{"type":"text","text":"a","text":"b"}]}`, `duplicate field "content[0].text"`},
		{"trailing data", `{"role":"user","content":[]} {}`, "trailing data"},
		{"not an object", `[1]`, "cannot unmarshal array"},
		{"content not an array", `{"role":"user","content":{"type":"text"}}`, "cannot unmarshal object"},
		{"block not an object", `{"role":"user","content":[[1]]}`, "cannot unmarshal array"},
		{"wrong type", `{"role":1,"content":[]}`, "cannot unmarshal"},
		{"invalid UTF-8", "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"\xff\"}]}", "invalid UTF-8"},
		{"invalid JSON", `{"role":`, "unexpected EOF"},
		{"empty", ``, "EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode([]byte(tt.in))
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Decode = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestCanonicalIsWhatTheStoreGivesBack(t *testing.T) {
	m := Message{Role: RoleAssistant, Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600)),
		Content: []Block{{Type: BlockToolCall, ID: "a", Name: "grep", Input: json.RawMessage(`{ "pattern" :  "x" }`)}}}
	c, err := Canonical(m)
	if err != nil {
		t.Fatal(err)
	}
	enc, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Decode(enc)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, back) {
		t.Fatalf("Canonical = %+v\nround trip = %+v", c, back)
	}
	if string(c.Content[0].Input) != `{"pattern":"x"}` {
		t.Fatalf("input not compacted: %s", c.Content[0].Input)
	}
}
