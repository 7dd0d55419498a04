package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/wire/overflow"
	"github.com/ctxd/ctxd/wire/sse"
)

// Answer is an assistant answer of either OpenAI API, rebuilt from a
// stream or a JSON body.
type Answer struct {
	// Model is the model the provider named.
	Model string
	// Items are the Responses output items, each as the provider sent it
	// (nil for Chat).
	Items []json.RawMessage
	// Chat is the Chat Completions assistant message (zero for Responses).
	Chat ChatMessage
	// reasoning is a Chat answer's reasoning_content.
	reasoning strings.Builder
	// Usage is the reported usage, nil when none was reported: input
	// tokens without the cached ones, cached ones as cache reads.
	Usage *history.Usage
	// Error is an error the stream carried (response.failed, an error
	// event or chunk), nil when none.
	Error *APIError
	// Done: the stream reached its end (response.completed, or a Chat
	// finish_reason / [DONE]).
	Done bool
}

// APIError is the error object of an OpenAI error body.
type APIError struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    any    `json:"code"`
}

// Message returns the answer as a canonical assistant message.
func (a *Answer) Message() (history.Message, error) {
	var m history.Message
	if a.Items != nil {
		ms, err := ParseItems(a.Items, 0)
		if err != nil {
			return history.Message{}, err
		}
		for _, x := range ms {
			if x.Role == history.RoleAssistant {
				m.Content = append(m.Content, x.Content...)
			}
		}
	} else {
		raw, _ := marshal(a.Chat)
		if a.reasoning.Len() > 0 {
			var obj map[string]any
			_ = json.Unmarshal(raw, &obj)
			obj["reasoning_content"] = a.reasoning.String()
			raw, _ = marshal(obj)
		}
		ms, err := ParseChat([]json.RawMessage{raw}, 0)
		if err != nil {
			return history.Message{}, err
		}
		m = ms[0]
		var kept []history.Block
		for _, b := range m.Content {
			if b.Type == history.BlockText && b.Text == "" {
				continue
			}
			kept = append(kept, b)
		}
		m.Content = kept
	}
	m.Role, m.Model, m.Usage = history.RoleAssistant, a.Model, a.Usage
	return m, nil
}

// usageOf maps either API's usage object to the canonical one.
func usageOf(raw json.RawMessage) *history.Usage {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var u struct {
		InputTokens        uint64 `json:"input_tokens"`
		OutputTokens       uint64 `json:"output_tokens"`
		PromptTokens       uint64 `json:"prompt_tokens"`
		CompletionTokens   uint64 `json:"completion_tokens"`
		InputTokensDetails *struct {
			CachedTokens uint64 `json:"cached_tokens"`
		} `json:"input_tokens_details"`
		PromptTokensDetails *struct {
			CachedTokens uint64 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	}
	if json.Unmarshal(raw, &u) != nil {
		return nil
	}
	in, out, cached := u.InputTokens+u.PromptTokens, u.OutputTokens+u.CompletionTokens, uint64(0)
	if u.InputTokensDetails != nil {
		cached = u.InputTokensDetails.CachedTokens
	}
	if u.PromptTokensDetails != nil {
		cached += u.PromptTokensDetails.CachedTokens
	}
	cached = min(cached, in)
	return &history.Usage{InputTokens: in - cached, CacheReadInputTokens: cached, OutputTokens: out}
}

// responseObject is the part of a Responses response object read here.
type responseObject struct {
	Model  string            `json:"model"`
	Output []json.RawMessage `json:"output"`
	Usage  json.RawMessage   `json:"usage"`
	Error  *APIError         `json:"error"`
}

// DecodeResponses reads a non-streamed Responses answer (the response
// object). Errors: not JSON.
func DecodeResponses(body []byte) (*Answer, error) {
	var r responseObject
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, err
	}
	return &Answer{Model: r.Model, Items: nonNil(r.Output), Usage: usageOf(r.Usage), Error: r.Error, Done: true}, nil
}

func nonNil(items []json.RawMessage) []json.RawMessage {
	if items == nil {
		return []json.RawMessage{}
	}
	return items
}

// chatCompletion is the part of a Chat answer (whole or chunk) read here.
type chatCompletion struct {
	Model   string `json:"model"`
	Choices []struct {
		Index        int                `json:"index"`
		Message      *chatAnswerMessage `json:"message"`
		Delta        *chatDelta         `json:"delta"`
		FinishReason json.RawMessage    `json:"finish_reason"`
	} `json:"choices"`
	Usage json.RawMessage `json:"usage"`
	Error *APIError       `json:"error"`
}

// chatAnswerMessage is the message of a non-streamed Chat answer: its tool
// calls keep their arguments as the string the answer carries.
type chatAnswerMessage struct {
	Content          json.RawMessage `json:"content"`
	ToolCalls        []ToolCall      `json:"tool_calls"`
	ReasoningContent string          `json:"reasoning_content"`
}

type chatDelta struct {
	Content          *string `json:"content"`
	ReasoningContent *string `json:"reasoning_content"`
	Reasoning        *string `json:"reasoning"`
	ToolCalls        []struct {
		Index    int    `json:"index"`
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// DecodeChat reads a non-streamed Chat Completions answer (its first
// choice). Errors: not JSON.
func DecodeChat(body []byte) (*Answer, error) {
	var c chatCompletion
	if err := json.Unmarshal(body, &c); err != nil {
		return nil, err
	}
	a := &Answer{Model: c.Model, Usage: usageOf(c.Usage), Error: c.Error, Done: true}
	a.Chat.Role = "assistant"
	if len(c.Choices) > 0 && c.Choices[0].Message != nil {
		m := c.Choices[0].Message
		a.Chat.Content, a.Chat.ToolCalls = m.Content, m.ToolCalls
		a.reasoning.WriteString(m.ReasoningContent)
	}
	return a, nil
}

// ErrIncomplete: the stream ended before its end event.
var ErrIncomplete = errors.New("the stream ended before its end")

// maxToolCalls bounds the index of a streamed tool call: a hostile index
// would otherwise allocate that many calls.
const maxToolCalls = 4096

// StreamReader rebuilds an Answer from the server-sent events of a streamed
// answer of either API, fed the bytes as they pass (an io.Writer used as a
// tee): Write never fails and holds no more than the current line. For
// Responses it keeps each response.output_item.done item and the usage of
// response.completed (response.failed and error events give Error); for
// Chat it reassembles the content and reasoning deltas and each tool call
// from its argument deltas (by index), and takes usage from the chunk that
// carries it. Not safe for concurrent use.
type StreamReader struct {
	chat  bool
	lines sse.Lines
	a     Answer
	calls []ToolCall
	// names and args are the tool calls' name and argument deltas, by
	// index, joined by Answer (linear: += copied at every delta).
	names, args []*strings.Builder
	text        strings.Builder
}

// NewResponsesStreamReader reads a Responses stream whose lines are at
// most maxLine bytes (0: sse.DefaultMaxLine).
func NewResponsesStreamReader(maxLine int) *StreamReader {
	return &StreamReader{lines: sse.Lines{Max: maxLine}, a: Answer{Items: []json.RawMessage{}}}
}

// NewChatStreamReader reads a Chat Completions stream whose lines are at
// most maxLine bytes (0: sse.DefaultMaxLine).
func NewChatStreamReader(maxLine int) *StreamReader {
	return &StreamReader{lines: sse.Lines{Max: maxLine}, chat: true}
}

// Write feeds stream bytes; it always returns len(p), nil. A line over the
// limit is dropped; Answer then reports sse.ErrLineTooLong.
func (s *StreamReader) Write(p []byte) (int, error) {
	s.lines.Feed(p, s.handle)
	return len(p), nil
}

func (s *StreamReader) handle(line []byte) {
	data, ok := sse.Data(line)
	if !ok {
		return
	}
	data = bytes.TrimSpace(data)
	if s.chat {
		s.chunk(data)
	} else {
		s.event(data)
	}
}

func (s *StreamReader) event(data []byte) {
	var ev struct {
		Type     string          `json:"type"`
		Item     json.RawMessage `json:"item"`
		Response *responseObject `json:"response"`
		Message  string          `json:"message"`
		Code     any             `json:"code"`
	}
	if json.Unmarshal(data, &ev) != nil {
		return
	}
	switch ev.Type {
	case "response.created", "response.in_progress":
		if ev.Response != nil && ev.Response.Model != "" {
			s.a.Model = ev.Response.Model
		}
	case "response.output_item.done":
		if len(ev.Item) > 0 {
			s.a.Items = append(s.a.Items, append(json.RawMessage(nil), ev.Item...))
		}
	case "response.completed", "response.incomplete":
		s.a.Done = true
		if r := ev.Response; r != nil {
			if r.Model != "" {
				s.a.Model = r.Model
			}
			s.a.Usage = usageOf(r.Usage)
			if len(s.a.Items) == 0 && len(r.Output) > 0 {
				s.a.Items = r.Output
			}
		}
	case "response.failed":
		s.a.Done = true
		if ev.Response != nil && ev.Response.Error != nil {
			s.a.Error = ev.Response.Error
		} else {
			s.a.Error = &APIError{Type: "response.failed", Message: "the response failed"}
		}
	case "error":
		s.a.Error = &APIError{Type: "error", Message: ev.Message, Code: ev.Code}
	}
}

func (s *StreamReader) chunk(data []byte) {
	if string(data) == "[DONE]" {
		s.a.Done = true
		return
	}
	var c chatCompletion
	if json.Unmarshal(data, &c) != nil {
		return
	}
	if c.Model != "" {
		s.a.Model = c.Model
	}
	if c.Error != nil {
		s.a.Error = c.Error
	}
	if u := usageOf(c.Usage); u != nil {
		s.a.Usage = u
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 || ch.Delta == nil {
			continue
		}
		if len(ch.FinishReason) > 0 && string(ch.FinishReason) != "null" {
			s.a.Done = true
		}
		d := ch.Delta
		if d.Content != nil {
			s.text.WriteString(*d.Content)
		}
		if d.ReasoningContent != nil {
			s.a.reasoning.WriteString(*d.ReasoningContent)
		} else if d.Reasoning != nil {
			s.a.reasoning.WriteString(*d.Reasoning)
		}
		for _, tc := range d.ToolCalls {
			if tc.Index < 0 || tc.Index > maxToolCalls {
				continue
			}
			for len(s.calls) <= tc.Index {
				s.calls = append(s.calls, ToolCall{Type: "function"})
				s.names = append(s.names, &strings.Builder{})
				s.args = append(s.args, &strings.Builder{})
			}
			c := &s.calls[tc.Index]
			if tc.ID != "" {
				c.ID = tc.ID
			}
			s.names[tc.Index].WriteString(tc.Function.Name)
			s.args[tc.Index].WriteString(tc.Function.Arguments)
		}
	}
}

// Answer returns what the stream carried so far. The error is
// ErrIncomplete when its end was not seen (the answer may still hold a
// part).
func (s *StreamReader) Answer() (*Answer, error) {
	a := &s.a
	if err := s.lines.Err(); err != nil {
		return a, err
	}
	if s.chat {
		calls := slices.Clone(s.calls)
		for i := range calls {
			calls[i].Function.Name = s.names[i].String()
			calls[i].Function.Arguments = s.args[i].String()
		}
		a.Chat = ChatMessage{Role: "assistant", ToolCalls: calls}
		if s.text.Len() > 0 {
			a.Chat.Content, _ = marshal(s.text.String())
		} else {
			a.Chat.Content = json.RawMessage("null")
		}
	}
	if !a.Done {
		return a, ErrIncomplete
	}
	return a, nil
}

// ErrorBody decodes an OpenAI error body {"error":{...}}; ok is false when
// body is not one.
func ErrorBody(body []byte) (e APIError, ok bool) {
	var b struct {
		Error *APIError `json:"error"`
	}
	if json.Unmarshal(body, &b) != nil || b.Error == nil {
		return APIError{}, false
	}
	return *b.Error, true
}

// IsContextLength reports whether an HTTP status and body are a refusal of
// a request too long for the model's context window, by OpenAI or a
// compatible server (code context_length_exceeded, "maximum context
// length", "exceeds the context window", llama.cpp's "exceeds the
// available context size", a 413): wire/overflow's classifier, the one
// every caller uses.
func IsContextLength(status int, body []byte) bool {
	return overflow.IsContextLength(status, body)
}

// ContextLengthFigures reads the figures of a context-length refusal's
// message (IsContextLength): count is the provider's count of the refused
// request's input, limit the window it names, both in tokens; 0 for a
// figure the message does not give (the Responses API's "Your input
// exceeds the context window of this model" gives none). "This model's
// maximum context length is 4097 tokens. However, your messages resulted
// in 4363 tokens" gives 4363 and 4097; "… you requested 4120 tokens (3120
// in the messages, 1000 in the completion)" gives 3120 and 4097.
func ContextLengthFigures(body []byte) (count, limit uint64) {
	msg := string(body)
	if e, ok := ErrorBody(body); ok {
		msg = e.Message
	}
	if m := maxContextLength.FindStringSubmatch(msg); m != nil {
		limit = atou(m[1])
	}
	if m := inTheMessages.FindStringSubmatch(msg); m != nil {
		count = atou(m[1])
	} else if m := resultedIn.FindStringSubmatch(msg); m != nil {
		count = atou(m[1])
	}
	return count, limit
}

var (
	maxContextLength = regexp.MustCompile(`(?i)maximum context length is\s*([0-9]+)\s*tokens`)
	resultedIn       = regexp.MustCompile(`(?i)resulted in\s*([0-9]+)\s*tokens`)
	inTheMessages    = regexp.MustCompile(`(?i)\(([0-9]+) in the messages`)
)

// atou is s as a uint64, 0 when it is not one.
func atou(s string) uint64 {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0
	}
	return n
}
