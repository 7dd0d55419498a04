package server

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/summarizer"
)

// strictAnthropic is a strict fake Anthropic Messages API: it reads a
// request body as ?format=anthropic serves it, turns it back into canonical
// messages (each tool_result block a tool message) and refuses it, failing
// the test with the provider's own words, when it breaks a rule the real API
// enforces (history.CheckRequest, DESIGN.md §4a). thinking is the request's
// thinking setting.
func strictAnthropic(t *testing.T, body []byte, thinking history.Thinking) summarizer.AnthropicRequest {
	t.Helper()
	var req summarizer.AnthropicRequest
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatalf("strict provider: not a Messages request: %v: %s", err, body)
	}
	var msgs []history.Message
	for _, m := range req.Messages {
		var rest []history.Block
		for _, b := range m.Content {
			switch b.Type {
			case "tool_result":
				tm := history.Message{Role: history.RoleTool, ToolCallID: b.ToolUseID, IsError: b.IsError}
				for _, c := range b.Content {
					tm.Content = append(tm.Content, history.Block{Type: history.BlockText, Text: c.Text})
				}
				msgs = append(msgs, tm)
			case "thinking":
				rest = append(rest, history.Block{Type: history.BlockThinking, Text: b.Thinking, Signature: b.Signature})
			case "redacted_thinking":
				rest = append(rest, history.Block{Type: history.BlockRedactedThinking, Data: b.Data})
			case "tool_use":
				rest = append(rest, history.Block{Type: history.BlockToolCall, ID: b.ID, Name: b.Name, Input: b.Input})
			case "image":
				rest = append(rest, history.Block{Type: history.BlockImage})
			default:
				rest = append(rest, history.Block{Type: history.BlockText, Text: b.Text})
			}
		}
		if len(rest) > 0 || len(m.Content) == 0 {
			msgs = append(msgs, history.Message{Role: history.Role(m.Role), Content: rest})
		}
	}
	if vs := history.CheckRequest(msgs, history.Rules{Thinking: thinking}); len(vs) > 0 {
		t.Fatalf("strict provider: 400 invalid_request_error: %v\nrequest: %s", vs, body)
	}
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

// The case over HTTP (issue 13 point 2): claude-sonnet-4-5, default
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
// (issue 13 point 8), and the context stays one the provider accepts.
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
func strictAnthropicOpen(t *testing.T, body []byte) summarizer.AnthropicRequest {
	t.Helper()
	var req summarizer.AnthropicRequest
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
				last.Content = append(last.Content, summarizer.AnthropicBlock{Type: "tool_result", ToolUseID: b.ID, Content: []summarizer.AnthropicBlock{{Type: "text", Text: "later"}}})
			}
		}
		break
	}
	req.Messages[len(req.Messages)-1] = last
	b, _ := json.Marshal(req)
	strictAnthropic(t, b, history.ThinkingUnknown)
	return req
}
