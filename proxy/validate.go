package proxy

import (
	"fmt"

	"github.com/ctxd/ctxd/wire/anthropic"
)

// checkRequest applies the rules of docs/design.md §4a to outgoing messages, for
// the thinking setting the client sent: the provider would refuse a request
// that breaks them with a 400, so such a request is never sent. Errors name
// the message.
func checkRequest(msgs []anthropic.Message, thinking bool) error {
	if len(msgs) == 0 {
		return fmt.Errorf("no messages")
	}
	if msgs[0].Role != "user" {
		return fmt.Errorf("messages.0: the first message is %q, not user", msgs[0].Role)
	}
	seen := map[string]bool{}
	var open map[string]bool // tool_use ids of the previous assistant message
	for i, m := range msgs {
		if len(m.Content) == 0 {
			return fmt.Errorf("messages.%d: no content", i)
		}
		next := map[string]bool{}
		for j, b := range m.Content {
			switch b.Type {
			case "text":
				if b.Text == "" {
					return fmt.Errorf("messages.%d.content.%d: empty text block", i, j)
				}
			case "tool_use":
				if m.Role != "assistant" {
					return fmt.Errorf("messages.%d.content.%d: tool_use in a %s message", i, j, m.Role)
				}
				if seen[b.ID] {
					return fmt.Errorf("messages.%d.content.%d: tool_use id %q used twice", i, j, b.ID)
				}
				seen[b.ID] = true
				next[b.ID] = true
			case "tool_result":
				if !open[b.ToolUseID] {
					return fmt.Errorf("messages.%d.content.%d: tool_result %q answers no tool_use of the message before", i, j, b.ToolUseID)
				}
				delete(open, b.ToolUseID)
			}
		}
		if len(open) > 0 {
			for id := range open {
				return fmt.Errorf("messages.%d: tool_use %q has no tool_result in the next message", i, id)
			}
		}
		if m.Role == "assistant" {
			if err := checkThinking(i, m); err != nil {
				return err
			}
			open = next
		} else {
			open = nil
		}
	}
	// The request ends with an assistant message's unanswered calls: an
	// open round the provider refuses.
	if len(open) > 0 {
		return fmt.Errorf("messages.%d: tool_use without tool_result at the end", len(msgs)-1)
	}
	if !thinking {
		// Thinking off: the provider refuses thinking in an assistant
		// message in the final position.
		if last := msgs[len(msgs)-1]; last.Role == "assistant" {
			for _, b := range last.Content {
				if b.Type == "thinking" || b.Type == "redacted_thinking" {
					return fmt.Errorf("messages.%d: thinking is disabled and the final assistant message contains thinking", len(msgs)-1)
				}
			}
		}
		return nil
	}
	// An open tool loop (the request ends with tool results): its last
	// assistant message must start with thinking.
	last := msgs[len(msgs)-1]
	if last.Role == "user" && last.Content[0].Type == "tool_result" && len(msgs) >= 2 {
		a := msgs[len(msgs)-2]
		if t := a.Content[0].Type; t != "thinking" && t != "redacted_thinking" {
			return fmt.Errorf("messages.%d.content.0: thinking is enabled and the final assistant message of the open tool loop starts with %s, not thinking", len(msgs)-2, t)
		}
	}
	return nil
}

// checkThinking: an assistant message with thinking has it first and never
// ends with it.
func checkThinking(i int, m anthropic.Message) error {
	has := false
	for _, b := range m.Content {
		if b.Type == "thinking" || b.Type == "redacted_thinking" {
			has = true
		}
	}
	if !has {
		return nil
	}
	if t := m.Content[0].Type; t != "thinking" && t != "redacted_thinking" {
		return fmt.Errorf("messages.%d.content.0: an assistant message with thinking must start with it, found %s", i, t)
	}
	if t := m.Content[len(m.Content)-1].Type; t == "thinking" || t == "redacted_thinking" {
		return fmt.Errorf("messages.%d: the final block of an assistant message cannot be thinking", i)
	}
	return nil
}
