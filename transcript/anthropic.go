package transcript

import (
	"encoding/json"
	"fmt"

	"github.com/ctxd/ctxd/history"
)

// anthBlock is one Anthropic Messages content block, as Claude Code and the
// Messages API write it. raw keeps the block whole for types the canonical
// model has no block for.
type anthBlock struct {
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
	Source    *struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
	} `json:"source"`
	raw json.RawMessage
}

// anthropicContent decodes an Anthropic content value: a string (one text
// block), an array of blocks, or null (no blocks).
func anthropicContent(raw json.RawMessage) ([]anthBlock, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		if s == "" {
			return nil, nil
		}
		return []anthBlock{{Type: "text", Text: s}}, nil
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(raw, &raws); err != nil {
		return nil, fmt.Errorf("content is neither a string nor an array of blocks: %w", err)
	}
	blocks := make([]anthBlock, 0, len(raws))
	for i, r := range raws {
		var b anthBlock
		if err := json.Unmarshal(r, &b); err != nil {
			return nil, fmt.Errorf("content block %d: %w", i, err)
		}
		b.raw = r
		blocks = append(blocks, b)
	}
	return blocks, nil
}

// canonicalBlock converts one block that is not a tool_result. Types the
// canonical model lacks (server_tool_use, web_search_tool_result, document,
// …) are kept whole as json blocks: they have no separate result to pair.
func (b anthBlock) canonical() history.Block {
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
		return history.Block{Type: history.BlockToolCall, ID: b.ID, Name: b.Name, Input: validJSON(b.Input)}
	case "image":
		if b.Source != nil && b.Source.Type == "base64" {
			return history.Block{Type: history.BlockImage, MediaType: b.Source.MediaType, Data: b.Source.Data}
		}
	}
	return jsonBlock(b.raw)
}

// toolResultContent converts a tool_result's content: a string, or an array
// of text / image / other blocks.
func toolResultContent(raw json.RawMessage) ([]history.Block, error) {
	blocks, err := anthropicContent(raw)
	if err != nil {
		return nil, fmt.Errorf("tool_result %w", err)
	}
	out := make([]history.Block, 0, len(blocks))
	for _, b := range blocks {
		out = append(out, b.canonical())
	}
	return out, nil
}

// toolRes is one tool result before it is appended.
type toolRes struct {
	callID  string
	name    string
	content []history.Block
	isErr   bool
}

// splitUser converts the blocks of a user turn: each tool_result becomes a
// toolRes (in order) and the remaining blocks the content of one user
// message, which the caller appends after the results.
func splitUser(blocks []anthBlock) ([]toolRes, []history.Block, error) {
	var (
		results []toolRes
		rest    []history.Block
	)
	for i, blk := range blocks {
		if blk.Type != "tool_result" {
			rest = append(rest, blk.canonical())
			continue
		}
		content, err := toolResultContent(blk.Content)
		if err != nil {
			return nil, nil, fmt.Errorf("content block %d: %w", i, err)
		}
		results = append(results, toolRes{callID: blk.ToolUseID, content: content, isErr: blk.IsError})
	}
	return results, rest, nil
}

// anthropicAssistant converts the blocks of an assistant turn.
func anthropicAssistant(blocks []anthBlock) []history.Block {
	out := make([]history.Block, 0, len(blocks))
	for _, blk := range blocks {
		out = append(out, blk.canonical())
	}
	return out
}

// anthUsage is an Anthropic usage object; other fields are ignored.
type anthUsage struct {
	InputTokens              uint64 `json:"input_tokens"`
	CacheCreationInputTokens uint64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     uint64 `json:"cache_read_input_tokens"`
	OutputTokens             uint64 `json:"output_tokens"`
}

func (u *anthUsage) canonical() *history.Usage {
	if u == nil {
		return nil
	}
	return usage(history.Usage(*u))
}
