package transcript

import (
	"time"

	"github.com/ctxd/ctxd/history"
)

// AbandonedText is the text of the error tool result that closes a call
// which never got a result (docs/design.md §2 "abandoned round").
const AbandonedText = history.AbandonedText

// CloseAbandoned returns msgs with every unanswered tool call closed: for each
// call still open when a user message arrives (or when msgs end), an error
// tool result (role tool, IsError, ToolCallID and ToolName of the call,
// text AbandonedText) is inserted immediately before that user message (or
// at the end), in call order. It returns the new slice and the number of
// results inserted; msgs itself is not modified. Each inserted result takes
// the time of the message it precedes (the last message's at the end).
func CloseAbandoned(msgs []history.Message) ([]history.Message, int) {
	out, n, _ := closeAbandoned(msgs)
	return out, n
}

// CloseAbandoned closes the transcript's unanswered calls as the function
// CloseAbandoned does, and moves each OriginalCompaction.MessageIndex past
// the results inserted before it. It returns the number inserted.
func (t *Transcript) CloseAbandoned() int {
	out, n, inserted := closeAbandoned(t.Messages)
	if n == 0 {
		return 0
	}
	for i := range t.OriginalCompactions {
		c := &t.OriginalCompactions[i]
		shift := 0
		// Results inserted at an index ≤ the compaction's close the round
		// before it, so the compaction follows them.
		for _, at := range inserted {
			if at <= c.MessageIndex {
				shift++
			}
		}
		c.MessageIndex += shift
	}
	t.Messages = out
	return n
}

// closeAbandoned also returns, for each inserted result, the index in the
// original msgs before which it was inserted (len(msgs) at the end).
func closeAbandoned(msgs []history.Message) ([]history.Message, int, []int) {
	type call struct{ id, name string }
	var (
		open     []call
		out      []history.Message
		inserted []int
	)
	closeAll := func(before int, at time.Time) {
		if len(open) == 0 {
			return
		}
		if out == nil {
			out = make([]history.Message, 0, len(msgs)+len(open))
			out = append(out, msgs[:before]...)
		}
		for _, c := range open {
			out = append(out, history.Message{
				Role:       history.RoleTool,
				Content:    []history.Block{{Type: history.BlockText, Text: AbandonedText}},
				ToolCallID: c.id,
				ToolName:   c.name,
				IsError:    true,
				Time:       at,
			})
			inserted = append(inserted, before)
		}
		open = open[:0]
	}
	for i, m := range msgs {
		switch m.Role {
		case history.RoleUser:
			closeAll(i, m.Time)
		case history.RoleAssistant:
			for _, b := range m.Content {
				if b.Type == history.BlockToolCall {
					open = append(open, call{b.ID, b.Name})
				}
			}
		case history.RoleTool:
			for j, c := range open {
				if c.id == m.ToolCallID {
					open = append(open[:j], open[j+1:]...)
					break
				}
			}
		}
		if out != nil {
			out = append(out, m)
		}
	}
	if len(open) > 0 {
		var at time.Time
		if len(msgs) > 0 {
			at = msgs[len(msgs)-1].Time
		}
		closeAll(len(msgs), at)
	}
	if out == nil {
		return msgs, 0, nil
	}
	return out, len(inserted), inserted
}
