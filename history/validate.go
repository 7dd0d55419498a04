package history

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrInvalid is matched (errors.Is) by every *ValidationError: the message
// breaks a rule of docs/design.md §2. The API layer maps it to a 400.
var ErrInvalid = errors.New("invalid message")

// ValidationError says which message broke which rule of docs/design.md §2, and in
// which field, so an API error body can point at it.
type ValidationError struct {
	// Index is the message's index in the batch given to ValidateBatch, or
	// -1 when a single message was checked.
	Index int
	// Field is the JSON path of the offending field within the message, as
	// encoded: "role", "tool_call_id", "content[1].type", "content[0].input".
	Field string
	// Message says what is wrong, without the index and field.
	Message string
}

// Error returns "message <index>: <field>: <message>", leaving out the index
// when it is -1.
func (e *ValidationError) Error() string {
	if e.Index < 0 {
		return e.Field + ": " + e.Message
	}
	return fmt.Sprintf("message %d: %s: %s", e.Index, e.Field, e.Message)
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

func invalid(field, format string, args ...any) *ValidationError {
	return &ValidationError{Index: -1, Field: field, Message: fmt.Sprintf(format, args...)}
}

// State is what validation needs to know of a session's history: the open
// tool calls (in call order) and every tool call id used so far
// (docs/design.md §2). Its zero value is the state of an empty history. Rebuild
// it after a restart with NewState.
//
// A State is not safe for concurrent use; a session serializes its appends.
type State struct {
	open []Call          // unanswered calls, in call order
	seen map[string]bool // every call id ever used
	// base holds call ids of the State a batch started from, read-only, so
	// ValidateBatch need not copy them.
	base map[string]bool
	n    int // messages applied: the Index of the next call
}

// NewState returns the state after msgs, applying each in order without
// checking it.
func NewState(msgs []Message) *State {
	s := &State{}
	for i := range msgs {
		s.Apply(msgs[i])
	}
	return s
}

// Clone returns an independent copy of s: applying messages to either leaves
// the other unchanged. It copies the call ids, O(ids).
func (s *State) Clone() *State {
	t := &State{open: slices.Clone(s.open), n: s.n}
	if len(s.seen)+len(s.base) > 0 {
		t.seen = make(map[string]bool, len(s.seen)+len(s.base))
		for id := range s.base {
			t.seen[id] = true
		}
		for id := range s.seen {
			t.seen[id] = true
		}
	}
	return t
}

// Open returns the open tool calls in call order: the calls of the open
// tool round, or nil. Call.Index counts messages applied to the state.
func (s *State) Open() []Call { return slices.Clone(s.open) }

// Len is the number of messages applied.
func (s *State) Len() int { return s.n }

func (s *State) used(id string) bool { return s.seen[id] || s.base[id] }

func (s *State) openIndex(id string) int {
	for i, c := range s.open {
		if c.ID == id {
			return i
		}
	}
	return -1
}

// Check reports whether m may be appended after the state's history, without
// changing the state. The rules (docs/design.md §2):
//   - role is user, assistant, tool or system;
//   - a system message holds text and json blocks only (a provider's
//     block kept whole: Anthropic's tool_addition, tool_removal), at
//     least one, and is
//     refused while calls are open (their results come first);
//   - every string field, and Input and JSON, is valid UTF-8;
//   - every block has a known type and only the fields of that type;
//     tool_call blocks (id, name and JSON input, all required, the id never
//     used before), thinking and redacted_thinking blocks only in assistant
//     messages; images need a media_type of ImageMediaTypes and exactly
//     one of data or an artifact:// reference; json blocks need valid JSON;
//   - a tool message answers an open call: tool_call_id names it, tool_name
//     (when given) matches its name; its content holds text, image and json
//     blocks only;
//   - tool_call_id, tool_name and is_error only on tool messages; usage and
//     model only on assistant messages;
//   - a user message is refused while calls are open: append the results
//     Abandon returns first (an abandoned round);
//   - an assistant message is refused while calls are open, naming the
//     first: the provider wants every result in the message right after
//     its call (docs/design.md §4a; docs/decisions.md).
//
// It returns a *ValidationError (Index -1) for the first rule broken.
func (s *State) Check(m Message) error {
	if err := checkFields(&m); err != nil {
		return err
	}
	switch m.Role {
	case RoleTool:
		if m.ToolCallID == "" {
			return invalid("tool_call_id", "required on a tool message")
		}
		i := s.openIndex(m.ToolCallID)
		if i < 0 {
			if s.used(m.ToolCallID) {
				return invalid("tool_call_id", "tool call %q is not open: already answered or abandoned", m.ToolCallID)
			}
			return invalid("tool_call_id", "no tool call %q in the history", m.ToolCallID)
		}
		if m.ToolName != "" && m.ToolName != s.open[i].Name {
			return invalid("tool_name", "%q does not match the call's tool %q", m.ToolName, s.open[i].Name)
		}
	case RoleAssistant:
		if len(s.open) > 0 {
			// The provider wants every call's result in the next message
			// (docs/design.md §4a); a response can only follow the results.
			return invalid("role", "an assistant message while tool call %q (%s) is open: append its result first", s.open[0].ID, s.open[0].Name)
		}
		var ids map[string]bool
		for i, b := range m.Content {
			if b.Type != BlockToolCall {
				continue
			}
			if s.used(b.ID) || ids[b.ID] {
				return invalid(fmt.Sprintf("content[%d].id", i), "duplicate tool call id %q", b.ID)
			}
			if ids == nil {
				ids = map[string]bool{}
			}
			ids[b.ID] = true
		}
	case RoleSystem:
		if len(m.Content) == 0 {
			return invalid("content", "a system message needs at least one block")
		}
		if len(s.open) > 0 {
			return invalid("role", "a system message while tool call %q (%s) is open: append its result first", s.open[0].ID, s.open[0].Name)
		}
	case RoleUser:
		if len(m.Content) == 0 {
			// Providers refuse an empty user turn.
			return invalid("content", "a user message needs at least one block")
		}
		if len(s.open) > 0 {
			return invalid("role", "a user message while %d tool call(s) are open (first %q): append their abandoned-round results first", len(s.open), s.open[0].ID)
		}
	}
	return nil
}

// checkFields applies the rules that need no history.
func checkFields(m *Message) error {
	if f, bad := invalidUTF8(m); bad {
		return invalid(f, "invalid UTF-8")
	}
	switch m.Role {
	case RoleUser, RoleAssistant, RoleTool, RoleSystem:
	case "":
		return invalid("role", "empty role (want user, assistant, tool or system)")
	default:
		return invalid("role", "unknown role %q (want user, assistant, tool or system)", m.Role)
	}
	if m.Role == RoleSystem {
		for i, b := range m.Content {
			if b.Type != BlockText && b.Type != BlockJSON {
				return invalid(fmt.Sprintf("content[%d].type", i), "a system message holds text and json blocks only, not %q", b.Type)
			}
		}
	}
	if m.Role != RoleTool {
		switch {
		case m.ToolCallID != "":
			return invalid("tool_call_id", "only on a tool message")
		case m.ToolName != "":
			return invalid("tool_name", "only on a tool message")
		case m.IsError:
			return invalid("is_error", "only on a tool message")
		}
	}
	if m.Joined && m.Role != RoleUser {
		return invalid("joined", "only on a user message")
	}
	if m.Role != RoleAssistant {
		switch {
		case m.Usage != nil:
			return invalid("usage", "only on an assistant message")
		case m.Model != "":
			return invalid("model", "only on an assistant message")
		}
	}
	if m.Usage != nil {
		if err := checkUsage(*m.Usage); err != nil {
			return err
		}
	}
	for i := range m.Content {
		if err := checkBlock(m.Role, &m.Content[i]); err != nil {
			err.Field = fmt.Sprintf("content[%d].%s", i, err.Field)
			return err
		}
	}
	return nil
}

// MaxUsageTokens bounds each count of a reported Usage, in tokens: 10^9,
// a hundred times the largest context window a model offers today. A
// larger count is not a measurement but a client bug (or 2^64-1 sent to
// make the sums wrap), and is refused with its field named, so that the
// post-check's sum of four counts (at most 4·10^9) never wraps.
const MaxUsageTokens = 1_000_000_000

// checkUsage refuses a count above MaxUsageTokens.
func checkUsage(u Usage) error {
	for _, f := range []struct {
		name string
		n    uint64
	}{
		{"input_tokens", u.InputTokens},
		{"cache_creation_input_tokens", u.CacheCreationInputTokens},
		{"cache_read_input_tokens", u.CacheReadInputTokens},
		{"output_tokens", u.OutputTokens},
		{"cache_creation_1h_input_tokens", u.CacheCreation1hInputTokens},
		{"cleared_input_tokens", u.ClearedInputTokens},
	} {
		if f.n > MaxUsageTokens {
			return invalid("usage."+f.name, "%d tokens is beyond any context window (at most %d per count)", f.n, MaxUsageTokens)
		}
	}
	if u.CacheCreation1hInputTokens > u.CacheCreationInputTokens {
		return invalid("usage.cache_creation_1h_input_tokens", "%d tokens is more than cache_creation_input_tokens (%d), of which it is a part", u.CacheCreation1hInputTokens, u.CacheCreationInputTokens)
	}
	return nil
}

// blockFields lists the fields each block type may set, besides type.
var blockFields = map[BlockType][]string{
	BlockText:             {"text", "raw"},
	BlockThinking:         {"text", "signature"},
	BlockRedactedThinking: {"data"},
	BlockToolCall:         {"id", "name", "input"},
	BlockImage:            {"media_type", "data", "artifact", "raw"},
	BlockJSON:             {"json"},
	BlockCompaction:       {"text", "data"},
}

// IsObject reports whether raw, valid JSON, is an object.
func IsObject(raw json.RawMessage) bool {
	t := bytes.TrimLeft(raw, " \t\r\n")
	return len(t) > 0 && t[0] == '{'
}

// ObjectInput returns raw when it is a JSON object, else {"input": raw}: how
// an importer keeps a tool call whose recorded input is a string or another
// value (Codex custom tools) in the shape providers require.
func ObjectInput(raw json.RawMessage) json.RawMessage {
	if IsObject(raw) {
		return raw
	}
	if len(bytes.TrimSpace(raw)) == 0 || !json.Valid(raw) {
		return json.RawMessage(`{}`)
	}
	out, _ := json.Marshal(map[string]json.RawMessage{"input": raw})
	return out
}

func validBase64(s string) bool {
	_, err := base64.StdEncoding.DecodeString(s)
	return err == nil
}

// ImageMediaTypes are the media types of an image block: the ones both
// providers accept (Anthropic's image source and OpenAI's image_url take
// JPEG, PNG, GIF and WebP only). Any other is refused at append, so no
// rendered context carries an image the provider refuses (docs/design.md §4a).
var ImageMediaTypes = []string{"image/jpeg", "image/png", "image/gif", "image/webp"}

// ArtifactScheme prefixes an artifact reference in an image block.
const ArtifactScheme = "artifact://"

// checkBlock returns an error whose Field is relative to the block.
func checkBlock(role Role, b *Block) *ValidationError {
	allowed, ok := blockFields[b.Type]
	if !ok {
		return invalid("type", "unknown block type %q", b.Type)
	}
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"text", b.Text != ""},
		{"signature", b.Signature != ""},
		{"data", b.Data != ""},
		{"id", b.ID != ""},
		{"name", b.Name != ""},
		{"input", len(b.Input) > 0},
		{"media_type", b.MediaType != ""},
		{"artifact", b.Artifact != ""},
		{"json", len(b.JSON) > 0},
		{"raw", len(b.Raw) > 0},
	} {
		if f.set && !slices.Contains(allowed, f.name) {
			return invalid(f.name, "not a field of a %s block", b.Type)
		}
	}
	if len(b.Raw) > 0 && (!json.Valid(b.Raw) || !IsObject(b.Raw)) {
		return invalid("raw", "not a JSON object")
	}
	switch b.Type {
	case BlockText:
		if b.Text == "" {
			// Providers refuse it (Anthropic: "text content blocks must be
			// non-empty"), so the next request would fail.
			return invalid("text", "an empty text block; providers refuse it: leave the block out")
		}
	case BlockToolCall:
		switch {
		case role != RoleAssistant:
			return invalid("type", "tool_call blocks only in assistant messages")
		case b.ID == "":
			return invalid("id", "required on a tool_call block")
		case b.Name == "":
			return invalid("name", "required on a tool_call block")
		case len(b.Input) == 0:
			return invalid("input", "required on a tool_call block ({} for no arguments)")
		case !json.Valid(b.Input):
			return invalid("input", "invalid JSON")
		case !IsObject(b.Input):
			return invalid("input", "must be a JSON object, as providers require ({} for no arguments)")
		}
	case BlockCompaction:
		if role != RoleAssistant {
			return invalid("type", "compaction blocks only in assistant messages")
		}
	case BlockThinking, BlockRedactedThinking:
		if role != RoleAssistant {
			return invalid("type", "%s blocks only in assistant messages", b.Type)
		}
		if b.Type == BlockRedactedThinking && b.Data == "" {
			return invalid("data", "required on a redacted_thinking block")
		}
	case BlockImage:
		switch {
		case b.MediaType == "":
			return invalid("media_type", "required on an image block")
		case !slices.Contains(ImageMediaTypes, b.MediaType):
			return invalid("media_type", "%q is not an image type the providers accept (one of %s)", b.MediaType, strings.Join(ImageMediaTypes, ", "))
		case b.Data == "" && b.Artifact == "":
			return invalid("data", "an image needs data or an artifact reference")
		case b.Data != "" && b.Artifact != "":
			return invalid("artifact", "an image has data or an artifact reference, not both")
		case b.Artifact != "" && !strings.HasPrefix(b.Artifact, ArtifactScheme):
			return invalid("artifact", "%q is not an %s reference", b.Artifact, ArtifactScheme)
		case b.Data != "" && !validBase64(b.Data):
			return invalid("data", "not valid base64 (standard alphabet, padded)")
		}
	case BlockJSON:
		switch {
		case len(b.JSON) == 0:
			return invalid("json", "required on a json block")
		case !json.Valid(b.JSON):
			return invalid("json", "invalid JSON")
		}
	}
	return nil
}

// Apply records m as appended: its tool calls open, the call a tool message
// answers closes, and a user message closes every open call (they are
// abandoned). Apply does not validate: call Check first. Applying an
// invalid message leaves the state consistent with what Groups reports for
// the same history.
func (s *State) Apply(m Message) {
	switch m.Role {
	case RoleAssistant:
		for _, b := range m.Content {
			if b.Type != BlockToolCall || s.used(b.ID) {
				continue
			}
			if s.seen == nil {
				s.seen = map[string]bool{}
			}
			s.seen[b.ID] = true
			s.open = append(s.open, Call{ID: b.ID, Name: b.Name, Index: s.n})
		}
	case RoleTool:
		if i := s.openIndex(m.ToolCallID); i >= 0 {
			s.open = slices.Delete(s.open, i, i+1)
		}
	case RoleUser:
		s.open = s.open[:0]
	}
	s.n++
}

// ValidateBatch checks msgs as appended in order after the history s stands
// for, each against the state left by the ones before it. It does not
// change s; apply the messages after it succeeds. It returns the first
// *ValidationError, with Index set to the message's index in msgs.
func ValidateBatch(s *State, msgs []Message) error {
	if s == nil {
		s = &State{}
	}
	t := overlay(s)
	for i := range msgs {
		if err := t.Check(msgs[i]); err != nil {
			var ve *ValidationError
			if errors.As(err, &ve) {
				ve.Index = i
			}
			return err
		}
		t.Apply(msgs[i])
	}
	return nil
}

// overlay returns a State that starts as s and records changes apart from
// it, so s is left as it was without copying its call ids.
func overlay(s *State) *State {
	t := &State{open: slices.Clone(s.open), base: s.seen, n: s.n}
	if s.base != nil { // s is itself an overlay: flatten
		t.base = make(map[string]bool, len(s.seen)+len(s.base))
		for id := range s.base {
			t.base[id] = true
		}
		for id := range s.seen {
			t.base[id] = true
		}
	}
	return t
}

// AbandonedText is the text of the error result that closes an abandoned
// tool call (docs/design.md §2).
const AbandonedText = "tool call abandoned: no result was recorded"

// Abandon returns the error tool results to append before next when next is
// a user message arriving while tool calls are open (an abandoned round,
// docs/design.md §2): one per open call, in call order, each with role tool,
// is_error, tool_call_id and tool_name set, the text AbandonedText, and
// next's Time. It returns nil when next is not a user message or no call is
// open. It does not change s: append and Apply the results, then next.
func (s *State) Abandon(next Message) []Message {
	if next.Role != RoleUser || len(s.open) == 0 {
		return nil
	}
	out := make([]Message, len(s.open))
	for i, c := range s.open {
		out[i] = abandonedResult(c, next)
	}
	return out
}

func abandonedResult(c Call, next Message) Message {
	return Message{
		Role:       RoleTool,
		Content:    []Block{{Type: BlockText, Text: AbandonedText}},
		ToolCallID: c.ID,
		ToolName:   c.Name,
		IsError:    true,
		Time:       next.Time,
	}
}

// CloseAbandoned returns msgs with the abandoned-round results of
// docs/design.md §2 inserted before every user message that arrives while tool
// calls are open, as Abandon builds them, and the calls it closed. s is the
// state before msgs (nil for an empty history) and is not changed; a Call's
// Index counts from the start of s's history, so with a nil s it is an index
// into msgs. Calls still open at the end stay open. msgs is returned
// as is when nothing is inserted. For importers: a transcript whose agent was
// interrupted becomes a history a provider accepts.
func CloseAbandoned(s *State, msgs []Message) ([]Message, []Call) {
	if s == nil {
		s = &State{}
	}
	t := overlay(s)
	var out []Message
	var closed []Call
	for i := range msgs {
		if r := t.Abandon(msgs[i]); r != nil {
			if out == nil {
				out = make([]Message, 0, len(msgs)+len(r))
				out = append(out, msgs[:i]...)
			}
			out = append(out, r...)
			closed = append(closed, t.open...)
		}
		if out != nil {
			out = append(out, msgs[i])
		}
		t.Apply(msgs[i])
	}
	if out == nil {
		return msgs, nil
	}
	return out, closed
}
