package responses

import (
	"bytes"
	"encoding/json"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/wire/openai"
	"github.com/ctxd/ctxd/wire/sse"
)

// Answer is a Responses assistant answer, rebuilt from a stream or a JSON
// body.
type Answer struct {
	// Model is the model the provider named.
	Model string
	// Items are the output items, each as the provider sent it.
	Items []json.RawMessage
	// openai.Usage is the reported usage, nil when none was reported: input
	// tokens without the cached ones, cached ones as cache reads.
	Usage *history.Usage
	// Error is an error the stream carried (response.failed, an error
	// event or chunk), nil when none.
	Error *openai.APIError
	// Done: the stream reached its end (response.completed, or a Chat
	// finish_reason / [DONE]).
	Done bool
}

// Message returns the answer as a canonical assistant message.
func (a *Answer) Message() (history.Message, error) {
	var m history.Message
	{
		ms, err := ParseItems(a.Items, 0)
		if err != nil {
			return history.Message{}, err
		}
		for _, x := range ms {
			if x.Role == history.RoleAssistant {
				m.Content = append(m.Content, x.Content...)
			}
		}
	}
	m.Role, m.Model, m.Usage = history.RoleAssistant, a.Model, a.Usage
	return m, nil
}

// responseObject is the part of a Responses response object read here.
type responseObject struct {
	Model  string            `json:"model"`
	Output []json.RawMessage `json:"output"`
	Usage  json.RawMessage   `json:"usage"`
	Error  *openai.APIError  `json:"error"`
}

// DecodeResponses reads a non-streamed Responses answer (the response
// object). Errors: not JSON.
func DecodeResponses(body []byte) (*Answer, error) {
	var r responseObject
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, err
	}
	return &Answer{Model: r.Model, Items: nonNil(r.Output), Usage: openai.Usage(r.Usage), Error: r.Error, Done: true}, nil
}

func nonNil(items []json.RawMessage) []json.RawMessage {
	if items == nil {
		return []json.RawMessage{}
	}
	return items
}

// StreamReader rebuilds an Answer from the server-sent events of a streamed
// Responses answer, fed the bytes as they pass (an io.Writer used as a
// tee): Write never fails and holds no more than the current line. It
// keeps each response.output_item.done item and the usage of
// response.completed (response.failed and error events give Error). Not
// safe for concurrent use.
type StreamReader struct {
	lines sse.Lines
	a     Answer
}

// NewResponsesStreamReader reads a Responses stream whose lines are at
// most maxLine bytes (0: sse.DefaultMaxLine).
func NewResponsesStreamReader(maxLine int) *StreamReader {
	return &StreamReader{lines: sse.Lines{Max: maxLine}, a: Answer{Items: []json.RawMessage{}}}
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
	s.event(data)
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
			s.a.Usage = openai.Usage(r.Usage)
			if len(s.a.Items) == 0 && len(r.Output) > 0 {
				s.a.Items = r.Output
			}
		}
	case "response.failed":
		s.a.Done = true
		if ev.Response != nil && ev.Response.Error != nil {
			s.a.Error = ev.Response.Error
		} else {
			s.a.Error = &openai.APIError{Type: "response.failed", Message: "the response failed"}
		}
	case "error":
		s.a.Error = &openai.APIError{Type: "error", Message: ev.Message, Code: ev.Code}
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
	if !a.Done {
		return a, openai.ErrIncomplete
	}
	return a, nil
}
