// Package contextedit is ctxd's second context layer (docs/design.md §6 "Context
// editing"): old tool results already in a session's history are replaced by
// one-line stubs, in rare recorded passes, so that between passes every
// request is a byte-for-byte extension of the previous one and the prompt
// cache stays valid.
//
// Plan decides whether a pass fires; the engine records the returned Pass in
// the session's event log and applies it to the session's Ledger; Render
// applies the ledger to each stored message as it is sent. Replaying the
// recorded passes in order after a restart rebuilds the same ledger, hence
// byte-identical requests. Mode "server" makes no local edits: ServerEdit
// gives the provider's equivalent parameter instead.
//
// Units (docs/design.md §2 "Units"): every size is in characters, Unicode code
// points. The package does no I/O and calls no summarizer.
package contextedit

import (
	"encoding/json"
	"maps"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
)

// Pass is one recorded context-edit pass: the Data of the engine's
// context_edit event (docs/design.md §6).
type Pass struct {
	// Elided is the tool_call_ids of the results elided by this pass, in
	// history order.
	Elided []string `json:"elided"`
	// ElidedCount is len(Elided).
	ElidedCount int `json:"elided_count"`
	// CharsSaved is the characters (code points) of the elided results'
	// stored content minus the characters of the stubs replacing them.
	CharsSaved uint64 `json:"chars_saved"`
	// WithheldThinkingBefore is a seq: the thinking and redacted_thinking
	// blocks of assistant messages with a smaller seq are no longer
	// replayed. Set only for models with thinking_binding; 0 otherwise.
	WithheldThinkingBefore uint64 `json:"withheld_thinking_before,omitempty"`
	// Inputs are the tool calls whose input string fields this pass
	// cleared (clear_tool_inputs, docs/design.md §6), in history order. The
	// field names are recorded, not re-derived from the configuration, so a
	// resume rebuilds byte-identical requests.
	Inputs []ClearedInput `json:"inputs,omitempty"`
	// Weighed is what the pass was expected to cost and save when it
	// fired (docs/design.md §4); nil in passes recorded before it existed.
	Weighed *Weighing `json:"weighed,omitempty"`
}

// Weighing is a pass's cache cost against its savings, in estimated
// tokens, as the engine decided it: the pass fires only when
// SavedTokens × 0.1 × Requests ≥ RewrittenTokens × 1.15 (a cache read
// costs 0.1 of an input token, a write 1.25, so a token rewritten costs
// 1.15 more than one read), or when Requests is unknown (no window).
type Weighing struct {
	// RewrittenTokens is what the next request writes to the cache again
	// from the first message the pass changes on; SavedTokens what each
	// later request no longer sends.
	RewrittenTokens uint64 `json:"rewritten_tokens"`
	SavedTokens     uint64 `json:"saved_tokens"`
	// Requests is the requests expected before the next compaction
	// rewrites the context anyway (what is left under the threshold over
	// the session's growth per answer); 0 when the window is unknown.
	Requests uint64 `json:"requests"`
}

// PaysBack reports whether the pass's savings over Requests requests pay
// for its rewrite; true when Requests is 0 (unknown: nothing to weigh).
func (w Weighing) PaysBack() bool {
	if w.Requests == 0 {
		return true
	}
	// saved × 0.1 × requests ≥ rewritten × 1.15, in integers.
	return w.SavedTokens*w.Requests >= w.RewrittenTokens*23/2
}

// ClearedInput is one tool call whose input lost string fields to a pass.
type ClearedInput struct {
	// ID is the tool call's id.
	ID string `json:"id"`
	// Fields are the JSON Pointers (RFC 6901) of the string values of its
	// input sent as InputStub: "/content" for a top-level field,
	// "/edits/0/old_string" or "/command/2" inside objects and arrays.
	Fields []string `json:"fields"`
}

// Ledger is the set of recorded context-edit passes of a session: the
// elided tool_call_ids and the withheld-thinking point. Rebuilt identically
// from the log's context_edit events after a restart by applying them in
// order. The zero value is an empty ledger; a nil *Ledger reads as empty.
// A Ledger is not safe for concurrent use: its session serializes access,
// as it does for its history.
type Ledger struct {
	elided map[string]struct{}
	inputs map[string][]string // call id → cleared input fields
	// cleared caches each cleared call's rendered input: a call's input
	// never changes, nor its cleared fields once recorded (a call is
	// cleared once), so it is computed on first use, not on every request.
	cleared  map[string]json.RawMessage
	withheld uint64
	passes   int
}

// Apply records p, live or when replaying the log. Elided ids accumulate;
// the withheld-thinking point only moves forward (the larger of the
// ledger's and p's), so applying passes in order is all a rebuild needs.
func (l *Ledger) Apply(p Pass) {
	if l.elided == nil {
		l.elided = make(map[string]struct{}, len(p.Elided))
	}
	for _, id := range p.Elided {
		l.elided[id] = struct{}{}
	}
	for _, in := range p.Inputs {
		if l.inputs == nil {
			l.inputs = map[string][]string{}
		}
		l.inputs[in.ID] = append(l.inputs[in.ID], in.Fields...)
	}
	l.withheld = max(l.withheld, p.WithheldThinkingBefore)
	l.passes++
}

// Clone returns a copy of l that Apply on it leaves l as it is: what a
// pass would change, weighed before it is recorded.
func (l *Ledger) Clone() Ledger {
	c := Ledger{withheld: l.withheld, passes: l.passes, elided: maps.Clone(l.elided), cleared: maps.Clone(l.cleared)}
	if l.inputs != nil {
		c.inputs = make(map[string][]string, len(l.inputs))
		for k, v := range l.inputs {
			c.inputs[k] = append([]string(nil), v...)
		}
	}
	return c
}

// Withhold moves the withheld-thinking point forward to seq (never back):
// the other recorded rewrites — a compaction, a new system prompt or tool
// set — invalidate the thinking before them too (docs/design.md §4).
func (l *Ledger) Withhold(seq uint64) {
	l.withheld = max(l.withheld, seq)
}

// Elided reports whether the result answering toolCallID has been elided.
func (l *Ledger) Elided(toolCallID string) bool {
	if l == nil {
		return false
	}
	_, ok := l.elided[toolCallID]
	return ok
}

// WithheldThinkingBefore returns the seq before which assistant messages
// are sent without their thinking blocks; 0 when none are withheld.
func (l *Ledger) WithheldThinkingBefore() uint64 {
	if l == nil {
		return 0
	}
	return l.withheld
}

// InputCleared reports whether a pass cleared fields of the input of the
// tool call with id toolCallID.
func (l *Ledger) InputCleared(toolCallID string) bool {
	if l == nil {
		return false
	}
	_, ok := l.inputs[toolCallID]
	return ok
}

// Changes reports whether Render sends m otherwise than stored: an elided
// result, an assistant message whose thinking is withheld or one of whose
// calls had input fields cleared.
func (l *Ledger) Changes(m history.Message) bool {
	switch m.Role {
	case history.RoleTool:
		return l.Elided(m.ToolCallID)
	case history.RoleAssistant:
		if m.Seq < l.WithheldThinkingBefore() && HasThinking(m) {
			return true
		}
		for _, b := range m.Content {
			if b.Type == history.BlockToolCall && l.InputCleared(b.ID) {
				return true
			}
		}
	}
	return false
}

// clearedInput returns call b's input as sent after its fields were
// cleared, from the cache when it holds it.
func (l *Ledger) clearedInput(b history.Block) json.RawMessage {
	if in, ok := l.cleared[b.ID]; ok {
		return in
	}
	in := clearInput(b.Input, l.inputs[b.ID])
	if l.cleared == nil {
		l.cleared = map[string]json.RawMessage{}
	}
	l.cleared[b.ID] = in
	return in
}

// Passes returns the number of passes applied.
func (l *Ledger) Passes() int {
	if l == nil {
		return 0
	}
	return l.passes
}

// Len returns the number of elided tool results.
func (l *Ledger) Len() int {
	if l == nil {
		return 0
	}
	return len(l.elided)
}

// ResultChars returns the size of a tool result as context editing measures
// it, in characters (code points): its text blocks plus its json blocks'
// JSON text, as stored (an offloaded result counts as its offload stub).
// Images count nothing: they are not text.
func ResultChars(m history.Message) uint64 {
	var n int
	for _, b := range m.Content {
		switch b.Type {
		case history.BlockText:
			n += utf8.RuneCountInString(b.Text)
		case history.BlockJSON:
			n += utf8.RuneCount(b.JSON)
		}
	}
	return uint64(n)
}

// Stub returns the one-line text an elided result is sent as: it names the
// tool and the stored result's size in characters and, when offloadPath is
// not "", points at the offload file holding the whole result. Same input,
// same bytes.
func Stub(m history.Message, offloadPath string) string {
	return StubOf(m, ResultChars(m), offloadPath)
}

// StubOf is Stub for a result whose size the caller knows: chars is
// ResultChars(m), which counts every character of it (a stored result
// is immutable, and a session keeps the count of each).
func StubOf(m history.Message, chars uint64, offloadPath string) string {
	tool := m.ToolName
	if tool == "" {
		tool = "a tool"
	}
	var b strings.Builder
	b.WriteString("[ctxd elided this old tool result to save context: ")
	b.WriteString(oneLine(tool))
	b.WriteString(", ")
	b.WriteString(strconv.FormatUint(chars, 10))
	b.WriteString(" characters.")
	if offloadPath != "" {
		b.WriteString(" The whole result is in ")
		b.WriteString(oneLine(offloadPath))
		b.WriteString("; read or grep it if you need it again.]")
	} else {
		b.WriteString(" Run the tool again if you need it.]")
	}
	return b.String()
}

// oneLine keeps a stub on one line whatever a name holds.
func oneLine(s string) string {
	return lineBreaks.Replace(s)
}

// lineBreaks is built once (see pointerEscaper).
var lineBreaks = strings.NewReplacer("\r", " ", "\n", " ")

// WithheldText replaces the content of an assistant message made only of
// thinking blocks once they are withheld: providers reject an assistant
// message with no content.
const WithheldText = "[earlier reasoning withheld after a context edit]"

// Render returns m as it is sent after the ledger's passes:
//   - an elided tool result becomes a copy whose content is one text block
//     holding Stub(m, offloadPath); role, tool_call_id, tool_name, is_error,
//     time and seq are kept;
//   - an assistant message with seq < WithheldThinkingBefore becomes a copy
//     without its thinking and redacted_thinking blocks — whole blocks are
//     dropped, never edited — or, if nothing else is left, one text block
//     holding WithheldText;
//   - in an assistant message, a tool call whose input fields a pass
//     cleared has those string values sent as InputStub: the input keeps
//     its shape, keys and order;
//   - any other message is returned as it is.
//
// A copy has Tokens 0: the stored estimate counted what was replaced. The
// copy shares no slice with m. Same inputs, same bytes.
func (l *Ledger) Render(m history.Message, offloadPath string) history.Message {
	switch {
	case m.Role == history.RoleTool && l.Elided(m.ToolCallID):
		return ElidedResult(m, ResultChars(m), offloadPath)
	case m.Role == history.RoleAssistant && l.Changes(m):
		withhold := m.Seq < l.WithheldThinkingBefore()
		out := m
		out.Content = make([]history.Block, 0, len(m.Content))
		for _, b := range m.Content {
			switch {
			case withhold && isThinking(b):
				continue
			case b.Type == history.BlockToolCall && l.InputCleared(b.ID):
				b.Input = l.clearedInput(b)
			}
			out.Content = append(out.Content, b)
		}
		if len(out.Content) == 0 {
			out.Content = append(out.Content, history.Block{Type: history.BlockText, Text: WithheldText})
		}
		out.Tokens = 0
		return out
	}
	return m
}

// ElidedResult is the tool result m as Render sends it once elided: its
// stub (StubOf: chars is ResultChars(m)) in place of its content.
func ElidedResult(m history.Message, chars uint64, offloadPath string) history.Message {
	out := m
	out.Content = []history.Block{{Type: history.BlockText, Text: StubOf(m, chars, offloadPath)}}
	out.Tokens = 0
	return out
}

func isThinking(b history.Block) bool {
	return b.Type == history.BlockThinking || b.Type == history.BlockRedactedThinking
}

// HasThinking reports whether m carries a thinking or redacted_thinking
// block.
func HasThinking(m history.Message) bool {
	for _, b := range m.Content {
		if isThinking(b) {
			return true
		}
	}
	return false
}

// ResultSaving returns the characters (code points) eliding the tool result
// m would save now (docs/design.md §6), or 0 when m is not eligible: already
// elided, shorter than min_chars_to_elide, answering a call of the newest
// keep_recent_turns turns (recent), from a tool in protect_tool_names
// (compared without regard to case: agents spell "read" and "Read"), or no
// longer than its stub. size is ResultChars(m); tool is the result's tool
// name (the call's when the message names none); path is its offload file
// or "". The one statement of the eligibility rule: PlanPaths and the
// engine's cheap pre-check both use it.
func ResultSaving(cfg config.ContextEditing, l *Ledger, m history.Message, size uint64, tool string, recent bool, path string) uint64 {
	if recent || size < cfg.MinCharsToElide || l.Elided(m.ToolCallID) {
		return 0
	}
	for _, name := range cfg.ProtectToolNames {
		if strings.EqualFold(name, tool) {
			return 0
		}
	}
	stub := uint64(utf8.RuneCountInString(StubOf(m, size, path)))
	if size <= stub {
		return 0
	}
	return size - stub
}

// InputSaving is what one tool call's input counts for a pass
// (clear_tool_inputs, docs/design.md §6), given the lengths in characters of its
// input's string values (InputStrings): raw, the characters of those of at
// least min_chars_to_elide (as stored, cleared or not); saved, what
// clearing the eligible ones saves; and which of them (indexes into chars)
// a pass clears. A value is eligible when it has at least
// min_chars_to_elide characters and is longer than its stub, and its call
// (id toolCallID, tool name tool) is not in the recent turns, its tool is
// not protected (compared without regard to case) and no pass cleared its
// input yet. The one statement of the rule: PlanPaths and the engine's
// cheap pre-check both use it.
func InputSaving(cfg config.ContextEditing, l *Ledger, toolCallID, tool string, chars []int, recent bool) (raw, saved uint64, clear []int) {
	eligible := !recent && !l.InputCleared(toolCallID)
	for _, name := range cfg.ProtectToolNames {
		if strings.EqualFold(name, tool) {
			eligible = false
		}
	}
	for i, c := range chars {
		n := uint64(c)
		if n < cfg.MinCharsToElide {
			continue
		}
		raw += n
		stub := uint64(utf8.RuneCountInString(InputStub(c)))
		if eligible && n > stub {
			clear = append(clear, i)
			saved += n - stub
		}
	}
	return raw, saved, clear
}

// Plan decides whether a context-edit pass fires now (docs/design.md §6, mode
// local), with no offload paths known: PlanPaths with a nil paths.
func Plan(cfg config.ContextEditing, active []history.Message, l *Ledger, thinkingBinding bool) *Pass {
	return PlanPaths(cfg, active, l, thinkingBinding, nil)
}

// PlanPaths decides whether a context-edit pass fires now and returns it,
// or nil. active is the active history — the raw stored messages, oldest
// first, each with Seq set — and l what earlier passes elided (nil: none).
// paths, when not nil, returns the offload file of a result by its
// tool_call_id ("" when it was not offloaded), the offloadPath Render will
// be given, so CharsSaved counts the stubs exactly.
//
// It returns nil unless cfg.Enabled and cfg.Mode is not "server" (the
// engine resolves "auto" with Mode and plans only when it says local).
// A pass fires when both hold:
//   - the raw tool-result text of active — ResultChars of every tool
//     message, elided or not, as stored before any elision, plus, with
//     cfg.ClearToolInputs, the tool-call input string fields of at least
//     cfg.MinCharsToElide characters — exceeds cfg.MaxTotalToolResultChars;
//   - eliding every eligible result (and clearing every eligible input
//     field) saves at least cfg.MinCharsPerPass characters (its size minus
//     its stub's).
//
// With cfg.ClearToolInputs the pass also clears, in the calls of the turns
// older than cfg.KeepRecentTurns whose tool is not protected, every
// top-level string field of the input of at least cfg.MinCharsToElide
// characters (a write's content): Pass.Inputs lists them.
//
// A tool result is eligible when it is not elided yet; its turn is older
// than the newest cfg.KeepRecentTurns turns (a turn is one assistant
// message plus the tool results answering it; a result belongs to the turn
// of the assistant message holding its call, or, with no such call, to its
// own position); it has at least cfg.MinCharsToElide characters; its tool
// (tool_name, else the call's name) is not in cfg.ProtectToolNames, used
// as given; and its stub is shorter than it. All eligible results are
// elided in one pass, listed in history order.
//
// With thinkingBinding, the pass withholds the thinking produced before
// its rewrite point, the newest elided result: WithheldThinkingBefore is
// that result's seq + 1, so assistant messages up to it lose their thinking
// and the recent turns, which the model still sees whole, keep theirs. It
// never passes the last assistant message's seq: a provider rejects a
// thinking-enabled tool loop whose last assistant message lacks its
// thinking block (this only matters with keep_recent_turns = 0).
func PlanPaths(cfg config.ContextEditing, active []history.Message, l *Ledger, thinkingBinding bool, paths func(toolCallID string) string) *Pass {
	if !cfg.Enabled || cfg.Mode == config.EditModeServer {
		return nil
	}
	var assistants []int
	callTurn := map[string]int{}
	callName := map[string]string{}
	for i, m := range active {
		if m.Role != history.RoleAssistant {
			continue
		}
		assistants = append(assistants, i)
		for _, b := range m.Content {
			if b.Type != history.BlockToolCall {
				continue
			}
			if _, seen := callTurn[b.ID]; !seen {
				callTurn[b.ID] = i
				callName[b.ID] = b.Name
			}
		}
	}
	// Results whose turn starts at or after cutoff are in the recent turns.
	cutoff := len(active)
	if k := cfg.KeepRecentTurns; k > 0 {
		if uint64(len(assistants)) < k {
			cutoff = 0
		} else {
			cutoff = assistants[uint64(len(assistants))-k]
		}
	}
	var raw, saved uint64
	var elided []string
	var inputs []ClearedInput
	newest := -1
	for i, m := range active {
		if m.Role == history.RoleAssistant && cfg.ClearToolInputs {
			for _, b := range m.Content {
				if b.Type != history.BlockToolCall {
					continue
				}
				paths, chars := InputStrings(b.Input)
				r, s, clear := InputSaving(cfg, l, b.ID, b.Name, chars, i >= cutoff)
				raw += r
				if len(clear) == 0 {
					continue
				}
				saved += s
				fields := make([]string, len(clear))
				for k, j := range clear {
					fields[k] = paths[j]
				}
				inputs = append(inputs, ClearedInput{ID: b.ID, Fields: fields})
				newest = max(newest, i)
			}
			continue
		}
		if m.Role != history.RoleTool {
			continue
		}
		size := ResultChars(m)
		raw += size
		turn, ok := callTurn[m.ToolCallID]
		if !ok {
			turn = i
		}
		tool := m.ToolName
		if tool == "" {
			tool = callName[m.ToolCallID]
		}
		path := ""
		if paths != nil && !l.Elided(m.ToolCallID) {
			path = paths(m.ToolCallID)
		}
		s := ResultSaving(cfg, l, m, size, tool, turn >= cutoff, path)
		if s == 0 {
			continue
		}
		saved += s
		elided = append(elided, m.ToolCallID)
		newest = max(newest, i)
	}
	if raw <= cfg.MaxTotalToolResultChars || len(elided)+len(inputs) == 0 || saved < cfg.MinCharsPerPass {
		return nil
	}
	p := &Pass{Elided: elided, ElidedCount: len(elided), CharsSaved: saved, Inputs: inputs}
	if thinkingBinding {
		p.WithheldThinkingBefore = active[newest].Seq + 1
		if n := len(assistants); n > 0 {
			p.WithheldThinkingBefore = min(p.WithheldThinkingBefore, active[assistants[n-1]].Seq)
		}
	}
	return p
}
