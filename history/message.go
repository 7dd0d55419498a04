// Package history owns ctxd's canonical, provider-neutral message model
// (docs/design.md §2): messages and their content blocks, tool-call groups, open
// tool rounds, validation of appends, and the token estimate kept with each
// message. It knows nothing of HTTP or storage.
package history

import (
	"encoding/json"
	"math"
	"time"
)

// Role is who wrote a message. One tool message answers exactly one tool call
// (docs/design.md §2).
type Role string

// The three roles of the canonical model.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
	// RoleSystem is a system message inside the history (Claude Code's
	// reminders, Anthropic's mid-conversation system messages): it stays
	// where it was sent, with its role, and is neither the system prompt
	// nor a prompt a person wrote (docs/design.md §2). Text blocks, and
	// json blocks for a provider's blocks kept whole (Anthropic's
	// mid-conversation tool changes, tool_addition and tool_removal).
	RoleSystem Role = "system"
)

// BlockType names the kind of one content block.
type BlockType string

// The content block types of docs/design.md §2. Any other type is rejected by
// validation.
const (
	// BlockText is plain text: Text.
	BlockText BlockType = "text"
	// BlockThinking is model reasoning: Text plus the provider's Signature,
	// which binds it to the prefix it was produced after. Thinking blocks are
	// replayed byte-identical or not at all.
	BlockThinking BlockType = "thinking"
	// BlockRedactedThinking is encrypted reasoning: Data is opaque.
	BlockRedactedThinking BlockType = "redacted_thinking"
	// BlockToolCall is one tool call of an assistant message: ID, Name and
	// Input (a JSON value, usually an object).
	BlockToolCall BlockType = "tool_call"
	// BlockImage is an image: MediaType plus base64 Data, or an Artifact
	// reference ("artifact://<id>") once stored.
	BlockImage BlockType = "image"
	// BlockJSON is any other structured tool content, kept whole in JSON.
	BlockJSON BlockType = "json"
	// BlockCompaction is a provider's own compaction (Anthropic server-side
	// compaction, `{"type":"compaction","content":…}`): Text is the summary
	// the provider wrote. An opaque one (the OpenAI Responses compaction
	// item, whose summary is encrypted) has no Text and keeps the item's
	// exact JSON in Data, sent back as it came. Only in assistant messages. The provider drops
	// every block before it, earlier messages included, and continues from
	// the summary: only what follows counts (Estimator.Message,
	// CompactionIndex).
	BlockCompaction BlockType = "compaction"
)

// Block is one content block of a message. Which fields are set depends on
// Type; the zero value of every other field is omitted from the encoding.
type Block struct {
	Type BlockType `json:"type"`
	// Text is the text of a text or thinking block.
	Text string `json:"text,omitempty"`
	// Signature is the provider's signature of a thinking block.
	Signature string `json:"signature,omitempty"`
	// Data is the opaque payload of a redacted_thinking block, or the base64
	// bytes of an image.
	Data string `json:"data,omitempty"`
	// ID is the tool call id of a tool_call block.
	ID string `json:"id,omitempty"`
	// Name is the tool name of a tool_call block.
	Name string `json:"name,omitempty"`
	// Input is the JSON input of a tool_call block.
	Input json.RawMessage `json:"input,omitempty"`
	// MediaType is the MIME type of an image block, e.g. "image/png".
	MediaType string `json:"media_type,omitempty"`
	// Artifact is an "artifact://<id>" reference replacing an image's Data.
	Artifact string `json:"artifact,omitempty"`
	// JSON is the value of a json block.
	JSON json.RawMessage `json:"json,omitempty"`
	// Raw is, on a text or image block of a user message read from a
	// provider's wire, that block as the client sent it (a JSON object, its cache marker cut)
	// when ctxd's rendering of the block would not be those bytes: a
	// text's members the model lacks (citations), an image's key order;
	// also, on a text block of a user or tool message, a provider's block
	// a wire package reads as the text it holds (Anthropic's
	// search_result).
	// A renderer for that wire sends Raw in place of its own rendering
	// while the block's fields are still what Raw holds (a rewrite that
	// changes the block is rendered from its fields), so a message ctxd
	// rewrites carries its other blocks byte for byte (docs/design.md §2).
	// Not counted by the estimate (the fields are).
	Raw json.RawMessage `json:"raw,omitempty"`
	// Phase is, on a text block of an assistant message read from the
	// Responses API, the phase of the message item it came from
	// ("commentary", "final_answer"): rendered back on that item, so a
	// rebuilt request carries it. Not counted by the estimate.
	Phase string `json:"phase,omitempty"`
}

// Usage is what a provider reported for the request that produced an
// assistant message, in tokens. It is ground truth for the size of that
// request (docs/design.md §2 "Tokens").
type Usage struct {
	InputTokens              uint64 `json:"input_tokens"`
	CacheCreationInputTokens uint64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     uint64 `json:"cache_read_input_tokens"`
	OutputTokens             uint64 `json:"output_tokens"`
	// CacheCreation1hInputTokens is the part of CacheCreationInputTokens
	// written with the prompt cache's 1-hour lifetime (priced above the
	// 5-minute one); the rest had the 5-minute lifetime.
	CacheCreation1hInputTokens uint64 `json:"cache_creation_1h_input_tokens,omitempty"`
	// ClearedInputTokens is what the provider's own context editing (the
	// client's context_management edits, reported in the answer's
	// applied_edits) cleared from the request before counting it: the
	// counts above are of the request less these. Not part of
	// ContextTokens; the request as sent was that much larger.
	ClearedInputTokens uint64 `json:"cleared_input_tokens,omitempty"`
}

// ContextTokens is the size of the request in tokens: input plus cache
// creation plus cache read, saturating at 2^64-1 instead of wrapping
// (validation bounds each count by MaxUsageTokens; usage read from a
// provider's answer is not validated).
func (u Usage) ContextTokens() uint64 {
	return satAdd(satAdd(u.InputTokens, u.CacheCreationInputTokens), u.CacheReadInputTokens)
}

// TotalTokens is ContextTokens plus the output tokens, saturating: what the
// post-check compares with the threshold (docs/design.md §5.1).
func (u Usage) TotalTokens() uint64 {
	return satAdd(u.ContextTokens(), u.OutputTokens)
}

// satAdd is a + b, or 2^64-1 when that overflows.
func satAdd(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint64
}

// Message is one message of a conversation in the canonical model
// (docs/design.md §2).
type Message struct {
	// Seq is the message's position in its session's event log, from 1;
	// 0 before it is stored.
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
	// Joined marks a user message whose blocks the client sent in one
	// wire message with the tool results before it (Anthropic's user
	// message [tool_result…, other blocks], which the model splits into
	// tool messages and this message): rendered back as one message
	// (docs/design.md §2). Only on user messages.
	Joined bool `json:"joined,omitempty"`
	// Time is when the message was written, UTC.
	Time time.Time `json:"time,omitzero"`
	// Model is, on an assistant message, the model that wrote it.
	Model string `json:"model,omitempty"`
	// Usage is, on an assistant message, the provider's reported usage.
	Usage *Usage `json:"usage,omitempty"`
	// Tokens is the o200k_base estimate of this message's tokens, counted
	// once when it is appended (before calibration). 0 means not counted yet.
	Tokens uint64 `json:"tokens,omitempty"`
}

// ToolCalls returns the tool_call blocks of m in order (nil when none).
func (m *Message) ToolCalls() []Block {
	var calls []Block
	for _, b := range m.Content {
		if b.Type == BlockToolCall {
			calls = append(calls, b)
		}
	}
	return calls
}
