package summarizer

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/wire/anthropic"
)

func TestRenderAnthropic(t *testing.T) {
	req := sampleRequest()
	req.Messages = append(req.Messages,
		history.Message{Role: history.RoleUser, Content: []history.Block{
			{Type: history.BlockText, Text: "See the screenshot."},
			{Type: history.BlockImage, MediaType: "image/png", Data: "iVBORw0KGgo="},
			{Type: history.BlockImage, MediaType: "image/png", Artifact: "artifact://img1"},
		}},
		history.Message{Role: history.RoleAssistant, Content: []history.Block{
			{Type: history.BlockRedactedThinking, Data: "opaque"},
			{Type: history.BlockText, Text: "Seen."},
		}},
	)
	ar := anthropic.Render(req.System, req.Tools, req.Messages)
	raw, err := json.Marshal(ar)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		System string `json:"system"`
		Tools  []struct {
			Name        string          `json:"name"`
			InputSchema json.RawMessage `json:"input_schema"`
		} `json:"tools"`
		Messages []struct {
			Role    string           `json:"role"`
			Content []map[string]any `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if got.System != req.System {
		t.Errorf("system = %q", got.System)
	}
	if len(got.Tools) != 2 || string(got.Tools[1].InputSchema) != `{"type":"object"}` {
		t.Errorf("tools = %+v", got.Tools)
	}
	// user, assistant(thinking, 2 tool_use), user(2 tool_result merged),
	// assistant(text, tool_use), user(tool_result), assistant, user, assistant.
	roles := []string{"user", "assistant", "user", "assistant", "user", "assistant", "user", "assistant"}
	if len(got.Messages) != len(roles) {
		t.Fatalf("got %d messages, want %d: %s", len(got.Messages), len(roles), raw)
	}
	for i, r := range roles {
		if got.Messages[i].Role != r {
			t.Errorf("message %d role %s, want %s", i, got.Messages[i].Role, r)
		}
	}
	a := got.Messages[1].Content
	if a[0]["type"] != "thinking" || a[0]["thinking"] != "Look at the test first." || a[0]["signature"] != "sig-1" {
		t.Errorf("thinking block = %v", a[0])
	}
	if a[1]["type"] != "tool_use" || a[1]["id"] != "c1" || a[1]["name"] != "read" {
		t.Errorf("tool_use block = %v", a[1])
	}
	res := got.Messages[2].Content
	if len(res) != 2 || res[0]["tool_use_id"] != "c1" || res[1]["tool_use_id"] != "c2" {
		t.Errorf("consecutive tool results not merged in order: %v", res)
	}
	errRes := got.Messages[4].Content[0]
	if errRes["is_error"] != true || len(errRes["content"].([]any)) != 2 {
		t.Errorf("error result = %v", errRes)
	}
	img := got.Messages[6].Content
	if img[1]["type"] != "image" || img[1]["source"].(map[string]any)["media_type"] != "image/png" {
		t.Errorf("image block = %v", img[1])
	}
	if img[2]["type"] != "text" || !strings.Contains(img[2]["text"].(string), "artifact://img1") {
		t.Errorf("artifact image = %v", img[2])
	}
	if r := got.Messages[7].Content[0]; r["type"] != "redacted_thinking" || r["data"] != "opaque" {
		t.Errorf("redacted thinking = %v", r)
	}
}

// TestRenderAnthropicExtends checks the append-only property: the
// rendering of a history is a prefix of the rendering of its extension.
func TestRenderAnthropicExtends(t *testing.T) {
	req := sampleRequest()
	for n := 1; n < len(req.Messages); n++ {
		short := anthropic.Render(req.System, req.Tools, req.Messages[:n])
		long := anthropic.Render(req.System, req.Tools, req.Messages[:n+1])
		for i := range short.Messages {
			if i == len(short.Messages)-1 {
				// A tool result may be merged into the last message:
				// its blocks still extend.
				if len(long.Messages[i].Content) < len(short.Messages[i].Content) {
					t.Errorf("n=%d: last message shrank", n)
				}
				continue
			}
			sj, _ := json.Marshal(short.Messages[i])
			lj, _ := json.Marshal(long.Messages[i])
			if string(sj) != string(lj) {
				t.Errorf("n=%d: message %d changed", n, i)
			}
		}
	}
}

func TestFlattenToolBlocks(t *testing.T) {
	req := sampleRequest()
	ar := anthropic.Render(req.System, nil, req.Messages)
	if !anthropic.HasToolBlocks(&ar) {
		t.Fatal("sample has tool blocks")
	}
	anthropic.FlattenToolBlocks(&ar)
	if anthropic.HasToolBlocks(&ar) {
		t.Fatal("tool blocks left after flattening")
	}
	raw, _ := json.Marshal(ar)
	for _, want := range []string{"[tool call read id=c1", "[tool result id=c3 error]", "--- FAIL: TestFoo"} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("flattened request lacks %q", want)
		}
	}
}

func TestRenderOpenAI(t *testing.T) {
	req := sampleRequest()
	req.Messages = append(req.Messages, history.Message{Role: history.RoleUser, Content: []history.Block{
		{Type: history.BlockText, Text: "Look:"},
		{Type: history.BlockImage, MediaType: "image/png", Data: "AAAA"},
	}})
	or := RenderOpenAI(req.System, req.Tools, req.Messages)
	raw, err := json.Marshal(or)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Tools []struct {
			Type     string `json:"type"`
			Function struct {
				Name       string          `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
		Messages []struct {
			Role       string          `json:"role"`
			Content    json.RawMessage `json:"content"`
			ToolCallID string          `json:"tool_call_id"`
			ToolCalls  []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	roles := []string{"system", "user", "assistant", "tool", "tool", "assistant", "tool", "assistant", "user"}
	if len(got.Messages) != len(roles) {
		t.Fatalf("got %d messages: %s", len(got.Messages), raw)
	}
	for i, r := range roles {
		if got.Messages[i].Role != r {
			t.Errorf("message %d role %s, want %s", i, got.Messages[i].Role, r)
		}
	}
	if len(got.Tools) != 2 || got.Tools[0].Type != "function" || got.Tools[0].Function.Name != "read" ||
		string(got.Tools[1].Function.Parameters) != `{"type":"object","properties":{}}` {
		t.Errorf("tools = %+v", got.Tools)
	}
	a := got.Messages[2]
	if string(a.Content) != "null" || len(a.ToolCalls) != 2 || a.ToolCalls[0].Function.Arguments != `{"path":"pkg/foo/foo_test.go"}` || a.ToolCalls[0].Type != "function" {
		t.Errorf("assistant with calls = %+v content %s", a, a.Content)
	}
	if got.Messages[3].ToolCallID != "c1" {
		t.Errorf("tool message id = %q", got.Messages[3].ToolCallID)
	}
	var errText string
	_ = json.Unmarshal(got.Messages[6].Content, &errText)
	if errText != "[error] --- FAIL: TestFoo\n{\"exit_code\":1}" {
		t.Errorf("error tool content = %q", errText)
	}
	var parts []map[string]any
	if err := json.Unmarshal(got.Messages[8].Content, &parts); err != nil || len(parts) != 2 ||
		parts[1]["image_url"].(map[string]any)["url"] != "data:image/png;base64,AAAA" {
		t.Errorf("image parts = %s", got.Messages[8].Content)
	}
	if strings.Contains(string(raw), "Look at the test first.") {
		t.Error("thinking leaked into an OpenAI request")
	}
}

func TestRenderAnthropicDropsWhatTheAPIRefuses(t *testing.T) {
	msgs := []history.Message{
		{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: "hi"}}},
		{Role: history.RoleAssistant},
		{Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockText, Text: ""}}},
		{Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockText, Text: "  \n"}, {Type: history.BlockText, Text: "answer"}}},
	}
	r := anthropic.Render("", nil, msgs)
	if len(r.Messages) != 2 {
		t.Fatalf("%d messages, want the user message and the one answer: %+v", len(r.Messages), r.Messages)
	}
	if got := r.Messages[1].Content; len(got) != 1 || got[0].Text != "answer" {
		t.Fatalf("answer rendered as %+v", got)
	}
	b, _ := json.Marshal(r)
	if strings.Contains(string(b), `"content":[]`) || strings.Contains(string(b), `{"type":"text"}`) {
		t.Fatalf("refused shapes in %s", b)
	}
}
