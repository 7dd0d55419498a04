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
	var req anthropic.Request
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("strict provider: not a Messages request: %w", err)
	}
	var msgs []history.Message
	for _, m := range req.Messages {
		var rest []history.Block
		for _, b := range m.Content {
			switch b.Type {
			case "tool_result":
				tm := history.Message{Role: history.RoleTool, ToolCallID: b.ToolUseID, IsError: b.IsError}
				for _, c := range b.Content {
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
				rest = append(rest, history.Block{Type: history.BlockCompaction, Text: b.Compaction})
			case "image":
				rest = append(rest, history.Block{Type: history.BlockImage})
			default:
				rest = append(rest, history.Block{Type: history.BlockText, Text: b.Text})
			}
		}
		if len(rest) > 0 || len(m.Content) == 0 {
			msgs = append(msgs, history.Message{Role: history.Role(m.Role), Content: rest})
		}
	}
	return history.CheckRequest(msgs, history.Rules{Thinking: thinking, OpenTail: openTail}), nil
}
