package anthropic

import (
	"encoding/json"
	"fmt"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/rawjson"
)

// ClientViolations checks what of docs/design.md §4a a Messages API
// client's own request decides, without parsing the history ctxd already holds: the rules of
// one message on the new messages (no empty text or message, thinking
// first and not last), the first message's role when the request's
// messages are all new (a user message first), and the rules of the request's tail (the final
// assistant message of an open tool loop starts with thinking when the
// client enabled it; no thinking in a final assistant message when it did
// not), on the messages from the last assistant one on. msgs are the
// request's messages, of which the first prefix are a fixed prefix and
// those from from on are new; added is the new ones parsed; thinking is
// the request's thinking member (nil when absent). Indexes are msgs'.
// The rules are the Messages API's (OpenAI's accept, e.g., an empty
// content).
func ClientViolations(msgs []json.RawMessage, prefix int, thinking json.RawMessage, added []history.Message, from int) history.Violations {
	var vs history.Violations
	// A new user or system message without content has no canonical
	// message (ParseMessage gives none): recorded, it would vanish, and
	// the request sent would be another (a prefill when it was the last).
	for i := max(from, prefix); i < len(msgs); i++ {
		if role, empty := emptyMessage(msgs[i]); empty {
			vs = append(vs, history.Violation{Index: i, Rule: history.RuleEmptyMessage,
				Message: fmt.Sprintf("messages[%d] (role %q) has no content; the provider refuses it (all messages must have non-empty content except for the optional final assistant message) and ctxd cannot record it", i, role)})
		}
	}
	for i := range added {
		if added[i].Role != history.RoleUser && added[i].Role != history.RoleAssistant {
			continue
		}
		for _, v := range history.CheckRequest(added[i:i+1], history.Rules{OpenTail: true}) {
			switch v.Rule {
			case history.RuleEmptyText, history.RuleEmptyMessage, history.RuleThinkingFirst, history.RuleThinkingLast:
				vs = append(vs, v)
			}
		}
	}
	if v, ok := firstNotUser(msgs, prefix, added, from); ok {
		vs = append(vs, v)
	}
	rules := history.Rules{Thinking: ThinkingMode(thinking), OpenTail: true}
	// The tail from the last assistant message (a few messages back). An
	// assistant message ctxd already holds (before from) is the provider's
	// answer as recorded or one a request the provider accepted carried:
	// not the client's new content (docs/design.md §4a).
	for i := len(msgs) - 1; i >= prefix && i >= len(msgs)-64; i-- {
		if Role(msgs[i]) != "assistant" {
			// Its role is enough: decoding a user message only to read it
			// copied all its text (tens of MB for a hostile body).
			continue
		}
		ms, err := ParseMessage(msgs[i], nil)
		if err != nil || len(ms) == 0 || ms[0].Role != history.RoleAssistant {
			continue
		}
		if i < from {
			break
		}
		tail, err := Dialect{}.Parse(msgs, i)
		if err != nil {
			break
		}
		for _, v := range history.CheckRequest(tail, rules) {
			switch v.Rule {
			case history.RuleLoopThinking, history.RuleThinkingOff:
				v.Index += i
				vs = append(vs, v)
			}
		}
		break
	}
	return vs
}

// emptyMessage reports whether the client's message raw, not an assistant
// one, has no content that ParseMessage keeps: content missing, null, ""
// or [], or a system message without text. role is its role.
func emptyMessage(raw json.RawMessage) (role string, empty bool) {
	var content []byte
	ok := rawjson.Members(raw, func(key string, vs, ve int) bool {
		switch key {
		case "role":
			_ = json.Unmarshal(raw[vs:ve], &role)
		case "content":
			content = raw[vs:ve]
		}
		return true
	})
	if !ok || role == "assistant" {
		return role, false
	}
	switch c := content; {
	case len(c) == 0 || string(c) == "null" || string(c) == `""`:
		return role, true
	case c[0] == '[' && rawjson.SkipSpace(content, 1) < len(content) && content[rawjson.SkipSpace(content, 1)] == ']':
		return role, true
	case role == "system":
		ms, err := ParseMessage(raw, nil)
		return role, err == nil && len(ms) == 0
	}
	return role, false
}

// firstNotUser checks the client's first message when all of msgs are new
// (from and prefix 0: a conversation's first request): the first one that
// is not a system message must be a user message, as the provider's rule
// (history.RuleFirstNotUser) reads the context ctxd would send from them.
// Its index is msgs'.
func firstNotUser(msgs []json.RawMessage, prefix int, added []history.Message, from int) (history.Violation, bool) {
	if from != 0 || prefix != 0 {
		return history.Violation{}, false
	}
	k := 0
	for k < len(added) && added[k].Role == history.RoleSystem {
		k++
	}
	if k == len(added) {
		return history.Violation{}, false
	}
	for _, v := range history.CheckRequest(added[k:k+1], history.Rules{OpenTail: true}) {
		if v.Rule != history.RuleFirstNotUser {
			continue
		}
		v.Index = 0
		for v.Index < len(msgs)-1 && Role(msgs[v.Index]) == "system" {
			v.Index++
		}
		return v, true
	}
	return history.Violation{}, false
}
