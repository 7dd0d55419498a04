package transcript

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/wire/openai"
	"github.com/ctxd/ctxd/wire/openai/responses"
)

// codexLine is one line of a Codex CLI rollout: {timestamp, type, payload}.
type codexLine struct {
	Timestamp json.RawMessage `json:"timestamp"`
	Type      string          `json:"type"`
	Payload   json.RawMessage `json:"payload"`
}

// codexTokenCount is the payload of an event_msg token_count.
type codexTokenCount struct {
	Info *struct {
		LastTokenUsage *struct {
			InputTokens       uint64 `json:"input_tokens"`
			CachedInputTokens uint64 `json:"cached_input_tokens"`
			OutputTokens      uint64 `json:"output_tokens"`
			TotalTokens       uint64 `json:"total_tokens"`
		} `json:"last_token_usage"`
		ModelContextWindow uint64 `json:"model_context_window"`
	} `json:"info"`
}

// dataURLImage converts a "data:<media type>;base64,<data>" URL to an
// image block (openai.DataURLImage).
func dataURLImage(url string) (history.Block, bool) { return openai.DataURLImage(url) }

// codexState is the importer's position in the rollout.
type codexState struct {
	b *builder
	// cur is the index of the assistant message still collecting the items
	// of one response, or -1.
	cur int
	// last is the index of the most recent assistant message, or -1.
	last int
	// lastTotal is the last reported last_token_usage.total_tokens.
	lastTotal uint64
}

func importCodex(data []byte, opts Options) (*Transcript, error) {
	s := &codexState{b: newBuilder(FormatCodex), cur: -1, last: -1}
	for _, ln := range splitLines(data) {
		if err := s.line(ln.text); err != nil {
			if err := malformed(s.b.t, opts, ln, err); err != nil {
				return nil, err
			}
		}
	}
	return s.b.t, nil
}

// line applies one rollout line. On error nothing has changed.
func (s *codexState) line(text []byte) error {
	var l codexLine
	if err := json.Unmarshal(text, &l); err != nil {
		return err
	}
	if len(l.Payload) == 0 || string(l.Payload) == "null" {
		return nil
	}
	at := parseTime(l.Timestamp)
	b := s.b
	bad := func(err error) error { return fmt.Errorf("%s payload: %w", l.Type, err) }
	switch l.Type {
	case "turn_context":
		var p struct {
			Model string `json:"model"`
		}
		if err := json.Unmarshal(l.Payload, &p); err != nil {
			return bad(err)
		}
		if p.Model != "" {
			b.t.Model = p.Model
		}
	case "compacted":
		var p struct {
			Message string `json:"message"`
		}
		if err := json.Unmarshal(l.Payload, &p); err != nil {
			return bad(err)
		}
		s.cur = -1
		b.compaction(s.lastTotal, p.Message, "")
	case "event_msg":
		var kind struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(l.Payload, &kind); err != nil {
			return bad(err)
		}
		if kind.Type != "token_count" {
			// user_message, agent_message and agent_reasoning repeat
			// response items; the response items are the record.
			return nil
		}
		var p codexTokenCount
		if err := json.Unmarshal(l.Payload, &p); err != nil {
			return bad(err)
		}
		s.tokenCount(p)
	case "response_item":
		if err := s.item(l.Payload, at); err != nil {
			return fmt.Errorf("response_item %w", err)
		}
	}
	return nil
}

// tokenCount applies a token_count event: the context window, and the
// usage of the response it follows.
func (s *codexState) tokenCount(p codexTokenCount) {
	b := s.b
	if p.Info == nil {
		return
	}
	if p.Info.ModelContextWindow > 0 {
		b.t.ContextLimit = p.Info.ModelContextWindow
	}
	u := p.Info.LastTokenUsage
	if u == nil {
		return
	}
	s.lastTotal = u.TotalTokens
	if s.lastTotal == 0 {
		s.lastTotal = u.InputTokens + u.OutputTokens
	}
	// The response is complete; its usage is reported once. A repeated
	// token_count (Codex writes one at some turn boundaries too) finds the
	// usage already set and is ignored. Codex's input_tokens include the
	// cached ones; the canonical InputTokens does not.
	s.cur = -1
	if s.last >= 0 && b.t.Messages[s.last].Usage == nil {
		cached := min(u.CachedInputTokens, u.InputTokens)
		b.t.Messages[s.last].Usage = usage(history.Usage{
			InputTokens:          u.InputTokens - cached,
			CacheReadInputTokens: cached,
			OutputTokens:         u.OutputTokens,
		})
	}
}

// item applies one response_item: its canonical form is wire/openai's
// (responses.RecordedItem); which message it joins is the rollout's state.
func (s *codexState) item(payload json.RawMessage, at time.Time) error {
	it, err := responses.RecordedItem(payload)
	if err != nil {
		return err
	}
	b := s.b
	switch it.Side {
	case responses.SideAssistant:
		if len(it.Blocks) > 0 {
			s.assistantBlocks(it.Blocks, at)
		}
	case responses.SideUser:
		s.cur = -1
		b.user(it.Blocks, at)
	case responses.SideInstructions:
		b.addSystem(it.Text)
	case responses.SideTool:
		s.cur = -1
		b.tool(it.CallID, "", it.Blocks, it.IsError, at)
	}
	return nil
}

// assistantBlocks adds blocks to the response being collected, starting a
// new assistant message when none is.
func (s *codexState) assistantBlocks(blocks []history.Block, at time.Time) {
	if s.cur < 0 {
		s.cur = s.b.assistant(history.Message{Content: blocks, Time: at, Model: s.b.t.Model})
		s.last = s.cur
		return
	}
	s.b.extend(s.cur, blocks)
}
