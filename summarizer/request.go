// Package summarizer turns a session's active history into a summary
// (docs/design.md §5.3–§5.5): it assembles the summarizer request, speaks to the
// providers (anthropic, openai and the embedded extractive summarizer),
// classifies their failures, tries the configured bindings in order and runs
// the one pruned retry a context-length failure permits. It stores nothing
// itself: pruned tool results go through an ArtifactStore the caller gives.
package summarizer

import (
	"fmt"
	"time"

	"github.com/ctxd/ctxd/history"
)

// DefaultTimeout is the flat per-call timeout when no agent file sets one
// (docs/design.md §5.4). It never scales with history size.
const DefaultTimeout = 180 * time.Second

// DefaultMaxSummaryBytes is max_summary_bytes when a Request leaves it 0
// (docs/design.md §3), in bytes.
const DefaultMaxSummaryBytes uint64 = 262144

// DefaultArtifactReadTools is artifact_read_tools when a Request leaves it
// nil (docs/design.md §3).
var DefaultArtifactReadTools = []string{"read"}

// The section headings of a summary, in order. BuiltinPrompt asks for them
// and the extractive summarizer writes them, so every summary ctxd commits
// has the same shape whichever binding produced it.
const (
	HeadingGoal      = "## Goal"
	HeadingState     = "## State"
	HeadingFiles     = "## Files and artifacts"
	HeadingDecisions = "## Decisions"
	HeadingErrors    = "## Errors and fixes"
	HeadingReasoning = "## Reasoning to carry forward"
	HeadingNextSteps = "## Next steps"
)

// Headings returns the section headings of a summary, in order
// (docs/design.md §5.3).
func Headings() []string {
	return []string{HeadingGoal, HeadingState, HeadingFiles, HeadingDecisions,
		HeadingErrors, HeadingReasoning, HeadingNextSteps}
}

// BuiltinPrompt is the compaction prompt used when no agent file gives one
// (docs/design.md §5.3). It is sent as a trailing user message after the whole
// active history, never as a system prompt.
const BuiltinPrompt = `Your task now is to write a checkpoint summary of the conversation above. The earlier messages will be removed from your context and replaced by this summary, so it must let work continue without them. Do not call any tools: answer with the summary as plain text (Markdown) and nothing else.

Use exactly these section headings, in this order:

## Goal
What the user asked for: the original request and every later change or addition to it. Quote the user's own words where the precise wording matters.

## State
Where the work stands: what is done, what is in progress, what was verified and how (tests, builds, commands and their results).

## Files and artifacts
Every file read, created or modified, with full paths and one line on what changed or why it matters; commands worth re-running; every artifact:// reference that must stay reachable.

## Decisions
Decisions made and their reasons; constraints, conventions and user preferences to keep honoring.

## Errors and fixes
Errors met (exact messages where useful), their causes, and how each was fixed or worked around; anything still failing.

## Reasoning to carry forward
The current hypotheses; what was ruled out and why; what was about to be tried. This reasoning is lost if you do not write it down.

## Next steps
The concrete next actions in order, starting with the one in progress, and any question still waiting on the user.

Be specific and complete: exact names, paths, identifiers, commands, values and error messages. Prefer facts over narrative; omit pleasantries.

If the conversation begins with an earlier checkpoint summary, this summary replaces it too: carry forward everything it kept that still matters — the first task and the goal in the user's words, decisions with their reasons, identifiers, paths and commands, errors not yet resolved, and what was about to be done — merged with what happened since. Shorten wording, never drop a fact the earlier summary kept. Leave out its "Full history" paragraph: a new one is added.`

// Request is what a summarizer is asked (docs/design.md §5.3). The caller keeps
// ownership: nothing in this package modifies a Request or its messages.
type Request struct {
	// System is the session's own system prompt, kept so the request
	// extends the session's cached prefix.
	System string
	// Tools are the session's tool definitions, kept for the same reason.
	// The pruned retry drops them.
	Tools []history.ToolDef
	// Messages is the entire active history as currently assembled: the
	// previous summary message, the retained and the newer messages
	// (including those that will be retained again). It must be closed:
	// every tool call answered, every result answering a call.
	Messages []history.Message
	// Prompt is the compaction prompt of an authored agent file; "" means
	// BuiltinPrompt.
	Prompt string
	// MaxSummaryBytes is max_summary_bytes, in bytes; 0 means
	// DefaultMaxSummaryBytes. A longer answer fails its binding.
	MaxSummaryBytes uint64
	// ExtractiveBytes is the extractive summarizer's byte budget
	// ([compaction] extractive_summary_bytes); 0 means
	// DefaultExtractiveBytes. The extractive summary is at most the smaller
	// of it and MaxSummaryBytes.
	ExtractiveBytes uint64
	// Timeout bounds each binding call (the pruned retry is its own call);
	// 0 means DefaultTimeout. It is never scaled by history size (§5.4).
	Timeout time.Duration
	// ArtifactReadTools are the tool names whose calls read an artifact
	// (context_editing.artifact_read_tools); nil means
	// DefaultArtifactReadTools.
	ArtifactReadTools []string
	// NoPrefix sends the history and the prompt alone: no system prompt,
	// no tool definitions, not the client's own prefix (config.Credential).
	// For an overflow compaction: the provider has just refused the
	// session's request as too long, and a summarizer request that extends
	// it would be longer still (docs/decisions.md "A summary call that
	// holds").
	NoPrefix bool
}

// prefix is the system prompt and tools a call sends: none with NoPrefix.
func (r *Request) prefix() (string, []history.ToolDef) {
	if r.NoPrefix {
		return "", nil
	}
	return r.System, r.Tools
}

// prompt returns the compaction prompt in effect.
func (r *Request) prompt() string {
	if r.Prompt != "" {
		return r.Prompt
	}
	return BuiltinPrompt
}

// maxBytes returns max_summary_bytes in effect.
func (r *Request) maxBytes() uint64 {
	if r.MaxSummaryBytes == 0 {
		return DefaultMaxSummaryBytes
	}
	return r.MaxSummaryBytes
}

// extractiveBytes returns the extractive summary's budget in effect: the
// configured budget (or DefaultExtractiveBytes), never above
// max_summary_bytes.
func (r *Request) extractiveBytes() uint64 {
	b := r.ExtractiveBytes
	if b == 0 {
		b = DefaultExtractiveBytes
	}
	return min(b, r.maxBytes())
}

// timeout returns the per-call timeout in effect.
func (r *Request) timeout() time.Duration {
	if r.Timeout <= 0 {
		return DefaultTimeout
	}
	return r.Timeout
}

// artifactReadTools returns artifact_read_tools in effect.
func (r *Request) artifactReadTools() []string {
	if r.ArtifactReadTools == nil {
		return DefaultArtifactReadTools
	}
	return r.ArtifactReadTools
}

// Assemble returns the messages a provider is sent for r: a copy of
// r.Messages followed by one user message holding the compaction prompt
// (docs/design.md §5.3). When r.Messages holds a provider compaction block
// (history.BlockCompaction), the messages before it — which that provider
// dropped — are left out, and its summary opens the request as a user
// message (ProviderSummaryText), so any binding can read it. The message slice is new; blocks are shared with r and
// must not be modified.
//
// It returns an error wrapping ErrInvalidHistory when the history is not
// closed — a tool call without its result before the trailing prompt, or a
// result answering no call — because every provider rejects such a request
// with a 400 that no retry can fix.
func (r *Request) Assemble() ([]history.Message, error) {
	if err := CheckClosed(r.Messages); err != nil {
		return nil, err
	}
	out := make([]history.Message, 0, len(r.Messages)+2)
	out = append(out, fromProviderCompaction(r.Messages)...)
	out = append(out, history.Message{
		Role:    history.RoleUser,
		Content: []history.Block{{Type: history.BlockText, Text: r.prompt()}},
	})
	return out, nil
}

// CheckClosed returns nil when msgs is closed: every tool_call block is
// answered by a tool message before the next user or assistant message, and
// every tool message answers a call of the round it follows. Otherwise it
// returns an error wrapping ErrInvalidHistory that names the message index
// and the call id.
func CheckClosed(msgs []history.Message) error {
	open := map[string]int{} // call id → index of the assistant message
	var order []string       // open ids in call order, for a stable error
	for i := range msgs {
		m := &msgs[i]
		switch m.Role {
		case history.RoleTool:
			if _, ok := open[m.ToolCallID]; !ok {
				return fmt.Errorf("%w: message %d (seq %d) is a result for tool call %q, which no open call of its round has",
					ErrInvalidHistory, i, m.Seq, m.ToolCallID)
			}
			delete(open, m.ToolCallID)
		default:
			if len(open) > 0 {
				return openRoundError(open, order, msgs, i)
			}
			order = order[:0]
			if m.Role == history.RoleAssistant {
				for _, c := range m.ToolCalls() {
					open[c.ID] = i
					order = append(order, c.ID)
				}
			}
		}
	}
	if len(open) > 0 {
		return openRoundError(open, order, msgs, len(msgs))
	}
	return nil
}

// openRoundError names the first unanswered call of an open round found
// before message at (or at the end of the history).
func openRoundError(open map[string]int, order []string, msgs []history.Message, at int) error {
	for _, id := range order {
		if i, ok := open[id]; ok {
			where := "the compaction prompt"
			if at < len(msgs) {
				where = fmt.Sprintf("message %d (seq %d)", at, msgs[at].Seq)
			}
			return fmt.Errorf("%w: tool call %q of message %d (seq %d) has no result before %s (%d call(s) open)",
				ErrInvalidHistory, id, i, msgs[i].Seq, where, len(open))
		}
	}
	return fmt.Errorf("%w: open tool round", ErrInvalidHistory)
}

// ProviderSummaryText begins the user message that carries a provider
// compaction block's summary in a summarizer request.
const ProviderSummaryText = "Summary of the earlier conversation, written by the model provider when it compacted the context:"

// fromProviderCompaction returns msgs from the newest provider compaction
// block on: a user message holding its summary, then what followed the
// block in its assistant message, then the later messages. msgs as is when
// it holds none.
func fromProviderCompaction(msgs []history.Message) []history.Message {
	i := history.CompactionIndex(msgs)
	if i < 0 {
		return msgs
	}
	m := msgs[i]
	j := history.LastCompaction(m)
	out := []history.Message{{Role: history.RoleUser, Time: m.Time,
		Content: []history.Block{{Type: history.BlockText, Text: ProviderSummaryText + "\n\n" + m.Content[j].Text}}}}
	if rest := m.Content[j+1:]; len(rest) > 0 {
		m.Content = rest
		out = append(out, m)
	}
	return append(out, msgs[i+1:]...)
}
