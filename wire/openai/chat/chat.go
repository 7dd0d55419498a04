package chat

import (
	"encoding/json"
	"strings"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/wire/openai"
)

// ChatRequest is the body of an OpenAI Chat Completions request
// (POST /v1/chat/completions), the dialect vLLM, llama.cpp server, Ollama and
// OpenRouter also speak. RenderChat fills Messages and Tools; Model and the
// output cap are set by whoever sends it. At most one of MaxTokens and
// MaxCompletionTokens is set: api.openai.com wants max_completion_tokens
// (its reasoning models reject max_tokens), compatible servers know
// max_tokens.
type ChatRequest struct {
	Model               string        `json:"model,omitempty"`
	Messages            []ChatMessage `json:"messages"`
	Tools               []Tool        `json:"tools,omitempty"`
	MaxTokens           uint64        `json:"max_tokens,omitempty"`
	MaxCompletionTokens uint64        `json:"max_completion_tokens,omitempty"`
}

// ChatMessage is one chat message: role "system", "user", "assistant" or
// "tool". Content is a JSON string, an array of content parts (user messages
// with images), or null (an assistant message with only tool calls).
type ChatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []ToolCall      `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
}

// ToolCall is one function call of an assistant message. Arguments is
// the call's input as a JSON string, as the API requires.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall is the function of a tool call.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Tool is one function tool definition.
type Tool struct {
	Type     string   `json:"type"`
	Function Function `json:"function"`
}

// Function is the function of a tool definition; Parameters is its
// JSON Schema.
type Function struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
}

// contentPart is one content part of a user message.
type contentPart struct {
	Type     string    `json:"type"`
	Text     string    `json:"text,omitempty"`
	ImageURL *imageURL `json:"image_url,omitempty"`
}

type imageURL struct {
	URL string `json:"url"`
}

// RenderChat renders a system prompt, tool definitions and canonical
// messages (docs/design.md §2) as a Chat Completions request:
//
//   - the system prompt is a leading "system" message;
//   - tool definitions become function tools (a missing schema becomes
//     {"type":"object","properties":{}});
//   - an assistant message becomes text content (its text blocks joined by a
//     blank line; null when it has none) plus tool_calls with the input as a
//     JSON string; thinking and redacted_thinking blocks are dropped, as
//     Chat Completions has no place for them;
//   - a tool message becomes a "tool" message with its tool_call_id; its
//     content is a string (text blocks joined, json blocks as JSON, images
//     as a line naming their media type and size, since tool messages carry
//     text only); an error result is prefixed "[error] " because the API has
//     no is_error flag;
//   - a user message becomes a string, or content parts (text and
//     data-URL image_url) when it holds an image.
//
// Messages are rendered in order, one for one. RenderChat does not
// validate the history; see CheckClosed.
func RenderChat(system string, tools []history.ToolDef, msgs []history.Message) ChatRequest {
	out := ChatRequest{Messages: make([]ChatMessage, 0, len(msgs)+1)}
	for _, t := range tools {
		schema := t.InputSchema
		if len(schema) == 0 {
			schema = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		out.Tools = append(out.Tools, Tool{Type: "function",
			Function: Function{Name: t.Name, Description: t.Description, Parameters: schema}})
	}
	if system != "" {
		out.Messages = append(out.Messages, ChatMessage{Role: "system", Content: openai.JSONString(system)})
	}
	for i := range msgs {
		m := &msgs[i]
		switch m.Role {
		case history.RoleAssistant:
			om := ChatMessage{Role: "assistant"}
			var texts []string
			for _, b := range m.Content {
				switch b.Type {
				case history.BlockText, history.BlockCompaction:
					texts = append(texts, b.Text)
				case history.BlockJSON:
					texts = append(texts, string(b.JSON))
				case history.BlockToolCall:
					args := openai.Arguments(b.Input)
					om.ToolCalls = append(om.ToolCalls, ToolCall{ID: b.ID, Type: "function",
						Function: FunctionCall{Name: b.Name, Arguments: args}})
				}
			}
			switch {
			case len(texts) > 0:
				om.Content = openai.JSONString(strings.Join(texts, "\n\n"))
			case len(om.ToolCalls) > 0:
				om.Content = json.RawMessage("null")
			default:
				om.Content = openai.JSONString("")
			}
			out.Messages = append(out.Messages, om)
		case history.RoleTool:
			text := openai.PlainText(m.Content)
			if m.IsError {
				text = "[error] " + text
			}
			out.Messages = append(out.Messages, ChatMessage{Role: "tool", ToolCallID: m.ToolCallID, Content: openai.JSONString(text)})
		case history.RoleSystem:
			out.Messages = append(out.Messages, ChatMessage{Role: "system", Content: openai.JSONString(openai.PlainText(m.Content))})
		default:
			out.Messages = append(out.Messages, ChatMessage{Role: "user", Content: userContent(m.Content)})
		}
	}
	return out
}

// userContent renders a user message's blocks: a string, or content
// parts when an inline image is present.
func userContent(blocks []history.Block) json.RawMessage {
	hasImage := false
	for _, b := range blocks {
		if b.Type == history.BlockImage && b.Data != "" {
			hasImage = true
		}
	}
	if !hasImage {
		return openai.JSONString(openai.PlainText(blocks))
	}
	parts := make([]contentPart, 0, len(blocks))
	for _, b := range blocks {
		switch {
		case b.Type == history.BlockImage && b.Data != "":
			parts = append(parts, contentPart{Type: "image_url",
				ImageURL: &imageURL{URL: "data:" + b.MediaType + ";base64," + b.Data}})
		default:
			if t := openai.BlockText(b); t != "" {
				parts = append(parts, contentPart{Type: "text", Text: t})
			}
		}
	}
	raw, _ := json.Marshal(parts) // plain structs: cannot fail
	return raw
}
