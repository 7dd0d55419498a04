package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/wire/openai"
)

// ChatIn is one Chat Completions message as read from the wire: the one
// decoding of a Chat message in ctxd. ParseChat (the proxy's requests)
// and transcript's importers of chat arrays and SWE-agent trajectories
// read it (DecodeChatIn); each maps it to the canonical model by its own
// rules (ParseChat keeps the bytes it must send back; an import keeps the
// values).
type ChatIn struct {
	Role string `json:"role"`
	// openai.Content is a string, null, or an array of parts (openai.Content reads it).
	Content   json.RawMessage `json:"content"`
	Name      string          `json:"name"`
	ToolCalls []ChatCallIn    `json:"tool_calls"`
	// ToolCallID names the call a tool message answers.
	ToolCallID string `json:"tool_call_id"`
	// ToolCallIDs: a SWE-agent history entry answering several calls.
	ToolCallIDs []string `json:"tool_call_ids"`
	// ReasoningContent is what compatible servers (vLLM, DeepSeek) return
	// as the model's reasoning.
	ReasoningContent string `json:"reasoning_content"`
	// Model is the model a recorded assistant message names.
	Model string `json:"model"`
}

// ChatCallIn is one tool call of a ChatIn. Arguments is kept raw: the wire
// sends a JSON string, some recorders store the object itself.
type ChatCallIn struct {
	ID       string `json:"id"`
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

// ArgumentsText returns the arguments as the wire sends them, the text of
// a JSON string ("" when they are absent or null); ok is false when they
// are another JSON value.
func (c ChatCallIn) ArgumentsText() (text string, ok bool) {
	if len(c.Function.Arguments) == 0 {
		return "", true
	}
	return text, json.Unmarshal(c.Function.Arguments, &text) == nil
}

// DecodeChatIn reads one Chat Completions message.
func DecodeChatIn(raw json.RawMessage) (ChatIn, error) {
	var m ChatIn
	err := json.Unmarshal(raw, &m)
	return m, err
}

// IsChatPrefix reports whether a raw Chat message belongs to the request's
// fixed prefix: a system or developer message. The proxy keeps the leading
// run of them verbatim ahead of the assembled conversation.
func IsChatPrefix(raw json.RawMessage) bool {
	var m struct {
		Role string `json:"role"`
	}
	return json.Unmarshal(raw, &m) == nil && (m.Role == "system" || m.Role == "developer")
}

// ParseChat converts Chat Completions messages msgs[from:] to canonical
// messages (docs/design.md §2): user → user (string or text / image_url parts),
// assistant → assistant (content as text, reasoning_content as a thinking
// block, tool_calls as tool calls whose input is the arguments' bytes when
// they are a compact JSON object, else the arguments under
// RawArgumentsKey, rendered back byte for byte), tool → tool message
// (tool name found from the calls before it). A system or developer message
// inside the conversation becomes a user message holding its bytes as a
// json block (rendered back as it came). Errors name the message:
// "messages[i].field: problem".
func ParseChat(msgs []json.RawMessage, from int) ([]history.Message, error) {
	names := map[string]string{}
	for i := max(0, from-64); i < from; i++ {
		if !bytes.Contains(msgs[i], []byte(`"tool_calls"`)) {
			continue // only assistant messages with calls name tools
		}
		var m struct {
			ToolCalls []ToolCall `json:"tool_calls"`
		}
		if json.Unmarshal(msgs[i], &m) == nil {
			for _, c := range m.ToolCalls {
				names[c.ID] = c.Function.Name
			}
		}
	}
	var out []history.Message
	for i := from; i < len(msgs); i++ {
		m, err := DecodeChatIn(msgs[i])
		if err != nil {
			return nil, fmt.Errorf("messages[%d]: %w", i, err)
		}
		switch m.Role {
		case "user":
			blocks, err := openai.MessageBlocks(m.Content)
			if err != nil {
				return nil, fmt.Errorf("messages[%d].content: %w", i, err)
			}
			if len(blocks) == 0 {
				blocks = []history.Block{{Type: history.BlockText}}
			}
			out = append(out, history.Message{Role: history.RoleUser, Content: blocks})
		case "assistant":
			var blocks []history.Block
			if m.ReasoningContent != "" {
				blocks = append(blocks, history.Block{Type: history.BlockThinking, Text: m.ReasoningContent})
			}
			text, err := openai.MessageBlocks(m.Content)
			if err != nil {
				return nil, fmt.Errorf("messages[%d].content: %w", i, err)
			}
			blocks = append(blocks, text...)
			for k, c := range m.ToolCalls {
				if c.ID == "" {
					return nil, fmt.Errorf("messages[%d].tool_calls[%d].id: missing", i, k)
				}
				args, ok := c.ArgumentsText()
				if !ok {
					return nil, fmt.Errorf("messages[%d].tool_calls[%d].function.arguments: not a JSON string", i, k)
				}
				in := openai.ArgumentsInput(args)
				names[c.ID] = c.Function.Name
				blocks = append(blocks, history.Block{Type: history.BlockToolCall, ID: c.ID, Name: c.Function.Name, Input: in})
			}
			if len(blocks) == 0 {
				blocks = []history.Block{{Type: history.BlockText}}
			}
			out = append(out, history.Message{Role: history.RoleAssistant, Content: blocks})
		case "tool":
			if m.ToolCallID == "" {
				return nil, fmt.Errorf("messages[%d].tool_call_id: missing", i)
			}
			blocks, err := openai.OutputBlocks(m.Content)
			if err != nil {
				return nil, fmt.Errorf("messages[%d].content: %w", i, err)
			}
			isErr := false
			if len(blocks) == 1 && blocks[0].Type == history.BlockText && strings.HasPrefix(blocks[0].Text, "[error] ") {
				blocks[0].Text, isErr = strings.TrimPrefix(blocks[0].Text, "[error] "), true
			}
			out = append(out, history.Message{Role: history.RoleTool, ToolCallID: m.ToolCallID, ToolName: names[m.ToolCallID], IsError: isErr, Content: blocks})
		case "system", "developer":
			out = append(out, history.Message{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockJSON, JSON: append(json.RawMessage(nil), msgs[i]...)}}})
		default:
			return nil, fmt.Errorf("messages[%d].role: %q is not system, developer, user, assistant or tool", i, m.Role)
		}
	}
	return out, nil
}

// RenderChatMessages renders canonical messages as Chat Completions
// messages (RenderChat without a system prompt or tools), the inverse of
// ParseChat: a user message holding one json block that is a system or
// developer message is rendered as those bytes.
func RenderChatMessages(msgs []history.Message) []json.RawMessage {
	r := RenderChat("", nil, msgs)
	out := make([]json.RawMessage, 0, len(r.Messages))
	for i, m := range r.Messages {
		src := &msgs[i]
		if src.Role == history.RoleUser && len(src.Content) == 1 && src.Content[0].Type == history.BlockJSON && IsChatPrefix(src.Content[0].JSON) {
			out = append(out, src.Content[0].JSON)
			continue
		}
		out = append(out, encodeChatMessage(m))
	}
	return out
}

// encodeChatMessage is Marshal(m) without re-validating the content, which
// RenderChat encoded itself: the same bytes, in the struct's field order
// (role, content, tool_calls, tool_call_id), at a fraction of the cost on
// a long tool result.
func encodeChatMessage(m ChatMessage) json.RawMessage {
	role, _ := openai.Marshal(m.Role)
	content := m.Content
	if len(content) == 0 {
		content = json.RawMessage("null")
	}
	b := make([]byte, 0, len(content)+64)
	b = append(b, `{"role":`...)
	b = append(b, role...)
	b = append(b, `,"content":`...)
	b = append(b, content...)
	if len(m.ToolCalls) > 0 {
		tc, _ := openai.Marshal(m.ToolCalls)
		b = append(b, `,"tool_calls":`...)
		b = append(b, tc...)
	}
	if m.ToolCallID != "" {
		id, _ := openai.Marshal(m.ToolCallID)
		b = append(b, `,"tool_call_id":`...)
		b = append(b, id...)
	}
	return append(b, '}')
}
