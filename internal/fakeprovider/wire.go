package fakeprovider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// MessagesRequest is the part of an Anthropic Messages request body the fake
// provider reads. Fields it does not read (metadata, context_management,
// temperature…) stay in the recorded raw body.
type MessagesRequest struct {
	Model     string          `json:"model"`
	MaxTokens int             `json:"max_tokens"`
	Stream    bool            `json:"stream"`
	System    json.RawMessage `json:"system,omitempty"`
	Tools     []Tool          `json:"tools,omitempty"`
	Messages  []Message       `json:"messages"`
	Thinking  *ThinkingConfig `json:"thinking,omitempty"`
}

// ThinkingConfig is the request's "thinking" field: Type is "enabled",
// "adaptive" or "disabled"; BudgetTokens is set with "enabled".
type ThinkingConfig struct {
	Type         string `json:"type"`
	BudgetTokens int    `json:"budget_tokens,omitempty"`
}

// Enabled reports whether the request turns thinking on ("enabled" or
// "adaptive"): the rules of docs/design.md §4a for thinking then apply.
func (r *MessagesRequest) Enabled() bool {
	return r.Thinking != nil && (r.Thinking.Type == "enabled" || r.Thinking.Type == "adaptive")
}

// Tool is one tool definition of the request: a client tool has a Name and an
// InputSchema (JSON Schema); a server tool has a Type such as
// "web_search_20250305".
type Tool struct {
	Name        string          `json:"name"`
	Type        string          `json:"type,omitempty"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
}

// Message is one entry of "messages". Role is "user" or "assistant" (Claude
// Code also sends "system" entries, which the fake accepts and ignores).
type Message struct {
	Role    string  `json:"role"`
	Content Content `json:"content"`
}

// Content is a message's content. A JSON string decodes to one text block
// with FromString set, so rules see one shape.
type Content struct {
	Blocks     []Block
	FromString bool
}

// UnmarshalJSON accepts a string or an array of blocks.
func (c *Content) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		c.Blocks = []Block{{Type: "text", Text: s}}
		c.FromString = true
		return nil
	}
	if string(b) == "null" {
		return nil
	}
	return json.Unmarshal(b, &c.Blocks)
}

// MarshalJSON writes the blocks (a string content as its one text block's
// string).
func (c Content) MarshalJSON() ([]byte, error) {
	if c.FromString && len(c.Blocks) == 1 {
		return json.Marshal(c.Blocks[0].Text)
	}
	if c.Blocks == nil {
		return []byte("[]"), nil
	}
	return json.Marshal(c.Blocks)
}

// Block is one content block of any type the fake reads: text, thinking,
// redacted_thinking, tool_use, tool_result, image (kept raw).
type Block struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	Thinking  string          `json:"thinking,omitempty"`
	Signature string          `json:"signature,omitempty"`
	Data      string          `json:"data,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
}

// ResultText returns the text of a tool_result block's content (a string, or
// the text blocks of an array joined by newlines).
func (b Block) ResultText() string {
	c := bytes.TrimSpace(b.Content)
	if len(c) == 0 {
		return ""
	}
	if c[0] == '"' {
		var s string
		_ = json.Unmarshal(c, &s)
		return s
	}
	var parts []Block
	if json.Unmarshal(c, &parts) != nil {
		return ""
	}
	var sb strings.Builder
	for i, p := range parts {
		if i > 0 {
			sb.WriteByte('\n')
		}
		sb.WriteString(p.Text)
	}
	return sb.String()
}

// SystemText returns the text of the request's system prompt (a string, or
// its text blocks joined by newlines).
func (r *MessagesRequest) SystemText() string {
	var c Content
	if len(r.System) == 0 || c.UnmarshalJSON(r.System) != nil {
		return ""
	}
	var sb strings.Builder
	for i, b := range c.Blocks {
		if i > 0 {
			sb.WriteByte('\n')
		}
		sb.WriteString(b.Text)
	}
	return sb.String()
}

// APIError is an error answer of the fake provider, in the shape of the real
// API: HTTP Status and the body {"type":"error","error":{"type":Type,
// "message":Message},"request_id":…}.
type APIError struct {
	Status  int
	Type    string
	Message string
}

// Error returns "<status> <type>: <message>".
func (e *APIError) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Type, e.Message) }

// Body renders the error as the real API's JSON body, with the given
// request id (left out when empty, as in older bodies).
func (e *APIError) Body(requestID string) []byte {
	type inner struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}
	v := struct {
		Type      string `json:"type"`
		Error     inner  `json:"error"`
		RequestID string `json:"request_id,omitempty"`
	}{"error", inner{e.Type, e.Message}, requestID}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // the real bodies keep ` < > & as they are
	_ = enc.Encode(v)
	return bytes.TrimRight(buf.Bytes(), "\n")
}

func invalidRequest(format string, args ...any) *APIError {
	return &APIError{Status: 400, Type: "invalid_request_error", Message: fmt.Sprintf(format, args...)}
}
