package history

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// The provider rules of docs/design.md §4a: what a context must satisfy for a
// provider to accept it. CheckRequest is the one validator; the engine runs
// it before a context is returned, and every test that renders a context
// runs it too. Its messages quote the providers' own 400 texts, so a
// violation reads like the refusal it prevents.

// ErrProviderRule is matched (errors.Is) by the error of Violations.Err: a
// context breaks a rule of docs/design.md §4a and must not be sent.
var ErrProviderRule = errors.New("the context breaks a provider rule")

// Thinking says whether a request enables extended thinking
// (docs/design.md §4a): the thinking rules differ.
type Thinking int

const (
	// ThinkingUnknown checks only the rules that hold either way: an
	// assistant message with thinking has it first, and none ends with
	// thinking.
	ThinkingUnknown Thinking = iota
	// ThinkingOn adds: the final assistant message of an open tool loop
	// starts with a thinking or redacted_thinking block.
	ThinkingOn
	// ThinkingOff adds: an assistant message in the final position carries
	// no thinking.
	ThinkingOff
	// ThinkingAdaptive is thinking of type "adaptive": the model decides per
	// turn whether to think, and the provider accepts an open tool loop
	// whose final assistant message has no thinking (docs/design.md §4a).
	// Only the rules that hold either way apply, as with ThinkingUnknown.
	ThinkingAdaptive
)

// opensWithOpaqueCompaction reports whether m is an assistant message
// that starts with an opaque compaction (the OpenAI Responses compaction
// item): a client that compacted with the provider sends it first, in
// place of everything it summarized, and the provider accepts it there.
func opensWithOpaqueCompaction(m Message) bool {
	if m.Role != RoleAssistant || len(m.Content) == 0 {
		return false
	}
	b := m.Content[0]
	return b.Type == BlockCompaction && b.Text == "" && b.Data != ""
}

// Rules tune CheckRequest.
type Rules struct {
	// Thinking is whether the request enables thinking.
	Thinking Thinking
	// OpenTail accepts calls still waiting on their result at the end of
	// the list: the agent has not appended them yet, so the context is not
	// a request yet (an inspection mid-round). Every other rule holds.
	OpenTail bool
}

// Rule names of a Violation.
const (
	RuleMissingResult   = "tool_result_missing"     // a call not answered in the next message
	RuleOrphanResult    = "tool_result_orphan"      // a result answering no call of the message before
	RuleDuplicateCallID = "tool_call_id_duplicate"  // a tool call id used twice
	RuleEmptyText       = "empty_text_block"        // a text block with no non-whitespace text
	RuleEmptyMessage    = "empty_message"           // a user or assistant message without content
	RuleFirstNotUser    = "first_message_not_user"  // the first message is not a user message
	RuleLoopThinking    = "loop_thinking_missing"   // final assistant of an open tool loop without leading thinking
	RuleThinkingFirst   = "thinking_not_first"      // an assistant message with thinking not starting with it
	RuleThinkingLast    = "thinking_last_block"     // an assistant message ending with thinking
	RuleThinkingOff     = "thinking_final_disabled" // thinking in a final assistant message, thinking off
)

// Violation is one broken rule: the message's index in the list given to
// CheckRequest, the rule's name and the provider's own words for it.
type Violation struct {
	Index   int    `json:"index"`
	Rule    string `json:"rule"`
	Message string `json:"message"`
}

// Error returns "message <index>: <rule>: <message>".
func (v Violation) Error() string {
	return fmt.Sprintf("message %d: %s: %s", v.Index, v.Rule, v.Message)
}

// Violations is what CheckRequest found, in message order.
type Violations []Violation

// Err returns nil when vs is empty, else an error wrapping ErrProviderRule
// that names the first violation and how many there are.
func (vs Violations) Err() error {
	if len(vs) == 0 {
		return nil
	}
	more := ""
	if len(vs) > 1 {
		more = fmt.Sprintf(" (and %d more)", len(vs)-1)
	}
	return fmt.Errorf("%w: %s%s", ErrProviderRule, vs[0].Error(), more)
}

// Provider texts, quoted from the 400 bodies (docs/testing.md,
// testdata/corpus/providers/error-bodies.json); %s is a call id.
const (
	textMissingResult = "`tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message."
	textOrphanResult  = "unexpected `tool_use_id` found in `tool_result` blocks: %s. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
	textDuplicateID   = "`tool_use` ids must be unique: %s"
	textEmptyText     = "text content blocks must be non-empty"
	textEmptyMessage  = "all messages must have non-empty content except for the optional final assistant message"
	textFirstNotUser  = "first message must use the \"user\" role"
	textLoopThinking  = "Expected `thinking` or `redacted_thinking`, but found `%s`. When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks)"
	// textLoopThinkingCall is textLoopThinking when the block found is a
	// tool call, which the provider's text names by its wire type.
	textLoopThinkingCall = "Expected `thinking` or `redacted_thinking`, but found `tool_use`. When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks)"
	textThinkingFirst    = "If an assistant message contains any thinking blocks, the first block must be thinking or redacted_thinking"
	textThinkingLast     = "The final block in an assistant message cannot be `thinking`"
	textThinkingOff      = "When `thinking` is disabled, an `assistant` message in the final position cannot contain `thinking`"
)

// CheckRequest checks msgs — the messages of a context as they are sent,
// after the system prompt and tool definitions (see Sendable) — against the
// provider rules of docs/design.md §4a, the strictest provider's (Anthropic's,
// which OpenAI's accept), and returns every violation in message order:
//
//   - every tool call has its result in the next message (the tool messages
//     right after it), every result answers a call of the assistant message
//     before its run of tool messages, and tool call ids are unique;
//   - no text block without non-whitespace text, no user or assistant
//     message without content; the first message is a user message;
//   - thinking (r.Thinking): an assistant message with thinking blocks has
//     one first and does not end with one; with thinking on, when the
//     request ends with tool results (an open tool loop) the final assistant
//     message starts with thinking or redacted_thinking, unless it names the
//     model that produced it (Message.Model: the provider's own answer,
//     which it accepts back as it gave it); with adaptive thinking that
//     rule does not apply (the model chose not to think); with thinking
//     off, an assistant message in the final position carries no thinking.
//
// A tool message's content may be empty (a result with no output). It does
// not check what validation at append covers (block fields, UTF-8).
func CheckRequest(msgs []Message, r Rules) Violations {
	var c Checker
	c.Extend(msgs)
	return c.Checked().Violations(r)
}

// Checker is CheckRequest made incremental: it reads a message list in
// pieces (Extend) and answers for the list read so far (Checked), so a
// list that only grows — a context between recorded rewrites — is checked
// once per message rather than once per request. For any split of msgs,
// Extend of each piece in order then Checked().Violations(r) equals
// CheckRequest(msgs, r). The zero value is an empty list. Not safe for
// concurrent use; a Checked is a copy that is.
type Checker struct {
	n       int
	seen    map[string]bool // every tool call id so far
	callsOf map[string]bool // the calls of the last assistant message, unanswered
	pending []string        // the same, in order
	inRun   bool            // the messages since the last assistant with calls are all tool messages
	vs      Violations
	tail    tailState
}

// tailState is what the rules at the end of the list (docs/design.md §4a:
// thinking, an open tool loop) read of the list.
type tailState struct {
	lastRole     Role
	lastThinking bool // the last message carries a thinking block
	asst         int  // index of the newest assistant message, -1 when none
	asstFirst    BlockType
	asstEmpty    bool // it has no content
	// asstProduced: it names the model that produced it (Message.Model),
	// so it is an answer as the provider gave it, not a client's edit.
	asstProduced bool
}

// Len is the number of messages read, in the list's indexes.
func (c *Checker) Len() int { return c.n }

// Extend reads msgs as the next messages of the list; violations carry
// their index in the whole list.
func (c *Checker) Extend(msgs []Message) {
	if c.seen == nil {
		c.seen, c.callsOf, c.tail.asst = map[string]bool{}, map[string]bool{}, -1
	}
	add := func(i int, rule, format string, args ...any) {
		c.vs = append(c.vs, Violation{Index: i, Rule: rule, Message: fmt.Sprintf(format, args...)})
	}
	for k := range msgs {
		m, i := &msgs[k], c.n
		c.n++
		c.tail.lastRole, c.tail.lastThinking = m.Role, false
		if m.Role != RoleTool && c.inRun {
			c.flush(i-1, add)
			c.inRun = false
		}
		if i == 0 && m.Role != RoleUser && !opensWithOpaqueCompaction(*m) {
			add(i, RuleFirstNotUser, textFirstNotUser)
		}
		switch m.Role {
		case RoleTool:
			if !c.inRun || !c.callsOf[m.ToolCallID] {
				add(i, RuleOrphanResult, textOrphanResult, m.ToolCallID)
				continue
			}
			delete(c.callsOf, m.ToolCallID)
			if j := slices.Index(c.pending, m.ToolCallID); j >= 0 {
				c.pending = slices.Delete(c.pending, j, j+1)
			}
		case RoleUser, RoleAssistant, RoleSystem:
			if len(m.Content) == 0 {
				add(i, RuleEmptyMessage, textEmptyMessage)
			}
			for _, b := range m.Content {
				if b.Type == BlockText && strings.TrimSpace(b.Text) == "" {
					add(i, RuleEmptyText, textEmptyText)
					break
				}
			}
			if m.Role != RoleAssistant {
				continue
			}
			c.tail.asst, c.tail.asstEmpty, c.tail.asstProduced = i, len(m.Content) == 0, m.Model != ""
			if len(m.Content) > 0 {
				c.tail.asstFirst = m.Content[0].Type
			}
			c.tail.lastThinking = slices.ContainsFunc(m.Content, isThinkingBlock)
			checkThinkingOrder(i, m, add)
			for _, b := range m.Content {
				if b.Type != BlockToolCall {
					continue
				}
				if c.seen[b.ID] {
					add(i, RuleDuplicateCallID, textDuplicateID, b.ID)
					continue
				}
				c.seen[b.ID] = true
				c.callsOf[b.ID] = true
				c.pending = append(c.pending, b.ID)
			}
			c.inRun = len(c.callsOf) > 0
		}
	}
}

// flush reports the calls of the run of results that ended at message at
// unanswered.
func (c *Checker) flush(at int, add func(int, string, string, ...any)) {
	for _, id := range c.pending {
		add(at, RuleMissingResult, textMissingResult, id)
	}
	c.pending = c.pending[:0]
	clear(c.callsOf)
}

// Checked returns the answer for the list read so far, a copy that later
// Extends leave alone.
func (c *Checker) Checked() Checked {
	ck := Checked{n: c.n, vs: slices.Clone(c.vs), tail: c.tail}
	if c.inRun {
		ck.pending = slices.Clone(c.pending)
	}
	if c.seen == nil {
		ck.tail.asst = -1
	}
	return ck
}

// Checked is a Checker's answer for the list it had read: its violations
// under any Rules (Violations).
type Checked struct {
	n       int
	vs      Violations
	pending []string // calls unanswered at the end (an open run of results)
	tail    tailState
}

// Len is the number of messages of the list checked.
func (ck Checked) Len() int { return ck.n }

// Violations returns every violation of the list under r, in message
// order: what CheckRequest(list, r) returns.
func (ck Checked) Violations(r Rules) Violations {
	vs := slices.Clone(ck.vs)
	add := func(i int, rule, format string, args ...any) {
		vs = append(vs, Violation{Index: i, Rule: rule, Message: fmt.Sprintf(format, args...)})
	}
	if !r.OpenTail {
		for _, id := range ck.pending {
			add(ck.n-1, RuleMissingResult, textMissingResult, id)
		}
	}
	if ck.n > 0 {
		t := ck.tail
		switch {
		case r.Thinking == ThinkingOn && t.lastRole == RoleTool:
			// An open tool loop: its final assistant message must start
			// with its thinking — unless the provider itself produced it
			// without thinking (docs/design.md §4a: the rules follow what
			// the provider accepts).
			if t.asst >= 0 && !t.asstEmpty && !t.asstProduced && !isThinkingBlock(Block{Type: t.asstFirst}) {
				if t.asstFirst == BlockToolCall {
					// The provider names the block by its own type.
					add(t.asst, RuleLoopThinking, textLoopThinkingCall)
				} else {
					add(t.asst, RuleLoopThinking, textLoopThinking, t.asstFirst)
				}
			}
		case r.Thinking == ThinkingOff && t.lastRole == RoleAssistant && t.lastThinking:
			add(ck.n-1, RuleThinkingOff, textThinkingOff)
		}
	}
	return vs
}

func checkThinkingOrder(i int, m *Message, add func(int, string, string, ...any)) {
	has := false
	for _, b := range m.Content {
		if isThinkingBlock(b) {
			has = true
			break
		}
	}
	if !has {
		return
	}
	// A provider compaction block comes before the answer's thinking
	// (the provider compacts before it samples) and drops what precedes
	// it: the thinking comes first after it.
	first := 0
	for first < len(m.Content)-1 && m.Content[first].Type == BlockCompaction {
		first++
	}
	if !isThinkingBlock(m.Content[first]) {
		add(i, RuleThinkingFirst, textThinkingFirst)
	}
	if isThinkingBlock(m.Content[len(m.Content)-1]) {
		add(i, RuleThinkingLast, textThinkingLast)
	}
}

func isThinkingBlock(b Block) bool {
	return b.Type == BlockThinking || b.Type == BlockRedactedThinking
}

// Sendable returns msgs as the Anthropic renderer (summarizer's
// RenderAnthropic) sends them: text blocks holding only whitespace
// dropped, and user and assistant messages left without content omitted (a
// model's empty end_turn answer is one; the provider joins the turns around
// it). Tool messages are kept even when empty. msgs is returned as is when
// nothing is dropped; otherwise a new slice whose changed messages are
// copies. Validate what Sendable returns.
func Sendable(msgs []Message) []Message {
	var out []Message
	for i := range msgs {
		m := msgs[i]
		drop := 0
		for _, b := range m.Content {
			if b.Type == BlockText && strings.TrimSpace(b.Text) == "" {
				drop++
			}
		}
		if drop == 0 && (len(m.Content) > 0 || m.Role == RoleTool) {
			if out != nil {
				out = append(out, m)
			}
			continue
		}
		if out == nil {
			out = append(make([]Message, 0, len(msgs)), msgs[:i]...)
		}
		kept := make([]Block, 0, len(m.Content)-drop)
		for _, b := range m.Content {
			if !(b.Type == BlockText && strings.TrimSpace(b.Text) == "") {
				kept = append(kept, b)
			}
		}
		m.Content = kept
		if len(kept) == 0 && m.Role != RoleTool {
			continue
		}
		out = append(out, m)
	}
	if out == nil {
		return msgs
	}
	return out
}

// InterruptedText replaces the content of an assistant message made only of
// thinking blocks once DropTrailingThinking removed them: a response
// interrupted while it was reasoning, which providers refuse to be sent
// back as it is, and a message needs content.
const InterruptedText = "[a response interrupted while reasoning; its reasoning is not replayed]"

// DropTrailingThinking returns m without the thinking and redacted_thinking
// blocks that end it, and true, when m is an assistant message ending with
// one: providers refuse it ("The final block in an assistant message cannot
// be `thinking`", docs/design.md §4a) — an agent stores one when a response was
// interrupted while reasoning. Whole blocks are dropped, never edited; a
// message left empty holds one text block, InterruptedText. The copy shares
// no slice with m and has Tokens 0. Any other message is returned as is,
// with false.
func DropTrailingThinking(m Message) (Message, bool) {
	n := len(m.Content)
	if m.Role != RoleAssistant || n == 0 || !isThinkingBlock(m.Content[n-1]) {
		return m, false
	}
	for n > 0 && isThinkingBlock(m.Content[n-1]) {
		n--
	}
	out := m
	out.Content = append([]Block(nil), m.Content[:n]...)
	if n == 0 {
		out.Content = []Block{{Type: BlockText, Text: InterruptedText}}
	}
	out.Tokens = 0
	return out, true
}
