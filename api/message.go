package api

import (
	"encoding/json"
	"time"
)

// The message model of docs/design.md §2 on the wire. These types have the same
// fields and JSON tags as package history's (Message, Block, Usage,
// ToolDef); a test keeps them in step. The server converts between the two.

// Role is who wrote a message (docs/design.md §2). One tool message answers
// exactly one tool call.
type Role string

// The roles. RoleSystem is a system message inside the history (Claude
// Code's reminders): it keeps its place and its role, text blocks only.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
	RoleSystem    Role = "system"
)

// BlockType names the kind of one content block.
type BlockType string

// The content block types of docs/design.md §2; the server rejects any other
// with Invalid.
const (
	// BlockText is plain text: Text.
	BlockText BlockType = "text"
	// BlockThinking is model reasoning: Text plus the provider's
	// Signature. Replayed byte-identical or not at all (docs/design.md §4).
	BlockThinking BlockType = "thinking"
	// BlockRedactedThinking is encrypted reasoning: Data is opaque.
	BlockRedactedThinking BlockType = "redacted_thinking"
	// BlockToolCall is one tool call of an assistant message: ID, Name and
	// Input (a JSON value, usually an object).
	BlockToolCall BlockType = "tool_call"
	// BlockImage is an image: MediaType plus base64 Data, or Artifact
	// ("artifact://<id>") once stored.
	BlockImage BlockType = "image"
	// BlockJSON is any other structured tool content, kept whole: JSON.
	BlockJSON BlockType = "json"
	// BlockCompaction is a provider's own compaction (Anthropic server-side
	// compaction): Text is the provider's summary. Only in assistant
	// messages; everything before it is no longer counted.
	BlockCompaction BlockType = "compaction"
)

// Block is one content block of a message. Which fields are set depends on
// Type; every other field is empty and omitted.
type Block struct {
	Type BlockType `json:"type"`
	// Text is the text of a text or thinking block.
	Text string `json:"text,omitempty"`
	// Signature is the provider's signature of a thinking block.
	Signature string `json:"signature,omitempty"`
	// Data is the opaque payload of a redacted_thinking block, or the
	// base64 bytes of an image.
	Data string `json:"data,omitempty"`
	// ID is the tool call id of a tool_call block.
	ID string `json:"id,omitempty"`
	// Name is the tool name of a tool_call block.
	Name string `json:"name,omitempty"`
	// Input is the JSON input of a tool_call block.
	Input json.RawMessage `json:"input,omitempty"`
	// MediaType is the MIME type of an image block: image/jpeg,
	// image/png, image/gif or image/webp (what the providers accept; any
	// other is refused with Invalid).
	MediaType string `json:"media_type,omitempty"`
	// Artifact is an "artifact://<id>" reference replacing an image's Data.
	Artifact string `json:"artifact,omitempty"`
	// JSON is the value of a json block.
	JSON json.RawMessage `json:"json,omitempty"`
	// Raw is the client's own bytes of a text or image block of a user
	// message, kept so that a rewrite of another block sends this one as the
	// client sent it; empty otherwise.
	Raw json.RawMessage `json:"raw,omitempty"`
	// Phase is the phase of the Responses API assistant message item a
	// text block came from ("commentary", "final_answer"); empty otherwise.
	Phase string `json:"phase,omitempty"`
}

// Usage is what a provider reported for the request that produced an
// assistant message, in tokens: ground truth for the size of that request
// (docs/design.md §2 "Tokens"). The post-check compares input + cache creation
// + cache read + output with the threshold (docs/design.md §5.1).
type Usage struct {
	InputTokens              uint64 `json:"input_tokens"`
	CacheCreationInputTokens uint64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     uint64 `json:"cache_read_input_tokens"`
	OutputTokens             uint64 `json:"output_tokens"`
	// CacheCreation1hInputTokens is the part of CacheCreationInputTokens
	// written with the prompt cache's 1-hour lifetime.
	CacheCreation1hInputTokens uint64 `json:"cache_creation_1h_input_tokens,omitempty"`
	// ClearedInputTokens is what the provider's own context editing
	// cleared from the request before counting it (Anthropic's
	// applied_edits); the counts above are of the request less these.
	ClearedInputTokens uint64 `json:"cleared_input_tokens,omitempty"`
}

// Message is one message of a conversation (docs/design.md §2).
type Message struct {
	// Seq is the message's position in its session's event log, from 1.
	// Leave it 0 when appending: the server assigns it and refuses a
	// message that carries one (Invalid on messages[i].seq). Synthetic messages
	// of an assembled context (pinned context, the summary) have Seq 0.
	Seq  uint64 `json:"seq,omitempty"`
	Role Role   `json:"role"`
	// Content is the message's blocks, in order.
	Content []Block `json:"content"`
	// ToolCallID is, on a tool message, the id of the call it answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// ToolName is, on a tool message, the name of the tool that was called.
	ToolName string `json:"tool_name,omitempty"`
	// IsError marks a tool result that reports a failure.
	IsError bool `json:"is_error,omitempty"`
	// Joined marks a user message whose blocks the client sent in one wire
	// message with the tool results before it.
	Joined bool `json:"joined,omitempty"`
	// Time is when the message was written, UTC; zero on append means now.
	Time time.Time `json:"time,omitzero"`
	// Model is, on an assistant message, the model that wrote it.
	Model string `json:"model,omitempty"`
	// Usage is, on an assistant message, the provider's reported usage;
	// reporting it is what drives the post-check (docs/design.md §5.1).
	Usage *Usage `json:"usage,omitempty"`
	// Tokens is ctxd's o200k_base estimate of the message, before
	// calibration, set by the server. Ignored on append.
	Tokens uint64 `json:"tokens,omitempty"`
}

// ToolDef is one tool definition a session offers the model, provider
// neutral (close to Anthropic's): a name, a description and the JSON Schema
// of the input (docs/design.md §4).
type ToolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
}
