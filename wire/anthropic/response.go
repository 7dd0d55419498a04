package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/wire/overflow"
	"github.com/ctxd/ctxd/wire/sse"
)

// Response is an assistant answer of the Messages API, rebuilt from a JSON
// body (DecodeResponse) or from a server-sent event stream (StreamReader).
type Response struct {
	// ID is the provider's message id ("msg_…"); Model the model that
	// answered.
	ID    string
	Model string
	// Content is the answer's blocks in order. A tool_use block's Input is
	// the JSON the stream's input_json_delta events assembled.
	Content []WireBlock
	// StopReason is "end_turn", "tool_use", "max_tokens", … ("" when the
	// stream ended before message_delta).
	StopReason string
	// Usage is the reported usage: message_start's counts, updated by
	// message_delta's.
	Usage Usage
	// Complete is true when the whole answer arrived (a JSON body, or a
	// stream that reached message_stop).
	Complete bool
	// Error is a provider error reported inside the stream (an "error"
	// event after the 200), nil when none.
	Error *APIError
}

// APIError is the error object of an Anthropic error body
// ({"type":"error","error":{"type":…,"message":…}}).
type APIError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// Message returns the answer as a canonical assistant message (docs/design.md
// §2) with its usage. Empty text blocks (a model's empty answer) are
// dropped: the API refuses them when they are sent back.
func (r *Response) Message() history.Message {
	blocks := make([]WireBlock, 0, len(r.Content))
	for _, b := range r.Content {
		if b.Type == "text" && strings.TrimSpace(b.Text) == "" {
			continue
		}
		blocks = append(blocks, b)
	}
	u := r.Usage
	return history.Message{Role: history.RoleAssistant, Content: AssistantBlocks(blocks), Model: r.Model, Usage: u.Canonical()}
}

// responseBody is a non-streamed Messages API answer.
type responseBody struct {
	Type       string          `json:"type"`
	ID         string          `json:"id"`
	Model      string          `json:"model"`
	Content    json.RawMessage `json:"content"`
	StopReason string          `json:"stop_reason"`
	Usage      Usage           `json:"usage"`
	// ContextManagement reports the edits of the client's
	// context_management the provider applied.
	ContextManagement *ContextManagement `json:"context_management"`
	Error             *APIError          `json:"error"`
}

// DecodeResponse reads a non-streamed Messages API answer. An error body
// ({"type":"error"}) is returned as Response.Error. Errors: the body is not
// JSON, or its content does not decode (naming the block).
func DecodeResponse(body []byte) (*Response, error) {
	var rb responseBody
	if err := json.Unmarshal(body, &rb); err != nil {
		return nil, fmt.Errorf("malformed Messages response: %w", err)
	}
	if rb.Type == "error" {
		return &Response{Error: rb.Error}, nil
	}
	blocks, err := DecodeContent(rb.Content)
	if err != nil {
		return nil, fmt.Errorf("Messages response content: %w", err)
	}
	u := rb.Usage
	u.Cleared = rb.ContextManagement.Cleared()
	return &Response{ID: rb.ID, Model: rb.Model, Content: blocks, StopReason: rb.StopReason, Usage: u, Complete: true}, nil
}

// ErrorBody decodes an Anthropic error body; ok is false when body is not
// one.
func ErrorBody(body []byte) (e APIError, ok bool) {
	var eb struct {
		Type  string    `json:"type"`
		Error *APIError `json:"error"`
	}
	if json.Unmarshal(body, &eb) != nil || eb.Type != "error" || eb.Error == nil {
		return APIError{}, false
	}
	return *eb.Error, true
}

// IsContextLength reports whether an HTTP status and body are the
// provider's refusal of a request too large for the model's context window
// ("prompt is too long", "input length and `max_tokens` exceed context
// limit", a 413): wire/overflow's classifier, the one every caller uses.
func IsContextLength(status int, body []byte) bool {
	return overflow.IsContextLength(status, body)
}

// ContextLengthFigures reads the figures of a context-length refusal's
// message (IsContextLength): count is the provider's count of the refused
// request's input, limit the window it names, both in tokens; 0 for a
// figure the message does not give. "prompt is too long: 200251 tokens >
// 200000 maximum" gives 200251 and 200000; "input length and `max_tokens`
// exceed context limit: 189136 + 20000 > 204648" gives 189136 and 184648
// (the window left for the input beside that max_tokens).
// The message may be wrapped in other text (Bedrock's).
func ContextLengthFigures(body []byte) (count, limit uint64) {
	msg := string(body)
	if e, ok := ErrorBody(body); ok {
		msg = e.Message
	}
	if m := promptTooLong.FindStringSubmatch(msg); m != nil {
		return atou(m[1]), atou(m[2])
	}
	if m := inputPlusMax.FindStringSubmatch(msg); m != nil {
		// The window left for the input is the limit less max_tokens.
		in, out, l := atou(m[1]), atou(m[2]), atou(m[3])
		if out >= l {
			return in, 0
		}
		return in, l - out
	}
	return 0, 0
}

var (
	promptTooLong = regexp.MustCompile(`(?i)prompt is too long:\s*([0-9]+)\s*tokens\s*>\s*([0-9]+)`)
	inputPlusMax  = regexp.MustCompile(`(?i)exceed context limit:\s*([0-9]+)\s*\+\s*([0-9]+)\s*>\s*([0-9]+)`)
)

// atou is s as a uint64, 0 when it is not one.
func atou(s string) uint64 {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// StreamReader rebuilds a Response from the server-sent events of a
// streamed Messages API answer (message_start, content_block_start /
// _delta / _stop, message_delta, message_stop, ping, error). It is an
// io.Writer fed the bytes as they pass (a tee): Write never fails and never
// holds more than the current event, so a stream can be read on its way to
// the client without being buffered. Not safe for concurrent use.
type StreamReader struct {
	events  sse.Events // the stream's events
	resp    Response
	partial map[int]*strings.Builder // input_json_delta text per block index
	index   map[int]int              // block index → position in resp.Content
	// deltas holds the text, thinking, signature and compaction deltas of
	// each block (by position in resp.Content), appended in amortized
	// constant time and joined into the block by Response: a string
	// grown by += copied the whole text at every delta (quadratic).
	deltas map[int]*blockDeltas
	err    error
}

// blockDeltas is the text a block's deltas carried so far.
type blockDeltas struct {
	text, thinking, signature, compaction strings.Builder
	compacted                             bool
}

// NewStreamReader returns a StreamReader with nothing read, whose lines
// are at most sse.DefaultMaxLine bytes.
func NewStreamReader() *StreamReader { return NewStreamReaderMax(0) }

// NewStreamReaderMax returns a StreamReader whose lines are at most
// maxLine bytes (0: sse.DefaultMaxLine): a longer line is dropped, and
// Response reports sse.ErrLineTooLong.
func NewStreamReaderMax(maxLine int) *StreamReader {
	return &StreamReader{events: sse.Events{Lines: sse.Lines{Max: maxLine}}, partial: map[int]*strings.Builder{}, index: map[int]int{}, deltas: map[int]*blockDeltas{}}
}

// Write feeds stream bytes. It always returns len(p), nil; a malformed
// event is remembered and reported by Response.
func (s *StreamReader) Write(p []byte) (int, error) {
	s.events.Feed(p, s.handleEvent)
	if err := s.events.Err(); err != nil {
		s.fail(err)
	}
	return len(p), nil
}

// handleEvent applies one server-sent event; event names are not needed
// (the data carries its type).
func (s *StreamReader) handleEvent(ev sse.Event) { s.event(ev.Data) }

// streamEvent is the union of the stream's event payloads.
type streamEvent struct {
	Type    string `json:"type"`
	Message *struct {
		ID    string `json:"id"`
		Model string `json:"model"`
		Usage Usage  `json:"usage"`
	} `json:"message"`
	Index        int             `json:"index"`
	ContentBlock json.RawMessage `json:"content_block"`
	Delta        *struct {
		Type        string `json:"type"`
		Text        string `json:"text"`
		Thinking    string `json:"thinking"`
		Signature   string `json:"signature"`
		PartialJSON string `json:"partial_json"`
		StopReason  string `json:"stop_reason"`
		// Content is a compaction_delta's summary text (server-side
		// compaction, compact_20260112).
		Content *string `json:"content"`
	} `json:"delta"`
	Usage *struct {
		InputTokens              *uint64        `json:"input_tokens"`
		CacheCreationInputTokens *uint64        `json:"cache_creation_input_tokens"`
		CacheReadInputTokens     *uint64        `json:"cache_read_input_tokens"`
		OutputTokens             *uint64        `json:"output_tokens"`
		CacheCreation            *CacheCreation `json:"cache_creation"`
	} `json:"usage"`
	// ContextManagement is message_delta's report of the edits the
	// provider applied (the client's context_management).
	ContextManagement *ContextManagement `json:"context_management"`
	Error             *APIError          `json:"error"`
}

func (s *StreamReader) fail(err error) {
	if s.err == nil {
		s.err = err
	}
}

// event applies one event's data.
func (s *StreamReader) event(data []byte) {
	var ev streamEvent
	if err := json.Unmarshal(data, &ev); err != nil {
		s.fail(fmt.Errorf("stream event: %w", err))
		return
	}
	switch ev.Type {
	case "message_start":
		if ev.Message != nil {
			s.resp.ID, s.resp.Model, s.resp.Usage = ev.Message.ID, ev.Message.Model, ev.Message.Usage
		}
	case "content_block_start":
		var b WireBlock
		if err := json.Unmarshal(ev.ContentBlock, &b); err != nil {
			s.fail(fmt.Errorf("content_block_start %d: %w", ev.Index, err))
			return
		}
		b.Raw = append(json.RawMessage(nil), ev.ContentBlock...)
		s.index[ev.Index] = len(s.resp.Content)
		s.resp.Content = append(s.resp.Content, b)
	case "content_block_delta":
		pos, ok := s.index[ev.Index]
		if !ok || ev.Delta == nil {
			s.fail(fmt.Errorf("content_block_delta for unknown block %d", ev.Index))
			return
		}
		d := s.deltas[pos]
		if d == nil {
			d = &blockDeltas{}
			s.deltas[pos] = d
		}
		switch ev.Delta.Type {
		case "text_delta":
			d.text.WriteString(ev.Delta.Text)
		case "thinking_delta":
			d.thinking.WriteString(ev.Delta.Thinking)
		case "signature_delta":
			d.signature.WriteString(ev.Delta.Signature)
		case "compaction_delta":
			// The provider's compaction summary: its block started with
			// content null.
			if ev.Delta.Content != nil {
				d.compacted = true
				d.compaction.WriteString(*ev.Delta.Content)
			}
		case "input_json_delta":
			sb := s.partial[ev.Index]
			if sb == nil {
				sb = &strings.Builder{}
				s.partial[ev.Index] = sb
			}
			sb.WriteString(ev.Delta.PartialJSON)
		}
	case "content_block_stop":
		pos, ok := s.index[ev.Index]
		if !ok {
			return
		}
		if sb := s.partial[ev.Index]; sb != nil {
			in := json.RawMessage(sb.String())
			if len(bytes.TrimSpace(in)) == 0 {
				in = json.RawMessage("{}")
			}
			// A tool call's input is a JSON object (docs/design.md §2); anything
			// else cannot be recorded, so the answer is malformed.
			var obj map[string]json.RawMessage
			if json.Unmarshal(in, &obj) != nil || obj == nil {
				s.fail(fmt.Errorf("content block %d: tool_use input is not a JSON object", ev.Index))
				return
			}
			s.resp.Content[pos].Input = in
			if b := &s.resp.Content[pos]; b.Type != "tool_use" {
				// A block kept whole (server_tool_use, mcp_tool_use):
				// its bytes are the block as it started, input {}; they
				// take the input the deltas assembled, in place, so the
				// recorded block is the one the client sends back.
				b.Raw = withInput(b.Raw, in)
			}
			delete(s.partial, ev.Index)
		}
	case "message_delta":
		if ev.Delta != nil && ev.Delta.StopReason != "" {
			s.resp.StopReason = ev.Delta.StopReason
		}
		if u := ev.Usage; u != nil {
			set := func(dst *uint64, v *uint64) {
				if v != nil {
					*dst = *v
				}
			}
			set(&s.resp.Usage.InputTokens, u.InputTokens)
			set(&s.resp.Usage.CacheCreationInputTokens, u.CacheCreationInputTokens)
			set(&s.resp.Usage.CacheReadInputTokens, u.CacheReadInputTokens)
			set(&s.resp.Usage.OutputTokens, u.OutputTokens)
			if u.CacheCreation != nil {
				c := *u.CacheCreation
				s.resp.Usage.CacheCreation = &c
			}
		}
		if ev.ContextManagement != nil {
			s.resp.Usage.Cleared = ev.ContextManagement.Cleared()
		}
	case "message_stop":
		s.resp.Complete = true
	case "error":
		s.resp.Error = ev.Error
	}
}

// ErrIncomplete: the stream ended before message_stop.
var ErrIncomplete = errors.New("stream ended before message_stop")

// Response returns what the stream carried so far. The error is the first
// malformed event, else ErrIncomplete when message_stop has not arrived
// (and no error event explains it); the partial Response is returned with
// it.
func (s *StreamReader) Response() (*Response, error) {
	s.events.Flush(s.handleEvent) // a final event without its blank line
	r := s.resp
	r.Content = append([]WireBlock(nil), s.resp.Content...)
	for pos, d := range s.deltas {
		b := &r.Content[pos]
		b.Text += d.text.String()
		b.Thinking += d.thinking.String()
		b.Signature += d.signature.String()
		if d.compacted {
			var sum string
			_ = json.Unmarshal(b.Content, &sum)
			b.Content, _ = json.Marshal(sum + d.compaction.String())
		}
	}
	if s.err != nil {
		return &r, s.err
	}
	if !r.Complete && r.Error == nil {
		return &r, ErrIncomplete
	}
	return &r, nil
}

// withInput is raw, a block as content_block_start carried it, with its
// input member's value replaced by in (compacted, as clients send it back):
// in place when raw holds the empty "input":{} the stream starts with, the
// other members' bytes and order kept; re-encoded otherwise.
func withInput(raw json.RawMessage, in json.RawMessage) json.RawMessage {
	var c bytes.Buffer
	if json.Compact(&c, in) != nil {
		return raw
	}
	if bytes.Count(raw, []byte(`"input":{}`)) == 1 {
		return bytes.Replace(raw, []byte(`"input":{}`), append([]byte(`"input":`), c.Bytes()...), 1)
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return raw
	}
	m["input"] = c.Bytes()
	out, err := json.Marshal(m)
	if err != nil {
		return raw
	}
	return out
}

// Text is the answer's text blocks concatenated, without separators.
func (r *Response) Text() string {
	var text strings.Builder
	for _, c := range r.Content {
		if c.Type == "text" {
			text.WriteString(c.Text)
		}
	}
	return text.String()
}

// CallsTool reports whether the answer calls a tool: a tool_use,
// server_tool_use or mcp_tool_use block, or the stop reason "tool_use".
func (r *Response) CallsTool() bool {
	for _, c := range r.Content {
		switch c.Type {
		case "tool_use", "server_tool_use", "mcp_tool_use":
			return true
		}
	}
	return r.StopReason == "tool_use"
}

// Truncated reports whether the answer was cut before its end: at
// max_tokens, at the context window ("model_context_window_exceeded"), or
// paused ("pause_turn").
func (r *Response) Truncated() bool {
	switch r.StopReason {
	case "max_tokens", "model_context_window_exceeded", "pause_turn":
		return true
	}
	return false
}

// Refused reports whether the model declined to answer (stop reason
// "refusal").
func (r *Response) Refused() bool { return r.StopReason == "refusal" }

// OwnBlockType reports whether a content block type belongs to the
// Messages API and not to OpenAI's Chat Completions (how an importer tells
// an Anthropic message array from a Chat one).
func OwnBlockType(t string) bool {
	switch t {
	case "tool_use", "tool_result", "thinking", "redacted_thinking", "image", "document":
		return true
	}
	return false
}
