// Package strict is the strict fake provider of the tests: it
// reads a request body in a provider's wire format and refuses, with the
// provider's own words, what the real provider refuses for its shape — the
// rules of docs/design.md §4a, checked by history.CheckRequest.
package strict

import (
	"encoding/json"
	"fmt"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/wire/anthropic"
)

// Anthropic checks an Anthropic Messages request body (what
// ?format=anthropic serves, or a summarizer request). It turns the messages
// back into canonical ones — each tool_result block a tool message, the
// other blocks of a user turn one user message after them — and returns
// the rules they break. thinking is the request's thinking setting;
// openTail accepts calls still waiting on their result at the end.
// It returns an error when body is not a Messages request.
func Anthropic(body []byte, thinking history.Thinking, openTail bool) (history.Violations, error) {
	// Read as the provider reads it: a content as a string or blocks, a
	// block of any type with any members (a search_result's source is a
	// string), which anthropic.Request's typed blocks would refuse.
	var req struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("strict provider: not a Messages request: %w", err)
	}
	var msgs []history.Message
	for i, m := range req.Messages {
		blocks, err := anthropic.DecodeContent(m.Content)
		if err != nil {
			return nil, fmt.Errorf("strict provider: not a Messages request: messages[%d]: %w", i, err)
		}
		var rest []history.Block
		for _, b := range blocks {
			switch b.Type {
			case "tool_result":
				tm := history.Message{Role: history.RoleTool, ToolCallID: b.ToolUseID, IsError: b.IsError}
				content, err := anthropic.DecodeContent(b.Content)
				if err != nil {
					return nil, fmt.Errorf("strict provider: not a Messages request: messages[%d]: %w", i, err)
				}
				for _, c := range content {
					tm.Content = append(tm.Content, history.Block{Type: history.BlockText, Text: c.Text})
				}
				msgs = append(msgs, tm)
			case "thinking":
				rest = append(rest, history.Block{Type: history.BlockThinking, Text: b.Thinking, Signature: b.Signature})
			case "redacted_thinking":
				rest = append(rest, history.Block{Type: history.BlockRedactedThinking, Data: b.Data})
			case "tool_use":
				rest = append(rest, history.Block{Type: history.BlockToolCall, ID: b.ID, Name: b.Name, Input: b.Input})
			case "compaction":
				var summary string
				_ = json.Unmarshal(b.Content, &summary)
				rest = append(rest, history.Block{Type: history.BlockCompaction, Text: summary})
			case "image":
				rest = append(rest, history.Block{Type: history.BlockImage})
			case "text":
				rest = append(rest, history.Block{Type: history.BlockText, Text: b.Text})
			default:
				// Any other block (document, search_result, a server
				// tool's, a future type) is not text: the rules on
				// text do not apply to it.
				rest = append(rest, history.Block{Type: history.BlockJSON, JSON: b.Raw})
			}
		}
		if len(rest) > 0 || len(blocks) == 0 {
			msgs = append(msgs, history.Message{Role: history.Role(m.Role), Content: rest})
		}
	}
	return history.CheckRequest(msgs, history.Rules{Thinking: thinking, OpenTail: openTail}), nil
}
