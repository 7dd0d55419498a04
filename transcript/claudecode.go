package transcript

import (
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/wire/anthropic"
)

// ccLine is the part of a Claude Code JSONL line the importer reads; the
// 1.0.x and 2.x schemas agree on these fields.
type ccLine struct {
	Type             string          `json:"type"`
	Subtype          string          `json:"subtype"`
	IsSidechain      bool            `json:"isSidechain"`
	IsCompactSummary bool            `json:"isCompactSummary"`
	Timestamp        json.RawMessage `json:"timestamp"`
	Message          *struct {
		ID      string           `json:"id"`
		Role    string           `json:"role"`
		Model   string           `json:"model"`
		Content json.RawMessage  `json:"content"`
		Usage   *anthropic.Usage `json:"usage"`
	} `json:"message"`
	CompactMetadata *struct {
		Trigger   string `json:"trigger"`
		PreTokens uint64 `json:"preTokens"`
	} `json:"compactMetadata"`
	// Operation and Content are a queue-operation line's: "enqueue" with
	// the text the user typed while the agent worked, "dequeue",
	// "remove" or "popAll".
	Operation string          `json:"operation"`
	Content   json.RawMessage `json:"content"`
}

// ccKind is what one item of the first pass becomes.
type ccKind int

const (
	ccAssistant ccKind = iota
	ccTool
	ccUser
	ccCompaction
)

// ccItem is one message (or compaction marker) in file order, before the
// sidechain placement and call bookkeeping of the second pass.
type ccItem struct {
	kind ccKind
	side bool
	// queued marks a user message typed while the agent worked (a
	// queue-operation enqueue): it is delivered once no call of the main
	// conversation is open; dropped when another line delivered it.
	queued, dropped bool
	msg             history.Message      // assistant (merged) or user
	res             anthropic.ToolResult // ccTool
	comp            OriginalCompaction
}

// syntheticModel is the model Claude Code writes on assistant lines it made
// up itself (API error notices, "No response requested."); no API response
// stands behind them.
const syntheticModel = "<synthetic>"

func importClaudeCode(data []byte, opts Options) (*Transcript, error) {
	b := newBuilder(FormatClaudeCode)
	var items []*ccItem
	byID := map[string]*ccItem{} // message.id → merged assistant item
	var lastComp *ccItem
	var queue []*ccItem // enqueued user messages not yet taken

	for _, ln := range splitLines(data) {
		var l ccLine
		if err := json.Unmarshal(ln.text, &l); err != nil {
			if err := malformed(b.t, opts, ln, err); err != nil {
				return nil, err
			}
			continue
		}
		at := parseTime(l.Timestamp)
		switch l.Type {
		case "system":
			if l.Subtype != "compact_boundary" || l.IsSidechain {
				continue
			}
			it := &ccItem{kind: ccCompaction}
			if m := l.CompactMetadata; m != nil {
				it.comp.PreTokens, it.comp.Trigger = m.PreTokens, m.Trigger
			}
			items = append(items, it)
			lastComp = it
		case "user", "assistant":
			if l.Message == nil {
				if err := malformed(b.t, opts, ln, errors.New(l.Type+" line without message")); err != nil {
					return nil, err
				}
				continue
			}
			blocks, err := anthropic.DecodeContent(l.Message.Content)
			if err != nil {
				if err := malformed(b.t, opts, ln, err); err != nil {
					return nil, err
				}
				continue
			}
			if l.Type == "assistant" {
				if l.Message.Model == syntheticModel {
					continue
				}
				content := anthropic.AssistantBlocks(blocks)
				if it, ok := byID[l.Message.ID]; ok && l.Message.ID != "" {
					// Another line of the same API response: its blocks follow
					// the earlier ones; the last line's usage is the final one.
					it.msg.Content = append(it.msg.Content, content...)
					if u := l.Message.Usage.Canonical(); u != nil {
						it.msg.Usage = u
					}
					continue
				}
				it := &ccItem{kind: ccAssistant, side: l.IsSidechain, msg: history.Message{
					Content: content, Time: at, Model: l.Message.Model, Usage: l.Message.Usage.Canonical(),
				}}
				items = append(items, it)
				if l.Message.ID != "" {
					byID[l.Message.ID] = it
				}
				continue
			}
			if l.IsCompactSummary {
				if l.IsSidechain {
					continue
				}
				// The summary the agent's compaction produced: not a message.
				if lastComp == nil || lastComp.comp.Summary != "" {
					lastComp = &ccItem{kind: ccCompaction}
					items = append(items, lastComp)
				}
				lastComp.comp.Summary = anthropic.JoinText(blocks)
				continue
			}
			results, rest, err := anthropic.SplitUser(blocks)
			if err != nil {
				if err := malformed(b.t, opts, ln, err); err != nil {
					return nil, err
				}
				continue
			}
			for _, r := range results {
				items = append(items, &ccItem{kind: ccTool, side: l.IsSidechain, res: r, msg: history.Message{Time: at}})
			}
			if len(rest) > 0 {
				if !l.IsSidechain {
					queue = dropDelivered(queue, anthropic.JoinText(restBlocks(blocks)))
				}
				items = append(items, &ccItem{kind: ccUser, side: l.IsSidechain, msg: history.Message{Content: rest, Time: at}})
			}
		case "queue-operation":
			queue = queueOperation(queue, &items, l, at)
		default:
			// progress, file-history-snapshot, queue-operation, summary, …
		}
	}

	// Second pass: emit in order. Sidechain items that arrive while the main
	// conversation has calls open wait until that round is closed (or the
	// next main message that is not a tool result), so a sub-agent's
	// messages never split a main tool round.
	mainItems := 0
	for _, it := range items {
		if !it.side {
			mainItems++
		}
	}
	if mainItems == 0 {
		// A sub-agent's own file (subagents/agent-*.jsonl) is sidechain
		// throughout: it is then the conversation.
		for _, it := range items {
			it.side = false
		}
	}
	openMain := map[string]bool{}
	var pending []*ccItem
	emit := func(it *ccItem) {
		switch it.kind {
		case ccAssistant:
			b.assistant(it.msg)
		case ccTool:
			b.tool(it.res.CallID, it.res.Name, it.res.Content, it.res.IsError, it.msg.Time)
		case ccUser:
			b.user(it.msg.Content, it.msg.Time)
		case ccCompaction:
			b.compaction(it.comp.PreTokens, it.comp.Summary, it.comp.Trigger)
		}
	}
	flush := func() {
		for _, it := range pending {
			emit(it)
		}
		pending = pending[:0]
	}
	for _, it := range items {
		if it.dropped {
			continue
		}
		if it.queued && len(openMain) > 0 {
			// Typed while a tool round ran: delivered after it.
			pending = append(pending, it)
			continue
		}
		if it.side {
			if !opts.IncludeSidechains {
				continue
			}
			if len(openMain) == 0 {
				emit(it)
			} else {
				pending = append(pending, it)
			}
			continue
		}
		if it.kind != ccTool {
			flush()
		}
		switch it.kind {
		case ccAssistant:
			for _, blk := range it.msg.Content {
				if blk.Type == history.BlockToolCall {
					openMain[blk.ID] = true
				}
			}
		case ccTool:
			delete(openMain, it.res.CallID)
		}
		emit(it)
		if len(openMain) == 0 {
			flush()
		}
	}
	flush()
	return b.t, nil
}

// queueOperation applies one queue-operation line (docs/decisions.md): an
// enqueue with text becomes a user message at that point in the file,
// delivered once the main conversation's open tool round is closed; a
// dequeue takes the oldest queued message (the next prompt line carries
// it, so the queued copy is dropped); popAll returns every queued message
// to the user's input box (never delivered). "remove" takes a message the
// agent consumed mid-turn: it stays delivered. It returns the queue.
func queueOperation(queue []*ccItem, items *[]*ccItem, l ccLine, at time.Time) []*ccItem {
	switch l.Operation {
	case "enqueue":
		var text string
		if json.Unmarshal(l.Content, &text) != nil || strings.TrimSpace(text) == "" {
			return queue
		}
		it := &ccItem{kind: ccUser, queued: true, msg: history.Message{Content: textBlocks(text), Time: at}}
		*items = append(*items, it)
		return append(queue, it)
	case "dequeue":
		if len(queue) > 0 {
			queue[0].dropped = true
			return queue[1:]
		}
	case "remove":
		if len(queue) > 0 {
			return queue[1:]
		}
	case "popAll":
		for _, it := range queue {
			it.dropped = true
		}
		return nil
	}
	return queue
}

// dropDelivered drops the queued message whose text a user line carries
// (the line is its delivery) and returns the queue without it.
func dropDelivered(queue []*ccItem, text string) []*ccItem {
	text = strings.TrimSpace(text)
	for k, it := range queue {
		if strings.TrimSpace(joinHistoryText(it.msg.Content)) == text {
			it.dropped = true
			return append(queue[:k:k], queue[k+1:]...)
		}
	}
	return queue
}

// restBlocks keeps the blocks of a user line that are not tool results.
func restBlocks(blocks []anthropic.WireBlock) []anthropic.WireBlock {
	var out []anthropic.WireBlock
	for _, b := range blocks {
		if b.Type != "tool_result" {
			out = append(out, b)
		}
	}
	return out
}

// joinHistoryText concatenates the text blocks of canonical content.
func joinHistoryText(blocks []history.Block) string {
	var parts []string
	for _, b := range blocks {
		if b.Type == history.BlockText {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n\n")
}
