package server

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/strict"
	"github.com/ctxd/ctxd/wire/anthropic"
)

// strictAnthropic fails the test when the strict fake provider
// (internal/strict) refuses body, a request as ?format=anthropic serves it.
func strictAnthropic(t *testing.T, body []byte, thinking history.Thinking) anthropic.Request {
	t.Helper()
	vs, err := strict.Anthropic(body, thinking, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) > 0 {
		t.Fatalf("strict provider: 400 invalid_request_error: %v\nrequest: %s", vs, body)
	}
	var req anthropic.Request
	_ = json.Unmarshal(body, &req)
	return req
}

func thinkingCall(thought, id string) api.Message {
	return api.Message{Role: api.RoleAssistant, Content: []api.Block{
		{Type: api.BlockThinking, Text: thought, Signature: "sig-" + thought},
		{Type: api.BlockToolCall, ID: id, Name: "read", Input: json.RawMessage(`{}`)},
	}}
}

func toolResult(id, s string) api.Message {
	return api.Message{Role: api.RoleTool, ToolCallID: id, ToolName: "read", Content: []api.Block{{Type: api.BlockText, Text: s}}}
}

// A thinking tool loop over HTTP: claude-sonnet-4-5, default
// shape, two thinking tool rounds, a PATCH of the tools, then
// ?format=anthropic: the strict provider accepts it, the final assistant
// message starting with its thinking.
func TestAnthropicContextAfterAToolPatchInsideAThinkingLoop(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	if _, err := f.client.CreateSession(ctx, api.CreateSessionRequest{ID: "s1", Model: "claude-sonnet-4-5",
		Tools: []api.ToolDef{{Name: "read"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.AppendMessages(ctx, "s1", api.AppendMessagesRequest{Messages: []api.Message{
		text(api.RoleUser, "fix it"), thinkingCall("first", "c1"), toolResult("c1", "a"), thinkingCall("second", "c2"), toolResult("c2", "b"),
	}}); err != nil {
		t.Fatal(err)
	}
	tools := []api.ToolDef{{Name: "read"}, {Name: "write"}}
	if _, err := f.client.PatchSession(ctx, "s1", api.PatchSessionRequest{Tools: &tools}); err != nil {
		t.Fatal(err)
	}
	raw, err := f.client.ContextRaw(ctx, "s1", api.FormatAnthropic)
	if err != nil {
		t.Fatal(err)
	}
	req := strictAnthropic(t, raw, history.ThinkingOn)
	final := req.Messages[len(req.Messages)-2]
	if final.Role != "assistant" || final.Content[0].Type != "thinking" {
		t.Fatalf("final assistant message: %+v", final)
	}
}

// An assistant message while an earlier call is open: 400 naming the call
// (docs/decisions.md "An assistant message while a tool call is open"),
// and the context stays one the provider accepts.
func TestAssistantWhileACallIsOpenIs400(t *testing.T) {
	f := newFixture(t, nil)
	f.create(t, "s1")
	ctx := context.Background()
	two := api.Message{Role: api.RoleAssistant, Content: []api.Block{
		{Type: api.BlockToolCall, ID: "c1", Name: "read", Input: json.RawMessage(`{}`)},
		{Type: api.BlockToolCall, ID: "c2", Name: "read", Input: json.RawMessage(`{}`)},
	}}
	if _, err := f.client.AppendMessages(ctx, "s1", api.AppendMessagesRequest{Messages: []api.Message{text(api.RoleUser, "go"), two, toolResult("c1", "one")}}); err != nil {
		t.Fatal(err)
	}
	_, err := f.client.AppendMessages(ctx, "s1", api.AppendMessagesRequest{Messages: []api.Message{text(api.RoleAssistant, "meanwhile"), toolResult("c2", "two")}})
	if api.ErrorCode(err) != api.Invalid || !strings.Contains(api.ErrorMessage(err), `"c2"`) {
		t.Fatalf("err = %v (%s), want invalid naming c2", err, api.ErrorCode(err))
	}
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Field != "messages[0].role" {
		t.Fatalf("field: %+v", ae)
	}
	raw, err := f.client.ContextRaw(ctx, "s1", api.FormatAnthropic)
	if err != nil {
		t.Fatal(err)
	}
	// Mid-round: the strict provider would want c2's result; what is there
	// is valid.
	req := strictAnthropicOpen(t, raw)
	if n := len(req.Messages); n != 3 {
		t.Fatalf("%d messages", n)
	}
}

// strictAnthropicOpen is strictAnthropic for a context read mid-round: the
// calls still open at the end are accepted.
func strictAnthropicOpen(t *testing.T, body []byte) anthropic.Request {
	t.Helper()
	var req anthropic.Request
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatal(err)
	}
	// Answer the open calls as the agent will, then check.
	last := req.Messages[len(req.Messages)-1]
	answered := map[string]bool{}
	for _, b := range last.Content {
		if b.Type == "tool_result" {
			answered[b.ToolUseID] = true
		}
	}
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role != "assistant" {
			continue
		}
		for _, b := range req.Messages[i].Content {
			if b.Type == "tool_use" && !answered[b.ID] {
				last.Content = append(last.Content, anthropic.Block{Type: "tool_result", ToolUseID: b.ID, Content: []anthropic.Block{{Type: "text", Text: "later"}}})
			}
		}
		break
	}
	req.Messages[len(req.Messages)-1] = last
	b, _ := json.Marshal(req)
	strictAnthropic(t, b, history.ThinkingUnknown)
	return req
}

// A context that breaks a provider rule is answered with a 500, never sent,
// and counted on /metrics.
func TestContextBreakingAProviderRuleIs500AndCounted(t *testing.T) {
	f := newFixture(t, nil)
	f.create(t, "s1")
	ctx := context.Background()
	if _, err := f.client.AppendMessages(ctx, "s1", api.AppendMessagesRequest{Messages: []api.Message{text(api.RoleAssistant, "Hello!"), text(api.RoleUser, "hi")}}); err != nil {
		t.Fatal(err)
	}
	_, err := f.client.ContextRaw(ctx, "s1", api.FormatAnthropic)
	if api.ErrorCode(err) != api.Internal {
		t.Fatalf("err = %v (%s), want internal", err, api.ErrorCode(err))
	}
	m, err := f.client.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(m), MetricProviderRule+`{rule="`+history.RuleFirstNotUser+`"} 1`) {
		t.Fatalf("metrics lack the violation:\n%s", m)
	}
}
