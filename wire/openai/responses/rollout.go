package responses

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/rawjson"
	"github.com/ctxd/ctxd/wire/openai"
)

// Recorded items: Codex CLI writes each Responses item of a conversation
// to its rollout file as a response_item line's payload. RecordedItem
// converts one such item to canonical form (docs/design.md §2); which message
// it joins — consecutive assistant-side items make one assistant message,
// closed by a user message, a tool output or the response's usage — is the
// caller's (transcript's Codex importer keeps that state with the
// rollout's other lines).

// ItemSide says where a recorded item belongs in the conversation.
type ItemSide int

// The sides of a recorded item.
const (
	// SideNone: not conversation content (ghost_snapshot, web_search_call,
	// an unknown item).
	SideNone ItemSide = iota
	// SideAssistant: blocks of the response being collected (an assistant
	// message, reasoning, a function, custom tool or local shell call).
	SideAssistant
	// SideUser: a user message.
	SideUser
	// SideTool: a tool output, answering CallID.
	SideTool
	// SideInstructions: a developer or system message (Text), not
	// conversation.
	SideInstructions
)

// Recorded is one recorded item in canonical form.
type Recorded struct {
	Side ItemSide
	// Blocks are the item's content (SideAssistant, SideUser, SideTool).
	Blocks []history.Block
	// CallID and IsError describe a tool output.
	CallID  string
	IsError bool
	// Text is a developer or system message's text blocks joined by a
	// blank line.
	Text string
}

// recordedItem holds the payload fields RecordedItem reads.
type recordedItem struct {
	Type string `json:"type"`
	// message
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	// reasoning
	Summary          json.RawMessage `json:"summary"`
	EncryptedContent string          `json:"encrypted_content"`
	// function_call, custom_tool_call, local_shell_call and their outputs
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Input     json.RawMessage `json:"input"`
	Action    json.RawMessage `json:"action"`
	CallID    string          `json:"call_id"`
	Output    json.RawMessage `json:"output"`
}

// RecordedItem converts one recorded Responses item (a rollout
// response_item payload):
//
//   - message (or an item with a role and no type, an EasyInputMessage):
//     role assistant → SideAssistant, user → SideUser (content
//     as Content reads it), developer/system → SideInstructions;
//   - reasoning → a thinking block (summary texts joined, the
//     encrypted_content as its signature), or redacted_thinking holding the
//     encrypted_content when there is no summary text; nothing when it has
//     neither;
//   - function_call → a tool call whose input is the arguments' JSON (an
//     arguments string that is not JSON is kept as a JSON string);
//     custom_tool_call → a tool call whose input is the free-form input as
//     a JSON string; local_shell_call → a tool call named "local_shell"
//     whose input is its action;
//   - *_output → SideTool with the output: a string, content parts, or an
//     object {content, success} whose success false marks an error;
//   - anything else → SideNone.
//
// Errors: the payload is not JSON, a call without call_id, content or an
// output that does not decode.
func RecordedItem(payload json.RawMessage) (Recorded, error) {
	var p recordedItem
	if err := json.Unmarshal(payload, &p); err != nil {
		return Recorded{}, fmt.Errorf("payload: %w", err)
	}
	if p.Type == "" && p.Role != "" {
		p.Type = "message" // an EasyInputMessage of a request's input
	}
	assistant := func(b history.Block) (Recorded, error) {
		return Recorded{Side: SideAssistant, Blocks: []history.Block{b}}, nil
	}
	switch p.Type {
	case "message":
		content, err := openai.Content(p.Content)
		if err != nil {
			return Recorded{}, err
		}
		switch p.Role {
		case "assistant":
			return Recorded{Side: SideAssistant, Blocks: content}, nil
		case "user":
			return Recorded{Side: SideUser, Blocks: content}, nil
		}
		var texts []string
		for _, b := range content {
			if b.Type == history.BlockText {
				texts = append(texts, b.Text)
			}
		}
		return Recorded{Side: SideInstructions, Text: strings.Join(texts, "\n\n")}, nil
	case "reasoning":
		var summary []struct {
			Text string `json:"text"`
		}
		if len(p.Summary) > 0 && string(p.Summary) != "null" {
			if err := json.Unmarshal(p.Summary, &summary); err != nil {
				return Recorded{}, fmt.Errorf("reasoning summary: %w", err)
			}
		}
		var texts []string
		for _, s := range summary {
			if s.Text != "" {
				texts = append(texts, s.Text)
			}
		}
		switch text := strings.Join(texts, "\n\n"); {
		case text != "":
			return assistant(history.Block{Type: history.BlockThinking, Text: text, Signature: p.EncryptedContent})
		case p.EncryptedContent != "":
			return assistant(history.Block{Type: history.BlockRedactedThinking, Data: p.EncryptedContent})
		}
		return Recorded{Side: SideAssistant}, nil
	case "function_call":
		if p.CallID == "" {
			return Recorded{}, errors.New("function_call without call_id")
		}
		return assistant(history.Block{Type: history.BlockToolCall, ID: p.CallID, Name: p.Name, Input: stringOrJSON(p.Arguments, true)})
	case "custom_tool_call":
		if p.CallID == "" {
			return Recorded{}, errors.New("custom_tool_call without call_id")
		}
		// A free-form tool's input is raw text (apply_patch): kept as a
		// JSON string.
		return assistant(history.Block{Type: history.BlockToolCall, ID: p.CallID, Name: p.Name, Input: stringOrJSON(p.Input, false)})
	case "local_shell_call":
		if p.CallID == "" {
			return Recorded{}, errors.New("local_shell_call without call_id")
		}
		return assistant(history.Block{Type: history.BlockToolCall, ID: p.CallID, Name: "local_shell", Input: rawjson.Value(p.Action)})
	case "function_call_output", "custom_tool_call_output", "local_shell_call_output":
		blocks, isErr, err := recordedOutput(p.Output)
		if err != nil {
			return Recorded{}, err
		}
		return Recorded{Side: SideTool, Blocks: blocks, CallID: p.CallID, IsError: isErr}, nil
	}
	// ghost_snapshot (a git snapshot for undo), web_search_call and
	// unknown items are not conversation content.
	return Recorded{}, nil
}

// recordedOutput converts a tool output: a string (what the model saw),
// content parts, or an object {content, success} whose success false marks
// an error.
func recordedOutput(raw json.RawMessage) ([]history.Block, bool, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, false, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return nil, false, nil
		}
		return []history.Block{{Type: history.BlockText, Text: s}}, false, nil
	}
	if strings.HasPrefix(strings.TrimSpace(string(raw)), "[") {
		blocks, err := openai.Content(raw)
		return blocks, false, err
	}
	var obj struct {
		Content json.RawMessage `json:"content"`
		Success *bool           `json:"success"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, false, fmt.Errorf("output: %w", err)
	}
	blocks, err := openai.Content(obj.Content)
	if err != nil {
		return nil, false, fmt.Errorf("output %w", err)
	}
	return blocks, obj.Success != nil && !*obj.Success, nil
}

// stringOrJSON returns the input of a call given as a JSON string or as any
// JSON value. A string is parsed as JSON text when parse is set (function
// arguments; a string that is not JSON stays a JSON string), else kept as
// a JSON string (free-form input).
func stringOrJSON(raw json.RawMessage, parse bool) json.RawMessage {
	var str string
	if json.Unmarshal(raw, &str) == nil {
		if !parse {
			out, _ := json.Marshal(str)
			return out
		}
		return rawjson.Arguments(str)
	}
	return rawjson.Value(raw)
}
