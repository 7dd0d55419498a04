package chat

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/wire/openai"
	"github.com/ctxd/ctxd/wire/sse"
)

// Answer is a Chat Completions assistant answer, rebuilt from a stream or
// a JSON body.
type Answer struct {
	// Model is the model the provider named.
	Model string
	// Chat is the assistant message.
	Chat ChatMessage
	// reasoning is a Chat answer's reasoning_content.
	reasoning strings.Builder
	// openai.Usage is the reported usage, nil when none was reported: input
	// tokens without the cached ones, cached ones as cache reads.
	Usage *history.Usage
	// Error is an error the stream carried (response.failed, an error
	// event or chunk), nil when none.
	Error *openai.APIError
	// Done: the stream reached its end (response.completed, or a Chat
	// finish_reason / [DONE]).
	Done bool

	// Of a JSON body (DecodeChat) only: choices is how many choices it
	// has; finish, refusal and functionCall are the first choice's
	// finish_reason, message.refusal and whether its message carries a
	// (legacy) function_call.
	choices      int
	finish       string
	refusal      string
	functionCall bool
}

// HasChoice reports whether a decoded JSON body (DecodeChat) has a choice.
func (a *Answer) HasChoice() bool { return a.choices > 0 }

// Text is the answer's text: its content as a string, or its text (and
// output_text) parts concatenated; "" for null or another shape.
func (a *Answer) Text() string { return ContentText(a.Chat.Content) }

// CallsTool reports whether the answer calls a tool: tool calls, a legacy
// function_call, or finish_reason "tool_calls" or "function_call".
func (a *Answer) CallsTool() bool {
	return len(a.Chat.ToolCalls) > 0 || a.functionCall || a.finish == "tool_calls" || a.finish == "function_call"
}

// Truncated reports whether a decoded JSON body's answer stopped at the
// output cap (finish_reason "length").
func (a *Answer) Truncated() bool { return a.finish == "length" }

// Refused reports whether a decoded JSON body's answer is a refusal (a
// non-empty message.refusal, or finish_reason "content_filter").
func (a *Answer) Refused() bool { return a.refusal != "" || a.finish == "content_filter" }

// ContentText reads Chat message content that is a string, or an array of
// parts whose text and output_text parts it concatenates; "" for null or
// anything else.
func ContentText(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) == nil {
		var b strings.Builder
		for _, p := range parts {
			if p.Type == "text" || p.Type == "output_text" {
				b.WriteString(p.Text)
			}
		}
		return b.String()
	}
	return ""
}

// OwnPartType reports whether a content part type belongs to Chat
// Completions and not to Anthropic's Messages API (how an importer tells a
// Chat message array from an Anthropic one).
func OwnPartType(t string) bool {
	switch t {
	case "image_url", "input_audio", "file", "refusal":
		return true
	}
	return false
}

// Message returns the answer as a canonical assistant message.
func (a *Answer) Message() (history.Message, error) {
	var m history.Message
	{
		raw, _ := openai.Marshal(a.Chat)
		if a.reasoning.Len() > 0 {
			var obj map[string]any
			_ = json.Unmarshal(raw, &obj)
			obj["reasoning_content"] = a.reasoning.String()
			raw, _ = openai.Marshal(obj)
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

// chatCompletion is the part of a Chat answer (whole or chunk) read here.
type chatCompletion struct {
	Model   string `json:"model"`
	Choices []struct {
		Index        int                `json:"index"`
		Message      *chatAnswerMessage `json:"message"`
		Delta        *chatDelta         `json:"delta"`
		FinishReason json.RawMessage    `json:"finish_reason"`
	} `json:"choices"`
	Usage json.RawMessage  `json:"usage"`
	Error *openai.APIError `json:"error"`
}

// chatAnswerMessage is the message of a non-streamed Chat answer: its tool
// calls keep their arguments as the string the answer carries.
type chatAnswerMessage struct {
	Content          json.RawMessage `json:"content"`
	ToolCalls        []ToolCall      `json:"tool_calls"`
	ReasoningContent string          `json:"reasoning_content"`
	FunctionCall     json.RawMessage `json:"function_call"`
	Refusal          *string         `json:"refusal"`
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
	a := &Answer{Model: c.Model, Usage: openai.Usage(c.Usage), Error: c.Error, Done: true, choices: len(c.Choices)}
	a.Chat.Role = "assistant"
	if len(c.Choices) > 0 {
		_ = json.Unmarshal(c.Choices[0].FinishReason, &a.finish)
	}
	if len(c.Choices) > 0 && c.Choices[0].Message != nil {
		m := c.Choices[0].Message
		a.Chat.Content, a.Chat.ToolCalls = m.Content, m.ToolCalls
		a.reasoning.WriteString(m.ReasoningContent)
		a.functionCall = len(m.FunctionCall) > 0 && !bytes.Equal(m.FunctionCall, []byte("null"))
		if m.Refusal != nil {
			a.refusal = *m.Refusal
		}
	}
	return a, nil
}

// StreamReader rebuilds an Answer from the server-sent events of a streamed
// Chat answer, fed the bytes as they pass (an io.Writer used as a tee):
// Write never fails and holds no more than the current line. It
// reassembles the content and reasoning deltas and each tool call from its
// argument deltas (by index), and takes usage from the chunk that carries
// it. Not safe for concurrent use.
type StreamReader struct {
	lines sse.Lines
	a     Answer
	calls []ToolCall
	// names and args are the tool calls' name and argument deltas, by
	// index, joined by Answer (linear: += copied at every delta).
	names, args []*strings.Builder
	text        strings.Builder
}

// NewChatStreamReader reads a Chat Completions stream whose lines are at
// most maxLine bytes (0: sse.DefaultMaxLine).
func NewChatStreamReader(maxLine int) *StreamReader {
	return &StreamReader{lines: sse.Lines{Max: maxLine}}
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
	s.chunk(data)
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
	if u := openai.Usage(c.Usage); u != nil {
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
			if tc.Index < 0 || tc.Index > openai.MaxToolCalls {
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
	{
		calls := slices.Clone(s.calls)
		for i := range calls {
			calls[i].Function.Name = s.names[i].String()
			calls[i].Function.Arguments = s.args[i].String()
		}
		a.Chat = ChatMessage{Role: "assistant", ToolCalls: calls}
		if s.text.Len() > 0 {
			a.Chat.Content, _ = openai.Marshal(s.text.String())
		} else {
			a.Chat.Content = json.RawMessage("null")
		}
	}
	if !a.Done {
		return a, openai.ErrIncomplete
	}
	return a, nil
}
