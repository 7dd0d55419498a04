package summarizer

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/fakeprovider"
)

const (
	toolUseAnswer = `{"id":"msg_1","type":"message","role":"assistant","model":"claude-test","content":[{"type":"tool_use","id":"toolu_9","name":"read","input":{"path":"x"}}],"stop_reason":"tool_use","usage":{"input_tokens":10,"output_tokens":5}}`
)

func textAnswer(s string) []byte {
	b, _ := json.Marshal(map[string]any{"id": "msg_2", "type": "message", "role": "assistant", "model": "claude-test",
		"content": []map[string]any{{"type": "text", "text": s}}, "stop_reason": "end_turn", "usage": map[string]any{"input_tokens": 10, "output_tokens": 50}})
	return b
}

// TestToolCallAnswerRetriedWithToolChoiceNone: the first summary call is the
// cache-friendly extension of the session's request — the client's own
// tool_choice kept —; an answer that is a tool call is asked once more,
// of the same binding, with tool_choice none, before any other binding.
func TestToolCallAnswerRetriedWithToolChoiceNone(t *testing.T) {
	summary := "The user asked to fix the failing test in pkg/foo; the fixture is missing and is to be added next. " + strings.Repeat("Details. ", 10)
	fake := newFakeProvider(t, reply{status: 200, body: []byte(toolUseAnswer)}, reply{status: 200, body: textAnswer(summary)})
	b := anthropicBinding("own", fake.URL)
	b.Credential = &config.Credential{APIKey: "sk-ant-client", System: []byte(`[{"type":"text","text":"You are a coding agent."}]`),
		Tools: []byte(`[{"name":"read","input_schema":{"type":"object"}}]`), ToolChoice: []byte(`{"type":"auto"}`)}
	res, err := newTestSummarizer().Summarize(context.Background(), []config.Binding{b, {Name: "x", Provider: ProviderExtractive}}, sampleRequest(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Binding != "own" || res.Summary != summary || len(res.Attempts) != 1 || res.Attempts[0].Tries != 2 {
		t.Fatalf("result binding %q, %d attempts (%+v)", res.Binding, len(res.Attempts), res.Attempts)
	}
	got := fake.got()
	if len(got) != 2 {
		t.Fatalf("%d requests", len(got))
	}
	if !strings.Contains(string(got[0].body), `"tool_choice":{"type":"auto"}`) {
		t.Errorf("first call changed the client's tool_choice: %.300s", got[0].body)
	}
	if !strings.Contains(string(got[1].body), `"tool_choice":{"type":"none"}`) {
		t.Errorf("retry without tool_choice none: %.300s", got[1].body)
	}

	// Twice a tool call: the binding failed, the next one summarizes.
	fake = newFakeProvider(t, reply{status: 200, body: []byte(toolUseAnswer)})
	b.BaseURL = fake.URL
	res, err = newTestSummarizer().Summarize(context.Background(), []config.Binding{b, {Name: "x", Provider: ProviderExtractive}}, sampleRequest(), nil)
	if err != nil || res.Binding != "x" || len(fake.got()) != 2 || !errors.Is(res.Attempts[0].Err, ErrToolCallAnswer) ||
		!strings.Contains(res.Attempts[0].Err.Error(), "tool_choice none") {
		t.Fatalf("binding %q, %d requests, attempts %+v, %v", res.Binding, len(fake.got()), res.Attempts, err)
	}
}

// TestShortSummaryIsAFailedAttempt: a summary implausibly short for the
// history it summarizes is a failed attempt, its reason recorded; the
// next binding is tried.
func TestShortSummaryIsAFailedAttempt(t *testing.T) {
	req := sampleRequest()
	req.Messages = append(req.Messages, history.Message{Seq: 8, Role: history.RoleUser,
		Content: []history.Block{{Type: history.BlockText, Text: strings.Repeat("a long request about the build ", 200)}}})
	fake := newFakeProvider(t, reply{status: 200, body: textAnswer("I summarized the conversation.")})
	res, err := newTestSummarizer().Summarize(context.Background(), []config.Binding{anthropicBinding("a", fake.URL), {Name: "x", Provider: ProviderExtractive}}, req, nil)
	if err != nil || res.Binding != "x" {
		t.Fatalf("binding %q, %v", res.Binding, err)
	}
	a := res.Attempts[0]
	if !errors.Is(a.Err, ErrAnswerTooShort) || !strings.Contains(a.Err.Error(), "30 bytes, at least 65 expected") {
		t.Errorf("attempt %+v", a)
	}
	// A short summary of a short history stands.
	fake = newFakeProvider(t, reply{status: 200, body: textAnswer("Fixing pkg/foo's test.")})
	if res, err := newTestSummarizer().Summarize(context.Background(), []config.Binding{anthropicBinding("a", fake.URL)}, sampleRequest(), nil); err != nil || res.Binding != "a" {
		t.Errorf("short history: %v", err)
	}
}

// TestResponsesCodeModePrefix: a Codex code-mode session (no tools field;
// its tools, the free-form exec among them, declared by an additional_tools
// item) is summarized with the client's instructions and prefix items
// byte for byte ahead of the history — its tools declared as the API
// declares them, not as JSON in the instructions — and its custom tool
// calls go back as custom_tool_call items.
func TestResponsesCodeModePrefix(t *testing.T) {
	fake := fakeprovider.Start(t, fakeprovider.Config{NoThinking: true})
	at := `{"type":"additional_tools","role":"developer","tools":[{"type":"namespace","name":"functions","tools":[{"type":"custom","name":"exec","description":"Run JavaScript"}]}]}`
	dev := `{"type":"message","role":"developer","content":[{"type":"input_text","text":"sandbox: none"}]}`
	req := Request{System: "instructions and " + at, MaxSummaryBytes: 4096, Messages: []history.Message{
		{Seq: 1, Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: "List the files."}}},
		{Seq: 2, Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockToolCall, ID: "call_1", Name: "exec", Input: json.RawMessage(`{"input":"ls -la"}`)}}},
		{Seq: 3, Role: history.RoleTool, ToolCallID: "call_1", ToolName: "exec", Content: []history.Block{{Type: history.BlockText, Text: "a.go b.go"}}},
		{Seq: 4, Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockText, Text: "Two files."}}},
	}}
	b := config.Binding{Name: "codex-own", Provider: ProviderOpenAIResponses, Model: "gpt-6.2-sol", BaseURL: fake.URL(),
		Credential: &config.Credential{Authorization: "Bearer sk-test", System: []byte(`"You are Codex."`), Prefix: []byte("[" + dev + "," + at + "]")}}
	if _, err := newTestSummarizer().Summarize(context.Background(), []config.Binding{b}, req, nil); err != nil {
		t.Fatal(err)
	}
	body := string(fake.Requests()[0].Body)
	var r struct {
		Instructions string            `json:"instructions"`
		Input        []json.RawMessage `json:"input"`
		Tools        json.RawMessage   `json:"tools"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatal(err)
	}
	if r.Instructions != "You are Codex." || len(r.Input) < 3 || string(r.Input[0]) != dev || string(r.Input[1]) != at {
		t.Fatalf("instructions %q, input starts %s", r.Instructions, r.Input[:min(2, len(r.Input))])
	}
	if !strings.Contains(body, `"type":"custom_tool_call"`) || strings.Contains(body, `"type":"function_call"`) || !strings.Contains(body, `"type":"custom_tool_call_output"`) {
		t.Errorf("custom tool calls not sent as custom_tool_call items: %.600s", body)
	}
}

// TestNoPrefixSendsTheHistoryAlone: an overflow compaction's summarizer
// request carries no system prompt, no tools and not the client's prefix
// (the provider has just refused the request it would extend).
func TestNoPrefixSendsTheHistoryAlone(t *testing.T) {
	summary := strings.Repeat("The user asked to fix the failing test in pkg/foo. ", 4)
	fake := newFakeProvider(t, reply{status: 200, body: textAnswer(summary)})
	b := anthropicBinding("own", fake.URL)
	b.Credential = &config.Credential{APIKey: "sk-ant-client", System: []byte(`[{"type":"text","text":"CLIENT-SYSTEM"}]`),
		Tools: []byte(`[{"name":"read","input_schema":{"type":"object"}}]`), ToolChoice: []byte(`{"type":"auto"}`)}
	req := sampleRequest()
	req.NoPrefix = true
	if _, err := newTestSummarizer().Summarize(context.Background(), []config.Binding{b}, req, nil); err != nil {
		t.Fatal(err)
	}
	body := string(fake.got()[0].body)
	for _, no := range []string{"CLIENT-SYSTEM", req.System, `"tools"`, `"tool_choice"`, `"tool_use"`} {
		if strings.Contains(body, no) {
			t.Errorf("the request carries %s: %.400s", no, body)
		}
	}
	if !strings.Contains(body, "Fix the failing test in pkg/foo.") || !strings.Contains(body, "go test ./pkg/foo/") {
		t.Errorf("the history is missing: %.400s", body)
	}
}
