package fakeprovider

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strings"
)

// The texts of the real API's 400 answers, copied from public reports of
// them (docs/testing.md quotes most). %d is a message index, %s an
// id or a block type. Tests compare the fake's answers against these.
const (
	msgFirstNotUser        = `messages: first message must use the "user" role`
	msgNoMessages          = `messages: at least one message is required`
	msgEmptyContent        = `messages.%d: all messages must have non-empty content except for the optional final assistant message`
	msgEmptyText           = `messages: text content blocks must be non-empty`
	msgWhitespaceText      = `messages: text content blocks must contain non-whitespace text`
	msgToolUseNoResult     = "messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message."
	msgOrphanResult        = "messages.%d.content.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
	msgDuplicateID         = "messages.%d.content.%d: `tool_use` ids must be unique"
	msgBadSignature        = "messages.%d.content.%d: Invalid `signature` in `thinking` block"
	msgThinkingNotFirst    = "messages.%d.content.0: If an assistant message contains any thinking blocks, the first block must be thinking or redacted_thinking. Found %s."
	msgThinkingLast        = "messages.%d: The final block in an assistant message cannot be `thinking`."
	msgOpenLoopNoThinking  = "messages.%d.content.0.type: Expected `thinking` or `redacted_thinking`, but found `%s`. When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from previous turns. To avoid this requirement, disable `thinking`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
	msgThinkingWhenOff     = "messages.%d.content.%d: When thinking is disabled, an `assistant` message in the final position cannot contain `thinking`. To use thinking blocks, enable `thinking` in your request."
	msgPromptTooLong       = "prompt is too long: %d tokens > %d maximum"
	msgInputPlusMaxTokens  = "input length and `max_tokens` exceed context limit: %d + %d > %d, decrease input length or `max_tokens` and try again"
	msgRoleInvalid         = "messages.%d.role: Input should be 'user' or 'assistant'"
	msgMaxTokensRequired   = "max_tokens: Field required"
	msgModelRequired       = "model: Field required"
	msgAPIKeyRequired      = "x-api-key header is required"
	msgAPIKeyInvalid       = "invalid x-api-key"
	msgVersionRequired     = "anthropic-version: header is required"
	msgNotFound            = "Not Found"
	msgMalformedJSON       = "There was an error parsing the body of your request"
	signaturePrefix        = "ctxdfake:"
	defaultSignatureSecret = "ctxd-fakeprovider"
)

// Sign returns the signature the fake provider gives a thinking block with
// this text, and checks on every thinking block it receives back: any change
// to the text (or a signature from elsewhere) is refused with the real
// "Invalid `signature` in `thinking` block" 400.
func Sign(thinking string) string {
	m := hmac.New(sha256.New, []byte(defaultSignatureSecret))
	m.Write([]byte(thinking))
	return base64.StdEncoding.EncodeToString(append([]byte(signaturePrefix), m.Sum(nil)...))
}

// Validate checks a Messages request against the shape rules the real API
// enforces and docs/design.md §4a names: the first message is a user message; no
// message without content and no empty text block; every tool_use answered
// by a tool_result in the next message, every tool_result answering a
// tool_use of the message before, ids unique; thinking blocks signed by this
// fake and unmodified; and, when the request enables thinking, an assistant
// message with thinking starts with it, none ends with it, and the assistant
// message of an open tool loop (the request ends with tool results) starts
// with a thinking or redacted_thinking block; when thinking is disabled, the
// last assistant message carries no thinking if it is the final message or
// its tool loop is open (thinking cannot be switched off inside a turn). It returns nil or the first
// violation as the real API's 400 (*APIError, type invalid_request_error,
// the real message text).
func Validate(r *MessagesRequest) *APIError {
	if r.Model == "" {
		return invalidRequest(msgModelRequired)
	}
	if r.MaxTokens <= 0 {
		return invalidRequest(msgMaxTokensRequired)
	}
	if len(r.Messages) == 0 {
		return invalidRequest(msgNoMessages)
	}
	for i, m := range r.Messages {
		switch m.Role {
		case "user", "assistant", "system":
		default:
			return invalidRequest(msgRoleInvalid, i)
		}
	}
	if first := firstConversational(r.Messages); first >= 0 && r.Messages[first].Role != "user" {
		return invalidRequest(msgFirstNotUser)
	}
	for i, m := range r.Messages {
		final := i == len(r.Messages)-1
		if len(m.Content.Blocks) == 0 && !(final && m.Role == "assistant") {
			return invalidRequest(msgEmptyContent, i)
		}
		for _, b := range m.Content.Blocks {
			if b.Type != "text" {
				continue
			}
			if m.Content.FromString && b.Text == "" && !(final && m.Role == "assistant") {
				return invalidRequest(msgEmptyContent, i)
			}
			if b.Text == "" {
				return invalidRequest(msgEmptyText)
			}
			if strings.TrimSpace(b.Text) == "" {
				return invalidRequest(msgWhitespaceText)
			}
		}
	}
	if err := validateToolPairs(r.Messages); err != nil {
		return err
	}
	return validateThinking(r)
}

// firstConversational is the index of the first user or assistant message
// (Claude Code's "system" entries are not turns), or -1.
func firstConversational(msgs []Message) int {
	for i, m := range msgs {
		if m.Role != "system" {
			return i
		}
	}
	return -1
}

func validateToolPairs(msgs []Message) *APIError {
	seen := map[string]bool{}
	for i, m := range msgs {
		if m.Role == "assistant" {
			var ids []string
			for j, b := range m.Content.Blocks {
				if b.Type != "tool_use" {
					continue
				}
				if seen[b.ID] {
					return invalidRequest(msgDuplicateID, i, j)
				}
				seen[b.ID] = true
				ids = append(ids, b.ID)
			}
			if len(ids) == 0 {
				continue
			}
			answered := map[string]bool{}
			if i+1 < len(msgs) && msgs[i+1].Role == "user" {
				for _, b := range msgs[i+1].Content.Blocks {
					if b.Type == "tool_result" {
						answered[b.ToolUseID] = true
					}
				}
			}
			var missing []string
			for _, id := range ids {
				if !answered[id] {
					missing = append(missing, id)
				}
			}
			if len(missing) > 0 {
				return invalidRequest(msgToolUseNoResult, i, strings.Join(missing, ", "))
			}
		}
		if m.Role == "user" {
			calls := map[string]bool{}
			if i > 0 && msgs[i-1].Role == "assistant" {
				for _, b := range msgs[i-1].Content.Blocks {
					if b.Type == "tool_use" {
						calls[b.ID] = true
					}
				}
			}
			for j, b := range m.Content.Blocks {
				if b.Type == "tool_result" && !calls[b.ToolUseID] {
					return invalidRequest(msgOrphanResult, i, j, b.ToolUseID)
				}
			}
		}
	}
	return nil
}

func isThinking(t string) bool { return t == "thinking" || t == "redacted_thinking" }

func validateThinking(r *MessagesRequest) *APIError {
	lastAssistant := -1
	for i, m := range r.Messages {
		if m.Role != "assistant" {
			continue
		}
		lastAssistant = i
		has := false
		for j, b := range m.Content.Blocks {
			if b.Type == "thinking" {
				has = true
				if b.Signature != Sign(b.Thinking) {
					return invalidRequest(msgBadSignature, i, j)
				}
			}
			if b.Type == "redacted_thinking" {
				has = true
			}
		}
		if !has {
			continue
		}
		first := 0 // a server compaction block precedes the thinking
		for first < len(m.Content.Blocks)-1 && m.Content.Blocks[first].Type == "compaction" {
			first++
		}
		if r.Enabled() && !isThinking(m.Content.Blocks[first].Type) {
			return invalidRequest(msgThinkingNotFirst, i, m.Content.Blocks[first].Type)
		}
		if isThinking(m.Content.Blocks[len(m.Content.Blocks)-1].Type) && (r.Enabled() || i != len(r.Messages)-1) {
			return invalidRequest(msgThinkingLast, i)
		}
	}
	if lastAssistant < 0 {
		return nil
	}
	la := r.Messages[lastAssistant]
	if !r.Enabled() {
		// Thinking cannot be switched off inside an assistant turn: the last
		// assistant message may not carry thinking when it is the final
		// message (a prefill) or its tool loop is still open. Earlier turns'
		// thinking is dropped by the API, and so allowed.
		if lastAssistant != len(r.Messages)-1 && !openToolLoop(r.Messages) {
			return nil
		}
		for j, b := range la.Content.Blocks {
			if isThinking(b.Type) {
				return invalidRequest(msgThinkingWhenOff, lastAssistant, j)
			}
		}
		return nil
	}
	// Under adaptive thinking the model decides per turn whether to think,
	// and the provider accepts a loop whose last answer has no thinking
	// (docs/design.md §4a).
	if r.Thinking.Type != "adaptive" && openToolLoop(r.Messages) && len(la.Content.Blocks) > 0 && !isThinking(la.Content.Blocks[0].Type) {
		return invalidRequest(msgOpenLoopNoThinking, lastAssistant, la.Content.Blocks[0].Type)
	}
	return nil
}

// openToolLoop reports whether the request ends with tool results: the model
// is asked to continue the tool loop of the last assistant message.
func openToolLoop(msgs []Message) bool {
	last := msgs[len(msgs)-1]
	if last.Role != "user" {
		return false
	}
	for _, b := range last.Content.Blocks {
		if b.Type == "tool_result" {
			return true
		}
	}
	return false
}
