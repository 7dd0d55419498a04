package transcript

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/wire/openai"
)

// codexLine is one line of a Codex CLI rollout: {timestamp, type, payload}.
type codexLine struct {
	Timestamp json.RawMessage `json:"timestamp"`
	Type      string          `json:"type"`
	Payload   json.RawMessage `json:"payload"`
}

// codexPayload holds the payload fields the importer reads. Each line type
// is decoded into the struct its payload has: the same field name means
// different things in different payloads (turn_context "summary" is a
// setting, reasoning "summary" a list).
type codexPayload struct {
	Type string `json:"type"`
	// response_item message
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	// reasoning
	Summary          json.RawMessage `json:"summary"`
	EncryptedContent string          `json:"encrypted_content"`
	// function_call, custom_tool_call, local_shell_call and their outputs
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Input     json.RawMessage `json:"input"`
	Action    json.RawMessage `json:"action"`
	CallID    string          `json:"call_id"`
	Output    json.RawMessage `json:"output"`
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

// codexOutput converts a tool output: a string (what the model saw), or an
// object {content, success} whose success false marks an error.
func codexOutput(raw json.RawMessage) ([]history.Block, bool, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, false, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return textBlocks(s), false, nil
	}
	if strings.HasPrefix(strings.TrimSpace(string(raw)), "[") {
		blocks, err := openAIContent(raw)
		return blocks, false, err
	}
	var obj struct {
		Content json.RawMessage `json:"content"`
		Success *bool           `json:"success"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, false, fmt.Errorf("output: %w", err)
	}
	blocks, err := openAIContent(obj.Content)
	if err != nil {
		return nil, false, fmt.Errorf("output %w", err)
	}
	return blocks, obj.Success != nil && !*obj.Success, nil
}

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
		var p codexPayload
		if err := json.Unmarshal(l.Payload, &p); err != nil {
			return bad(err)
		}
		return s.item(p, at)
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

func (s *codexState) item(p codexPayload, at time.Time) error {
	b := s.b
	switch p.Type {
	case "message":
		content, err := openAIContent(p.Content)
		if err != nil {
			return err
		}
		switch p.Role {
		case "assistant":
			s.assistantBlocks(content, at)
		case "user":
			s.cur = -1
			b.user(content, at)
		default: // developer, system: instructions, not conversation
			var texts []string
			for _, blk := range content {
				if blk.Type == history.BlockText {
					texts = append(texts, blk.Text)
				}
			}
			b.addSystem(strings.Join(texts, "\n\n"))
		}
	case "reasoning":
		var summary []struct {
			Text string `json:"text"`
		}
		if len(p.Summary) > 0 && string(p.Summary) != "null" {
			if err := json.Unmarshal(p.Summary, &summary); err != nil {
				return fmt.Errorf("reasoning summary: %w", err)
			}
		}
		var texts []string
		for _, sm := range summary {
			if sm.Text != "" {
				texts = append(texts, sm.Text)
			}
		}
		text := strings.Join(texts, "\n\n")
		switch {
		case text != "":
			s.assistantBlocks([]history.Block{{Type: history.BlockThinking, Text: text, Signature: p.EncryptedContent}}, at)
		case p.EncryptedContent != "":
			s.assistantBlocks([]history.Block{{Type: history.BlockRedactedThinking, Data: p.EncryptedContent}}, at)
		}
	case "function_call":
		if p.CallID == "" {
			return errors.New("function_call without call_id")
		}
		s.assistantBlocks([]history.Block{{Type: history.BlockToolCall, ID: p.CallID, Name: p.Name, Input: stringOrJSON(p.Arguments, true)}}, at)
	case "custom_tool_call":
		if p.CallID == "" {
			return errors.New("custom_tool_call without call_id")
		}
		// A freeform tool's input is raw text (apply_patch): kept as a JSON
		// string.
		s.assistantBlocks([]history.Block{{Type: history.BlockToolCall, ID: p.CallID, Name: p.Name, Input: stringOrJSON(p.Input, false)}}, at)
	case "local_shell_call":
		if p.CallID == "" {
			return errors.New("local_shell_call without call_id")
		}
		s.assistantBlocks([]history.Block{{Type: history.BlockToolCall, ID: p.CallID, Name: "local_shell", Input: validJSON(p.Action)}}, at)
	case "function_call_output", "custom_tool_call_output", "local_shell_call_output":
		content, isErr, err := codexOutput(p.Output)
		if err != nil {
			return err
		}
		s.cur = -1
		b.tool(p.CallID, "", content, isErr, at)
	default:
		// ghost_snapshot (a git snapshot for undo), web_search_call and
		// unknown items are not conversation content.
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

// stringOrJSON returns the input of a call given as a JSON string or as any
// JSON value. A string is parsed as JSON text when parse is set (function
// arguments), else kept as a JSON string (freeform input).
func stringOrJSON(raw json.RawMessage, parse bool) json.RawMessage {
	var str string
	if json.Unmarshal(raw, &str) == nil {
		if parse {
			return argumentsJSON(str)
		}
		out, _ := json.Marshal(str)
		return out
	}
	return validJSON(raw)
}
