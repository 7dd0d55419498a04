package responses

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/wire/openai"
)

// Item is the part of a Responses API input or output item the conversion
// reads. An item is one of: a message (role user, assistant, developer or
// system), a function_call or custom_tool_call and their _output, a
// reasoning item, or anything else (Codex's additional_tools, web searches,
// items of later API versions).
type Item struct {
	Type    string          `json:"type"`
	Role    string          `json:"role,omitempty"`
	Content json.RawMessage `json:"content,omitempty"`
	// function_call, custom_tool_call and their outputs.
	CallID    string          `json:"call_id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Arguments *string         `json:"arguments,omitempty"`
	Input     *string         `json:"input,omitempty"`
	Output    json.RawMessage `json:"output,omitempty"`
	// An assistant message's phase ("commentary", "final_answer").
	Phase string `json:"phase,omitempty"`
	// reasoning.
	Summary          json.RawMessage `json:"summary,omitempty"`
	EncryptedContent *string         `json:"encrypted_content,omitempty"`
}

// itemKind sorts items into the canonical roles.
func (it *Item) assistantSide() bool {
	switch it.Type {
	case "function_call", "custom_tool_call", "reasoning", "compaction":
		return true
	case "message", "":
		return it.Role == "assistant"
	}
	return hostedCall(it.Type)
}

// hostedCall reports whether an item type is a call the model made in its
// answer that ctxd has no model of (web_search_call, file_search_call,
// code_interpreter_call, image_generation_call, mcp_call, tool_search_call,
// local_shell_call, …, and mcp_list_tools / mcp_approval_request): part of
// the assistant's turn, kept whole in it, so a reasoning item before it
// stays with the output it led to. Their outputs (…_call_output,
// mcp_approval_response) are the client's.
func hostedCall(typ string) bool {
	switch typ {
	case "function_call_output", "custom_tool_call_output":
		return false
	case "mcp_list_tools", "mcp_approval_request":
		return true
	}
	return strings.HasSuffix(typ, "_call")
}

// IsPrefixItem reports whether a raw input item belongs to the request's
// fixed prefix rather than to the conversation: a developer or system
// message, or Codex's additional_tools item (the tools of its code mode).
// The proxy keeps the leading run of such items verbatim, ahead of the
// assembled conversation, so no compaction can drop the agent's
// instructions or tools.
func IsPrefixItem(raw json.RawMessage) bool {
	var it Item
	if json.Unmarshal(raw, &it) != nil {
		return false
	}
	switch it.Type {
	case "additional_tools":
		return true
	case "message", "":
		return it.Role == "developer" || it.Role == "system"
	}
	return false
}

// ParseItems converts Responses input items items[from:] to canonical
// messages (docs/design.md §2), without loss:
//
//   - a user message becomes a user message (input_text as text,
//     input_image data URLs as images);
//   - consecutive assistant-side items (assistant messages, function_call,
//     custom_tool_call, reasoning, compaction) become one assistant message: output_text
//     as text; a function call as a tool call whose input is the arguments'
//     bytes when they are a compact JSON object (else the arguments as a
//     string under RawArgumentsKey, rendered back byte for byte); a custom tool call as a tool call whose input
//     is {"input": "<its free-form text>"}; a reasoning item as a thinking block (its summary
//     texts joined) whose signature is the item's exact bytes, so its
//     encrypted_content goes back verbatim — redacted_thinking when it has
//     no summary; a compaction item (server-side compaction) as an opaque
//     compaction block whose Data is the item's exact bytes;
//   - function_call_output / custom_tool_call_output become tool messages;
//   - a call the provider ran itself (hostedCall: a web search, an MCP
//     call) is a json block {"responses_item": <the item's bytes>} of the
//     assistant message it belongs to, rendered back as it came;
//   - a compaction_trigger item (the client asking the provider to
//     compact, CompactionTrigger) becomes nothing: it is a request, not
//     a part of the conversation, so it is never stored; the proxy sends
//     the client's own trigger last (TrailingTrigger);
//   - any other item (a developer message inside the conversation, a
//     hosted call's output from the client, an item of a later API
//     version) becomes a user message with one such json block, rendered
//     back as it came.
//
// Errors name the item: "input[i].field: problem".
func ParseItems(items []json.RawMessage, from int) ([]history.Message, error) {
	names := map[string]string{}
	for i := max(0, from-64); i < from; i++ {
		// Only calls name a tool (an output's text cannot hold an
		// unescaped "name" key): the rest are not decoded.
		if !bytes.Contains(items[i], []byte(`"name"`)) {
			continue
		}
		var it struct {
			CallID string `json:"call_id"`
			Name   string `json:"name"`
		}
		if json.Unmarshal(items[i], &it) == nil && it.CallID != "" && it.Name != "" {
			names[it.CallID] = it.Name
		}
	}
	var out []history.Message
	cur := -1 // the assistant message being collected
	for i := from; i < len(items); i++ {
		raw := items[i]
		var it Item
		if err := json.Unmarshal(raw, &it); err != nil {
			return nil, fmt.Errorf("input[%d]: %w", i, err)
		}
		if it.Type == CompactionTrigger {
			// A request to the provider, not a turn: never stored.
			continue
		}
		if !it.assistantSide() {
			cur = -1
		} else if cur < 0 {
			out = append(out, history.Message{Role: history.RoleAssistant})
			cur = len(out) - 1
		}
		switch {
		case it.Type == "function_call":
			if it.CallID == "" {
				return nil, fmt.Errorf("input[%d].call_id: missing", i)
			}
			args := ""
			if it.Arguments != nil {
				args = *it.Arguments
			}
			names[it.CallID] = it.Name
			in := openai.ArgumentsInput(args)
			out[cur].Content = append(out[cur].Content, history.Block{Type: history.BlockToolCall, ID: it.CallID, Name: it.Name, Input: in})
		case it.Type == "custom_tool_call":
			if it.CallID == "" {
				return nil, fmt.Errorf("input[%d].call_id: missing", i)
			}
			text := ""
			if it.Input != nil {
				text = *it.Input
			}
			s, _ := json.Marshal(text)
			in := history.ObjectInput(s)
			names[it.CallID] = it.Name
			out[cur].Content = append(out[cur].Content, history.Block{Type: history.BlockToolCall, ID: it.CallID, Name: it.Name, Input: in})
		case it.Type == "reasoning":
			text, err := summaryText(it.Summary)
			if err != nil {
				return nil, fmt.Errorf("input[%d].summary: %w", i, err)
			}
			b := history.Block{Type: history.BlockThinking, Text: text, Signature: string(raw)}
			if text == "" {
				b = history.Block{Type: history.BlockRedactedThinking, Data: string(raw)}
			}
			out[cur].Content = append(out[cur].Content, b)
		case it.Type == "compaction":
			// Server-side compaction: an opaque summary of everything
			// before it, sent back byte for byte (history.BlockCompaction).
			out[cur].Content = append(out[cur].Content, history.Block{Type: history.BlockCompaction, Data: string(raw)})
		case it.Type == "function_call_output" || it.Type == "custom_tool_call_output":
			if it.CallID == "" {
				return nil, fmt.Errorf("input[%d].call_id: missing", i)
			}
			blocks, err := openai.OutputBlocks(it.Output)
			if err != nil {
				return nil, fmt.Errorf("input[%d].output: %w", i, err)
			}
			out = append(out, history.Message{Role: history.RoleTool, ToolCallID: it.CallID, ToolName: names[it.CallID], Content: blocks})
		case (it.Type == "message" || it.Type == "") && (it.Role == "user" || it.Role == "assistant"):
			blocks, err := openai.MessageBlocks(it.Content)
			if err != nil {
				return nil, fmt.Errorf("input[%d].content: %w", i, err)
			}
			if it.Role == "assistant" {
				for j := range blocks {
					if blocks[j].Type == history.BlockText {
						blocks[j].Phase = it.Phase
					}
				}
				out[cur].Content = append(out[cur].Content, blocks...)
				continue
			}
			if len(blocks) == 0 {
				blocks = []history.Block{{Type: history.BlockText, Text: ""}}
			}
			out = append(out, history.Message{Role: history.RoleUser, Content: blocks})
		case hostedCall(it.Type):
			env, _ := openai.Marshal(struct {
				Item json.RawMessage `json:"responses_item"`
			}{raw})
			out[cur].Content = append(out[cur].Content, history.Block{Type: history.BlockJSON, JSON: env})
		default:
			env, _ := openai.Marshal(struct {
				Item json.RawMessage `json:"responses_item"`
			}{raw})
			out = append(out, history.Message{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockJSON, JSON: env}}})
		}
	}
	return out, nil
}

// CompactionTrigger is the type of the input item with which a client asks
// the provider to compact the conversation before answering
// ({"type":"compaction_trigger"}, last in the input): the answer is one
// compaction output item.
const CompactionTrigger = "compaction_trigger"

// TrailingTrigger returns the last of items when it is a
// compaction_trigger item (its bytes as the client sent them), else nil.
func TrailingTrigger(items []json.RawMessage) json.RawMessage {
	if len(items) == 0 {
		return nil
	}
	last := items[len(items)-1]
	if !bytes.Contains(last, []byte(CompactionTrigger)) {
		return nil
	}
	var it struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(last, &it) != nil || it.Type != CompactionTrigger {
		return nil
	}
	return last
}

// TurnMetadataHeader is the header in which Codex describes each request:
// a JSON object whose request_kind says what the request is ("turn", or
// "compaction" when Codex compacts its own conversation), with the turn's
// id and workspace details.
const TurnMetadataHeader = "X-Codex-Turn-Metadata"

// RequestKindCompaction is the request_kind of Codex's own compaction
// request (TurnMetadataHeader).
const RequestKindCompaction = "compaction"

// ClientCompacting reports whether a Responses request is the client
// compacting its own conversation: its turn metadata (the
// TurnMetadataHeader value, "" when absent) says request_kind
// "compaction", or its input ends with a compaction_trigger item (the
// client asks the provider to compact). A proxy must not compact such a
// request itself, before sending it or on its refusal: the client's
// compaction would race its own.
func ClientCompacting(turnMetadata string, items []json.RawMessage) bool {
	if TrailingTrigger(items) != nil {
		return true
	}
	if !strings.Contains(turnMetadata, RequestKindCompaction) {
		return false
	}
	var md struct {
		RequestKind string `json:"request_kind"`
	}
	return json.Unmarshal([]byte(turnMetadata), &md) == nil && md.RequestKind == RequestKindCompaction
}

// summaryText joins the texts of a reasoning summary.
func summaryText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", err
	}
	var texts []string
	for _, p := range parts {
		if p.Text != "" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n\n"), nil
}

// RenderItems renders canonical messages as Responses input items, the
// inverse of ParseItems: what ParseItems read renders to items that mean
// the same (reasoning and unknown items byte for byte). custom names the
// request's free-form tools (CustomToolNames): a call of one whose input
// is {"input": "<text>"} renders as a custom_tool_call, and its result as
// a custom_tool_call_output. Messages ctxd wrote (a summary, a ledger, a
// stub) render as plain user or assistant messages.
func RenderItems(msgs []history.Message, custom map[string]bool) []json.RawMessage {
	var out []json.RawMessage
	customCall := map[string]bool{}
	add := func(v any) {
		b, _ := openai.Marshal(v)
		out = append(out, b)
	}
	for i := range msgs {
		m := &msgs[i]
		switch m.Role {
		case history.RoleAssistant:
			var text []json.RawMessage
			phase := "" // of the message item being collected
			flush := func() {
				if len(text) == 0 {
					return
				}
				add(struct {
					Type    string            `json:"type"`
					Role    string            `json:"role"`
					Content []json.RawMessage `json:"content"`
					Phase   string            `json:"phase,omitempty"`
				}{"message", "assistant", text, phase})
				text = nil
			}
			for _, b := range m.Content {
				if b.Type == history.BlockText && b.Phase != phase {
					// Texts of another phase are another message item.
					flush()
					phase = b.Phase
				}
				switch b.Type {
				case history.BlockText:
					t, _ := openai.Marshal(map[string]any{"type": "output_text", "text": b.Text})
					text = append(text, t)
				case history.BlockJSON:
					if item := keptItem(&history.Message{Content: []history.Block{b}}); item != nil {
						flush()
						out = append(out, item) // an item of the turn kept whole
						continue
					}
					if isItem(b.JSON) {
						text = append(text, b.JSON) // a part kept whole
						continue
					}
					t, _ := openai.Marshal(map[string]any{"type": "output_text", "text": string(b.JSON)})
					text = append(text, t)
				case history.BlockThinking, history.BlockRedactedThinking:
					flush()
					raw := b.Signature
					if b.Type == history.BlockRedactedThinking {
						raw = b.Data
					}
					if isObject(raw) {
						out = append(out, json.RawMessage(raw))
						continue
					}
					// Reasoning not read from this format (an imported
					// transcript): its text as a summary, the signature as
					// the encrypted content.
					r := map[string]any{"type": "reasoning", "summary": []map[string]any{}}
					if b.Text != "" {
						r["summary"] = []map[string]any{{"type": "summary_text", "text": b.Text}}
					}
					if raw != "" {
						r["encrypted_content"] = raw
					}
					add(r)
				case history.BlockCompaction:
					flush()
					if isObject(b.Data) {
						out = append(out, json.RawMessage(b.Data))
					} else if b.Text != "" {
						// Another provider's readable summary.
						t, _ := openai.Marshal(map[string]any{"type": "output_text", "text": b.Text})
						text = append(text, t)
					}
				case history.BlockToolCall:
					flush()
					var in struct {
						Input *string `json:"input"`
					}
					var fields map[string]json.RawMessage
					if custom[b.Name] && json.Unmarshal(b.Input, &fields) == nil && len(fields) == 1 && json.Unmarshal(b.Input, &in) == nil && in.Input != nil {
						s := *in.Input
						customCall[b.ID] = true
						add(struct {
							Type   string `json:"type"`
							CallID string `json:"call_id"`
							Name   string `json:"name"`
							Input  string `json:"input"`
						}{"custom_tool_call", b.ID, b.Name, s})
						continue
					}
					args := openai.Arguments(b.Input)
					add(struct {
						Type      string `json:"type"`
						CallID    string `json:"call_id"`
						Name      string `json:"name"`
						Arguments string `json:"arguments"`
					}{"function_call", b.ID, b.Name, args})
				}
			}
			flush()
		case history.RoleTool:
			typ := "function_call_output"
			if customCall[m.ToolCallID] {
				typ = "custom_tool_call_output"
			}
			var output any
			if len(m.Content) == 1 && m.Content[0].Type == history.BlockText || m.IsError {
				text := openai.PlainText(m.Content)
				if m.IsError {
					text = "[error] " + text
				}
				output = text
			} else {
				output = inputParts(m.Content)
			}
			add(struct {
				Type   string `json:"type"`
				CallID string `json:"call_id"`
				Output any    `json:"output"`
			}{typ, m.ToolCallID, output})
		default:
			if item := keptItem(m); item != nil {
				out = append(out, item)
				continue
			}
			role := "user"
			if m.Role == history.RoleSystem {
				role = "system"
			}
			add(struct {
				Type    string            `json:"type"`
				Role    string            `json:"role"`
				Content []json.RawMessage `json:"content"`
			}{"message", role, inputParts(m.Content)})
		}
	}
	return out
}

// inputParts renders blocks as input content parts: input_text,
// input_image for an inline image, and a part Content kept whole as it
// came.
func inputParts(blocks []history.Block) []json.RawMessage {
	parts := make([]json.RawMessage, 0, len(blocks))
	for _, b := range blocks {
		var v any
		switch {
		case b.Type == history.BlockImage && b.Data != "":
			v = map[string]any{"type": "input_image", "image_url": "data:" + b.MediaType + ";base64," + b.Data}
		case b.Type == history.BlockJSON && isItem(b.JSON):
			parts = append(parts, b.JSON)
			continue
		default:
			t := openai.BlockText(b)
			if t == "" && b.Type != history.BlockText {
				continue
			}
			v = map[string]any{"type": "input_text", "text": t}
		}
		raw, _ := openai.Marshal(v)
		parts = append(parts, raw)
	}
	return parts
}

// keptItem returns the item a message holds whole (ParseItems' envelope
// {"responses_item": <item>}), nil for any other message.
func keptItem(m *history.Message) json.RawMessage {
	if len(m.Content) != 1 || m.Content[0].Type != history.BlockJSON || !bytes.HasPrefix(m.Content[0].JSON, []byte(`{"responses_item":`)) {
		return nil
	}
	var env struct {
		Item json.RawMessage `json:"responses_item"`
	}
	if json.Unmarshal(m.Content[0].JSON, &env) != nil || !isItem(env.Item) {
		return nil
	}
	return env.Item
}

// isObject reports whether s is a JSON object's text.
func isObject(s string) bool {
	return strings.HasPrefix(s, "{") && json.Valid([]byte(s))
}

// isItem reports whether raw is a JSON object with a "type" member (an item
// ParseItems kept verbatim).
func isItem(raw json.RawMessage) bool {
	var it struct {
		Type string `json:"type"`
	}
	return len(raw) > 0 && raw[0] == '{' && json.Unmarshal(raw, &it) == nil && it.Type != ""
}

// CustomToolNames returns the names of the free-form ("custom") tools
// declared in raw JSON values — a request's tools array, Codex's
// additional_tools item — at any depth (Codex nests them in a namespace).
func CustomToolNames(raws ...json.RawMessage) map[string]bool {
	out := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if x["type"] == "custom" {
				if n, ok := x["name"].(string); ok {
					out[n] = true
				}
			}
			for _, c := range x {
				walk(c)
			}
		case []any:
			for _, c := range x {
				walk(c)
			}
		}
	}
	for _, raw := range raws {
		if !bytes.Contains(raw, []byte(`"custom"`)) {
			continue
		}
		var v any
		if json.Unmarshal(raw, &v) == nil {
			walk(v)
		}
	}
	return out
}
