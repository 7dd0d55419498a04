package transcript

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/rawjson"
)

// builder appends canonical messages to a Transcript and keeps the
// bookkeeping every format shares: response and call counts, unique call ids,
// and the open calls that tool results answer (to resolve their tool names).
type builder struct {
	t *Transcript
	// open maps a call id as the file spells it to the still-unanswered
	// call; a later call reusing the id replaces the entry.
	open map[string]openCall
	// used holds every call id emitted so far (after renaming).
	used map[string]bool
}

type openCall struct {
	id   string // the id as emitted (renamed when it repeated)
	name string
}

func newBuilder(format string) *builder {
	return &builder{
		t:    &Transcript{Format: format},
		open: map[string]openCall{},
		used: map[string]bool{},
	}
}

// assistant appends an assistant message, registering its tool calls, and
// returns its index.
func (b *builder) assistant(m history.Message) int {
	m.Role = history.RoleAssistant
	// Copy: call ids may be renamed below, and the caller's slice must not
	// change under it.
	m.Content = append([]history.Block{}, m.Content...)
	for i := range m.Content {
		if m.Content[i].Type == history.BlockToolCall {
			b.registerCall(&m.Content[i])
		}
	}
	if m.Model != "" {
		b.t.Model = m.Model
	}
	b.t.Messages = append(b.t.Messages, m)
	b.t.Responses++
	return len(b.t.Messages) - 1
}

// extend appends blocks to the assistant message at idx (a response whose
// items arrive separately), registering its tool calls.
func (b *builder) extend(idx int, blocks []history.Block) {
	for _, blk := range blocks {
		if blk.Type == history.BlockToolCall {
			b.registerCall(&blk)
		}
		b.t.Messages[idx].Content = append(b.t.Messages[idx].Content, blk)
	}
}

// registerCall counts a tool_call block and makes its id unique.
func (b *builder) registerCall(c *history.Block) {
	b.t.ToolCalls++
	orig := c.ID
	if b.used[c.ID] {
		for n := 2; ; n++ {
			id := fmt.Sprintf("%s_dup%d", orig, n)
			if !b.used[id] {
				c.ID = id
				break
			}
		}
		b.t.RenamedCallIDs++
	}
	b.used[c.ID] = true
	b.open[orig] = openCall{id: c.ID, name: c.Name}
}

// tool appends a tool result answering the call the file names callID. The
// name is resolved from the call; fallbackName is used for an orphan result
// (one whose call is not earlier in the transcript), which is kept as is.
func (b *builder) tool(callID, fallbackName string, content []history.Block, isErr bool, at time.Time) {
	m := history.Message{
		Role:       history.RoleTool,
		Content:    content,
		ToolCallID: callID,
		ToolName:   fallbackName,
		IsError:    isErr,
		Time:       at,
	}
	if c, ok := b.open[callID]; ok {
		m.ToolCallID = c.id
		if c.name != "" {
			m.ToolName = c.name
		}
		delete(b.open, callID)
	}
	if m.Content == nil {
		m.Content = []history.Block{}
	}
	b.t.Messages = append(b.t.Messages, m)
}

// user appends a user message unless it has no content.
func (b *builder) user(content []history.Block, at time.Time) {
	if len(content) == 0 {
		return
	}
	b.t.Messages = append(b.t.Messages, history.Message{Role: history.RoleUser, Content: content, Time: at})
}

// compaction records an original compaction at the current position.
func (b *builder) compaction(preTokens uint64, summary, trigger string) *OriginalCompaction {
	b.t.OriginalCompactions = append(b.t.OriginalCompactions, OriginalCompaction{
		BeforeResponse: b.t.Responses,
		MessageIndex:   len(b.t.Messages),
		PreTokens:      preTokens,
		Summary:        summary,
		Trigger:        trigger,
	})
	return &b.t.OriginalCompactions[len(b.t.OriginalCompactions)-1]
}

func (b *builder) addSystem(s string) {
	if s == "" {
		return
	}
	if b.t.System != "" {
		b.t.System += "\n\n"
	}
	b.t.System += s
}

// usage returns u, or nil when every count is 0: an aborted request reports
// zeros, which is no report at all.
func usage(u history.Usage) *history.Usage {
	if u == (history.Usage{}) {
		return nil
	}
	return &u
}

func textBlock(s string) history.Block {
	return history.Block{Type: history.BlockText, Text: s}
}

// textBlocks returns one text block holding s, or none when s is empty.
func textBlocks(s string) []history.Block {
	if s == "" {
		return nil
	}
	return []history.Block{textBlock(s)}
}

// jsonBlock keeps any structured value whole. An invalid value is stored as
// a JSON string of its bytes so the block always holds valid JSON.
func jsonBlock(raw json.RawMessage) history.Block {
	return history.Block{Type: history.BlockJSON, JSON: rawjson.Value(raw)}
}

// parseTime accepts RFC 3339 strings and Unix milliseconds; anything else
// yields the zero time.
func parseTime(raw json.RawMessage) time.Time {
	if len(raw) == 0 {
		return time.Time{}
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if tm, err := time.Parse(time.RFC3339Nano, s); err == nil {
			return tm.UTC()
		}
		return time.Time{}
	}
	var ms float64
	if json.Unmarshal(raw, &ms) == nil && ms > 0 && ms < 1e15 {
		return time.UnixMilli(int64(ms)).UTC()
	}
	return time.Time{}
}

// zeroTime is the time of messages whose format records none.
var zeroTime time.Time
