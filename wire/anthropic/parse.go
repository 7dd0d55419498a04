package anthropic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/rawjson"
)

// WireBlock is one Anthropic Messages content block as read from the wire
// (a request, a response, a Claude Code transcript line), decoded leniently:
// every field any block type uses. Raw keeps the block whole for types the
// canonical model has no block for.
type WireBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Thinking  string          `json:"thinking"`
	Signature string          `json:"signature"`
	Data      string          `json:"data"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
	Source    *WireSource     `json:"source"`
	Raw       json.RawMessage `json:"-"`
}

// WireSource is a block's "source" when it is an object (an image's or a
// document's); any other value (a search_result's source is a string) is
// read as the zero WireSource, the block then being kept whole (Raw).
type WireSource struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
}

// UnmarshalJSON reads an object's fields and ignores any other value.
func (s *WireSource) UnmarshalJSON(data []byte) error {
	if len(data) == 0 || data[0] != '{' {
		*s = WireSource{}
		return nil
	}
	type plain WireSource
	if json.Unmarshal(data, (*plain)(s)) != nil {
		*s = WireSource{}
	}
	return nil
}

// DecodeContent decodes an Anthropic content value: a string (one text
// block), an array of blocks, or null (no blocks). Errors name the block
// index of a block that does not decode.
func DecodeContent(raw json.RawMessage) ([]WireBlock, error) { return decodeContent(raw, false) }

// decodeContent is DecodeContent; valid: raw is known to be JSON (read
// out of a value json.Valid or json.Unmarshal accepted), and is not
// checked again.
func decodeContent(raw json.RawMessage, valid bool) ([]WireBlock, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	// Only a string (or a null) reads as a string: an array (the usual
	// content) is not scanned for one first.
	if i := rawjson.SkipSpace(raw, 0); i < len(raw) && (raw[i] == '"' || raw[i] == 'n') {
		if valid && raw[i] == '"' {
			// A tool result's output, usually: read once.
			if s, ok := rawjson.Unquote(raw[i:rawjson.SkipSpaceBack(raw)]); ok {
				if s == "" {
					return nil, nil
				}
				return []WireBlock{{Type: "text", Text: s}}, nil
			}
		}
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			if s == "" {
				return nil, nil
			}
			return []WireBlock{{Type: "text", Text: s}}, nil
		}
	}
	raws, err := decodeArray(raw, valid)
	if err != nil {
		return nil, fmt.Errorf("content is neither a string nor an array of blocks: %w", err)
	}
	blocks := make([]WireBlock, 0, len(raws))
	for i, r := range raws {
		var b WireBlock
		if !valid || !decodeBlock(r, &b) {
			b = WireBlock{}
			if err := json.Unmarshal(r, &b); err != nil {
				return nil, fmt.Errorf("content block %d: %w", i, err)
			}
		}
		b.Raw = r
		blocks = append(blocks, b)
	}
	return blocks, nil
}

// Bits of decodeBlock's members, each read once.
const (
	memberType = 1 << iota
	memberText
	memberThinking
	memberSignature
	memberData
	memberID
	memberName
	memberInput
	memberToolUseID
	memberContent
	memberIsError
	memberSource
)

// blockMembers are WireBlock's members by their JSON names.
var blockMembers = map[string]int{
	"type": memberType, "text": memberText, "thinking": memberThinking, "signature": memberSignature,
	"data": memberData, "id": memberID, "name": memberName, "input": memberInput,
	"tool_use_id": memberToolUseID, "content": memberContent, "is_error": memberIsError, "source": memberSource,
}

// decodeBlock is json.Unmarshal(raw, b) for raw known to be JSON, by a
// scan of its members (rawjson) and one decoding of each string it
// keeps: a tool result's text is not read three times more (the syntax
// check, the block's decoding, its content's). b's raw values (Input,
// Content) are slices of raw. It reports false, having set b partly,
// when raw holds what json.Unmarshal reads its own way (not an object, a
// member named in another case or twice, a value of another type than
// the member's), which the caller then leaves to json.Unmarshal.
func decodeBlock(raw json.RawMessage, b *WireBlock) bool {
	seen, ok := 0, true
	if !rawjson.Members(raw, func(key string, vs, ve int) bool {
		bit, known := blockMembers[key]
		if !known {
			// json.Unmarshal matches a name in any case (Unicode's
			// folding too): such a member is left to it.
			for k := range blockMembers {
				if strings.EqualFold(key, k) {
					ok = false
					return false
				}
			}
			return true
		}
		if seen&bit != 0 {
			ok = false
			return false
		}
		seen |= bit
		v := raw[vs:ve:ve]
		null := string(v) == "null"
		var str *string
		switch bit {
		case memberType:
			str = &b.Type
		case memberText:
			str = &b.Text
		case memberThinking:
			str = &b.Thinking
		case memberSignature:
			str = &b.Signature
		case memberData:
			str = &b.Data
		case memberID:
			str = &b.ID
		case memberName:
			str = &b.Name
		case memberToolUseID:
			str = &b.ToolUseID
		case memberInput:
			b.Input = json.RawMessage(v)
		case memberContent:
			b.Content = json.RawMessage(v)
		case memberIsError:
			switch {
			case string(v) == "true":
				b.IsError = true
			case string(v) == "false", null:
			default:
				ok = false
			}
		case memberSource:
			if !null {
				b.Source = new(WireSource)
				_ = b.Source.UnmarshalJSON(v)
			}
		}
		if str != nil && !null {
			*str, ok = rawjson.Unquote(v)
		}
		return ok
	}) {
		return false
	}
	return ok
}

// Canonical converts one block that is not a tool_result. Types the
// canonical model lacks (server_tool_use, web_search_tool_result, document,
// …) are kept whole as json blocks: they have no separate result to pair.
func (b WireBlock) Canonical() history.Block {
	switch b.Type {
	case "text":
		return textBlock(b.Text)
	case "thinking":
		return history.Block{Type: history.BlockThinking, Text: b.Thinking, Signature: b.Signature}
	case "redacted_thinking":
		return history.Block{Type: history.BlockRedactedThinking, Data: b.Data}
	case "compaction":
		// Server-side compaction: content is the provider's summary.
		var summary string
		if json.Unmarshal(b.Content, &summary) == nil {
			return history.Block{Type: history.BlockCompaction, Text: summary}
		}
	case "tool_use":
		return history.Block{Type: history.BlockToolCall, ID: b.ID, Name: b.Name, Input: rawjson.Value(b.Input)}
	case "image":
		if b.Source != nil && b.Source.Type == "base64" {
			return history.Block{Type: history.BlockImage, MediaType: b.Source.MediaType, Data: b.Source.Data}
		}
	}
	return jsonBlock(b.Raw)
}

// userBlock converts one block of a user message that is not a
// tool_result: Canonical, and a text or image block whose client bytes
// ctxd's rendering would not reproduce keeps them (history.Block.Raw): a
// text's members the model lacks (citations), an image's key order. Only
// in user messages: an assistant message is ctxd's record of the answer,
// matched to the client's resend without such members.
func (b WireBlock) userBlock() history.Block {
	if c, ok := b.searchResult(); ok {
		return c
	}
	c := b.Canonical()
	switch c.Type {
	case history.BlockText:
		if extraTextMembers(b.Raw) {
			c.Raw = clientRaw(b.Raw)
		}
	case history.BlockImage:
		if raw := clientRaw(b.Raw); raw != nil {
			if mine, err := json.Marshal(renderImage(c)); err != nil || !bytes.Equal(mine, raw) {
				// Another key order, or members ctxd does not write.
				c.Raw = raw
			}
		}
	}
	return c
}

// clientRaw is the client's block raw without its cache marker (the
// marker is placed again like every marker), or nil when raw is not a
// block.
func clientRaw(raw json.RawMessage) json.RawMessage {
	c, ok := carried(raw)
	if !ok {
		return nil
	}
	return c.Raw
}

// extraTextMembers reports whether the text block raw has a member ctxd's
// rendering of it would not write (citations, a future field).
func extraTextMembers(raw json.RawMessage) bool {
	extra := false
	rawjson.Members(raw, func(key string, vs, ve int) bool {
		switch key {
		case "type", "text", "cache_control":
			return true
		}
		extra = true
		return false
	})
	return extra
}

// ToolResultContent converts a tool_result's content: a string, or an array
// of text / image / other blocks.
func ToolResultContent(raw json.RawMessage) ([]history.Block, error) {
	return toolResultContent(raw, false)
}

// toolResultContent is ToolResultContent; valid as for decodeContent.
func toolResultContent(raw json.RawMessage, valid bool) ([]history.Block, error) {
	blocks, err := decodeContent(raw, valid)
	if err != nil {
		return nil, fmt.Errorf("tool_result %w", err)
	}
	out := make([]history.Block, 0, len(blocks))
	for _, b := range blocks {
		if c, ok := b.searchResult(); ok {
			out = append(out, c)
			continue
		}
		out = append(out, b.Canonical())
	}
	return out, nil
}

// ToolResult is one tool_result block in canonical form, before it becomes a
// tool message: CallID answers a tool_use id; Name is filled by callers that
// know the call (the wire does not repeat it).
type ToolResult struct {
	CallID  string
	Name    string
	Content []history.Block
	IsError bool
}

// SplitUser converts the blocks of a user turn: each tool_result becomes a
// ToolResult (in order) and the remaining blocks the content of one user
// message, which the caller appends after the results.
func SplitUser(blocks []WireBlock) ([]ToolResult, []history.Block, error) {
	return splitUser(blocks, false)
}

// splitUser is SplitUser; decoded: blocks are decodeContent's, each
// block's Content a value json.Unmarshal accepted (not checked again).
func splitUser(blocks []WireBlock, decoded bool) ([]ToolResult, []history.Block, error) {
	var (
		results []ToolResult
		rest    []history.Block
	)
	for i, blk := range blocks {
		if blk.Type != "tool_result" {
			rest = append(rest, blk.userBlock())
			continue
		}
		content, err := toolResultContent(blk.Content, decoded)
		if err != nil {
			return nil, nil, fmt.Errorf("content block %d: %w", i, err)
		}
		results = append(results, ToolResult{CallID: blk.ToolUseID, Content: content, IsError: blk.IsError})
	}
	return results, rest, nil
}

// AssistantBlocks converts the blocks of an assistant turn.
func AssistantBlocks(blocks []WireBlock) []history.Block {
	out := make([]history.Block, 0, len(blocks))
	for _, blk := range blocks {
		out = append(out, blk.Canonical())
	}
	return out
}

// Usage is an Anthropic usage object, in tokens; other fields (server tool
// use, iterations) are ignored.
type Usage struct {
	InputTokens              uint64 `json:"input_tokens"`
	CacheCreationInputTokens uint64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     uint64 `json:"cache_read_input_tokens"`
	OutputTokens             uint64 `json:"output_tokens"`
	// CacheCreation splits CacheCreationInputTokens by the cache entry's
	// lifetime; nil when the provider did not report it.
	CacheCreation *CacheCreation `json:"cache_creation,omitempty"`
	// Cleared is what the provider's context editing cleared before
	// counting (the answer's context_management.applied_edits,
	// ContextManagement.Cleared); not a member of usage on the wire.
	Cleared uint64 `json:"-"`
}

// ContextManagement is an answer's context_management: the edits the
// provider applied to the request (the client's context_management
// edits, clear_tool_uses_20250919 or clear_thinking_20251015), each with
// the input tokens it cleared.
type ContextManagement struct {
	AppliedEdits []struct {
		Type               string `json:"type"`
		ClearedInputTokens uint64 `json:"cleared_input_tokens"`
	} `json:"applied_edits"`
}

// Cleared is the input tokens the applied edits cleared, in all (0 when
// c is nil).
func (c *ContextManagement) Cleared() uint64 {
	if c == nil {
		return 0
	}
	var n uint64
	for _, e := range c.AppliedEdits {
		n += e.ClearedInputTokens
	}
	return n
}

// CacheCreation is usage.cache_creation: the prompt-cache writes of a
// request by lifetime, in tokens.
type CacheCreation struct {
	Ephemeral5m uint64 `json:"ephemeral_5m_input_tokens"`
	Ephemeral1h uint64 `json:"ephemeral_1h_input_tokens"`
}

// Canonical returns u as history.Usage, or nil when u is nil or every count
// is 0 (an aborted request reports zeros, which is no report at all). The
// 1-hour writes are kept only when they are a part of the cache writes
// (a provider that reports the split but not the total is taken at its
// split).
func (u *Usage) Canonical() *history.Usage {
	if u == nil {
		return nil
	}
	h := history.Usage{InputTokens: u.InputTokens, CacheCreationInputTokens: u.CacheCreationInputTokens,
		CacheReadInputTokens: u.CacheReadInputTokens, OutputTokens: u.OutputTokens, ClearedInputTokens: min(u.Cleared, history.MaxUsageTokens)}
	if c := u.CacheCreation; c != nil {
		if h.CacheCreationInputTokens == 0 {
			h.CacheCreationInputTokens = c.Ephemeral5m + c.Ephemeral1h
		}
		h.CacheCreation1hInputTokens = min(c.Ephemeral1h, h.CacheCreationInputTokens)
	}
	return usage(h)
}

// JoinText concatenates the text of the text blocks, separated by blank
// lines (how a system prompt given as blocks is read).
func JoinText(blocks []WireBlock) string {
	s := ""
	for _, blk := range blocks {
		if blk.Type != "text" || blk.Text == "" {
			continue
		}
		if s != "" {
			s += "\n\n"
		}
		s += blk.Text
	}
	return s
}

// usage returns u, or nil when every count is 0.
func usage(u history.Usage) *history.Usage {
	if u == (history.Usage{}) {
		return nil
	}
	return &u
}

func textBlock(s string) history.Block {
	return history.Block{Type: history.BlockText, Text: s}
}

// jsonBlock keeps any structured value whole.
func jsonBlock(raw json.RawMessage) history.Block {
	return history.Block{Type: history.BlockJSON, JSON: rawjson.Value(raw)}
}

// WireMessage is one message of a Messages API request as read from the
// wire; Content is a string or an array of blocks.
type WireMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// ParseMessage converts one request message into canonical messages
// (docs/design.md §2): an assistant message into one assistant message; a user
// message into one tool message per tool_result block (in order, named from
// toolNames, the tool_use ids seen so far → tool name) followed by a user
// message holding its other blocks, if any, marked Joined when it follows
// results (rendered back as one message). A "system" message inside the
// list (Claude Code sends one) becomes a system message of its text blocks
// and its other blocks kept whole (tool_addition, tool_removal). The
// assistant's tool_use ids are added to toolNames. Errors name the field
// ("content[2]: …", "role: …"), but for a message that is not a JSON
// object of a message (wholeMessageError).
func ParseMessage(raw json.RawMessage, toolNames map[string]string) ([]history.Message, error) {
	m, err := decodeWireMessage(raw)
	if err != nil {
		return nil, wholeMessageError{err}
	}
	// m.Content is part of a message found valid (decodeWireMessage).
	blocks, err := decodeContent(m.Content, true)
	if err != nil {
		return nil, fmt.Errorf("content: %w", err)
	}
	switch m.Role {
	case "assistant":
		for _, b := range blocks {
			if b.Type == "tool_use" && toolNames != nil {
				toolNames[b.ID] = b.Name
			}
		}
		return []history.Message{{Role: history.RoleAssistant, Content: AssistantBlocks(blocks)}}, nil
	case "user":
		results, rest, err := splitUser(blocks, true)
		if err != nil {
			return nil, fmt.Errorf("content: %w", err)
		}
		out := make([]history.Message, 0, len(results)+1)
		for _, r := range results {
			out = append(out, history.Message{Role: history.RoleTool, ToolCallID: r.CallID, ToolName: toolNames[r.CallID], Content: r.Content, IsError: r.IsError})
		}
		if len(rest) > 0 {
			// Sent in one message with the results: rendered back so.
			out = append(out, history.Message{Role: history.RoleUser, Content: rest, Joined: len(results) > 0})
		}
		return out, nil
	case "system":
		// Kept where it was, with its role (docs/design.md §2): its text
		// blocks, blank ones left out, and every other block (a
		// mid-conversation tool change: tool_addition, tool_removal)
		// kept whole, carried as sent.
		var content []history.Block
		for _, b := range blocks {
			switch {
			case b.Type == "text":
				if strings.TrimSpace(b.Text) != "" {
					content = append(content, textBlock(b.Text))
				}
			case len(b.Raw) > 0:
				content = append(content, jsonBlock(b.Raw))
			}
		}
		if len(content) == 0 {
			return nil, nil
		}
		return []history.Message{{Role: history.RoleSystem, Content: content}}, nil
	default:
		return nil, fmt.Errorf("role: %q is not user or assistant", m.Role)
	}
}

// MatchKey is the form in which an assistant message a client resends is
// matched to the answer recorded for it (docs/design.md §10). It leaves
// out what real clients change in what they resend — thinking and
// redacted_thinking blocks (stripped), whitespace in text (re-flowed:
// runs of it count as one space, none at the ends), blank text blocks,
// key order and fields besides these (dropped or reordered), the encoding
// of a tool call's input (key order, spacing, escapes) — and keeps what
// identifies the answer: its text and its tool calls' ids, names and
// inputs, in order. An input the client edited is a rewrite of its
// history (its edit is sent, never ctxd's stale record). ok is false when
// raw is not an assistant message.
func MatchKey(raw json.RawMessage) (key []byte, ok bool) {
	var m WireMessage
	if err := json.Unmarshal(raw, &m); err != nil || m.Role != "assistant" {
		return nil, false
	}
	blocks, err := DecodeContent(m.Content)
	if err != nil {
		return nil, false
	}
	key = append(key, "assistant\x00"...)
	for _, b := range blocks {
		switch b.Type {
		case "thinking", "redacted_thinking":
		case "text":
			if t := strings.Join(strings.Fields(b.Text), " "); t != "" {
				key = append(append(append(key, "t\x00"...), t...), 0)
			}
		case "tool_use", "server_tool_use":
			key = append(append(append(append(append(key, "c\x00"...), b.ID...), 0), b.Name...), 0)
			var v any
			if json.Unmarshal(b.Input, &v) == nil {
				in, _ := json.Marshal(v) // keys sorted, no spacing
				key = append(append(key, in...), 0)
			} else {
				key = append(append(key, b.Input...), 0)
			}
		default:
			key = append(append(append(key, "o\x00"...), b.Type...), 0)
		}
	}
	return key, true
}

// wholeMessageError is ParseMessage's error about the message as a whole
// (no field to name): its text is err's.
type wholeMessageError struct{ err error }

func (e wholeMessageError) Error() string { return e.err.Error() }
func (e wholeMessageError) Unwrap() error { return e.err }

// decodeWireMessage is json.Unmarshal(raw, &m) into a WireMessage: a valid
// message is checked once and its two members found by a scan (rawjson)
// instead of decoding every byte of it again; anything else (not JSON, a
// role that is not a string) goes to json.Unmarshal, for its error.
func decodeWireMessage(raw json.RawMessage) (m WireMessage, err error) {
	if rawjson.Valid(raw) {
		plain := true
		if rawjson.Members(raw, func(key string, vs, ve int) bool {
			switch v := raw[vs:ve]; {
			case strings.EqualFold(key, "role"):
				if (v[0] != '"' && string(v) != "null") || json.Unmarshal(v, &m.Role) != nil {
					plain = false
					return false
				}
			case strings.EqualFold(key, "content"):
				// A copy, as json.Unmarshal makes: raw is the request's
				// buffer, reused once the request is done.
				m.Content = json.RawMessage(bytes.Clone(v))
			}
			return true
		}) && plain {
			return m, nil
		}
		m = WireMessage{}
	}
	err = json.Unmarshal(raw, &m)
	return m, err
}

// decodeArray is json.Unmarshal(raw, &raws): a valid array is checked once
// (not at all when valid: raw is known to be JSON) and split by a scan
// (rawjson), each element a copy; anything else goes to json.Unmarshal.
func decodeArray(raw json.RawMessage, valid bool) ([]json.RawMessage, error) {
	if i := rawjson.SkipSpace(raw, 0); i < len(raw) && raw[i] == '[' && (valid || rawjson.Valid(raw)) {
		elems, err := rawjson.SplitArray(raw[i:])
		if err == nil {
			raws := make([]json.RawMessage, len(elems))
			for k, e := range elems {
				raws[k] = json.RawMessage(bytes.Clone(e))
			}
			return raws, nil
		}
	}
	var raws []json.RawMessage
	err := json.Unmarshal(raw, &raws)
	return raws, err
}
