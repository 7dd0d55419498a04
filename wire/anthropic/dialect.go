package anthropic

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/rawjson"
	"github.com/ctxd/ctxd/wire"
)

// CountTokensPath is the Messages API's token count (a POST).
const CountTokensPath = "/v1/messages/count_tokens"

// Dialect is the Messages API (POST /v1/messages) as wire.Dialect.
type Dialect struct{}

var _ wire.Dialect = Dialect{}

func (Dialect) Name() string                  { return "anthropic" }
func (Dialect) Upstream() string              { return "anthropic" }
func (Dialect) Path() string                  { return "/v1/messages" }
func (Dialect) ItemsKey() string              { return "messages" }
func (Dialect) IsPrefix(json.RawMessage) bool { return false }

// Parse reads raw[from:], a tool result taking its tool's name from the
// call in the message before.
func (Dialect) Parse(raw []json.RawMessage, from int) ([]history.Message, error) {
	out, _, err := ParseEach(raw, from)
	return out, err
}

// ParseEach is Parse, with where each message's reading ends: raw[from+j]
// reads as out[ends[j-1]:ends[j]] (ends[-1] being 0), what
// ParseMessage(raw[from+j], names) gives (ClientKeyOf takes it).
func ParseEach(raw []json.RawMessage, from int) (out []history.Message, ends []int, err error) {
	names := map[string]string{}
	if from > 0 {
		_, _ = ParseMessage(raw[from-1], names)
	}
	ends = make([]int, 0, max(0, len(raw)-from))
	for i := from; i < len(raw); i++ {
		ms, err := ParseMessage(raw[i], names)
		if err != nil {
			if errors.As(err, new(wholeMessageError)) {
				return nil, nil, fmt.Errorf("messages[%d]: %w", i, err)
			}
			return nil, nil, fmt.Errorf("messages[%d].%w", i, err)
		}
		out = append(out, ms...)
		ends = append(ends, len(out))
	}
	return out, ends, nil
}

// MatchKey: an assistant message matches by its MatchKey, so a client
// that strips thinking, re-flows whitespace, drops or reorders fields or
// edits a tool input in what it resends does not start a branch
// (docs/design.md §10). Any other role has none (its role is read first,
// without decoding the message).
func (Dialect) MatchKey(raw []byte) ([]byte, bool) {
	if Role(raw) != "assistant" {
		return nil, false
	}
	return MatchKey(raw)
}

// Role is the role of the client's message raw ("" when it has none),
// read without decoding the rest.
func Role(raw []byte) string {
	role := ""
	rawjson.Members(raw, func(key string, vs, ve int) bool {
		if key == "role" {
			_ = json.Unmarshal(raw[vs:ve], &role)
			return false
		}
		return true
	})
	return role
}

// AnswerLen: an answer is one assistant message.
func (Dialect) AnswerLen(items []json.RawMessage, n int, same func(history.Message) bool) int {
	msgs, err := ParseMessage(items[n], nil)
	if err != nil || len(msgs) != 1 || msgs[0].Role != history.RoleAssistant || !same(msgs[0]) {
		return 0
	}
	return 1
}

// SystemText reads a system prompt: a string or an array of text blocks.
func (Dialect) SystemText(raw json.RawMessage, _ []json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	blocks, err := DecodeContent(raw)
	if err != nil {
		return ""
	}
	return JoinText(blocks)
}

// Tools reads the tools of a request for the engine's estimate.
func (Dialect) Tools(raw json.RawMessage) []history.ToolDef {
	var tools []history.ToolDef
	if len(raw) == 0 || json.Unmarshal(raw, &tools) != nil {
		return nil
	}
	out := tools[:0]
	for _, t := range tools {
		if t.Name != "" {
			out = append(out, t)
		}
	}
	return out
}

// ThinkingMode reads a request's thinking setting as the rules of
// docs/design.md §4a see it: "enabled" is ThinkingOn, "adaptive"
// ThinkingAdaptive (the model decides per turn), anything else — absent,
// "disabled" — ThinkingOff.
func ThinkingMode(raw json.RawMessage) history.Thinking {
	var t struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(raw, &t)
	switch t.Type {
	case "enabled":
		return history.ThinkingOn
	case "adaptive":
		return history.ThinkingAdaptive
	}
	return history.ThinkingOff
}

func (Dialect) IsContextLength(status int, body []byte) bool { return IsContextLength(status, body) }
func (Dialect) ContextLengthFigures(body []byte) (uint64, uint64) {
	return ContextLengthFigures(body)
}

func (Dialect) NewAnswerReader(maxLine int) wire.AnswerReader {
	return answerReader{NewStreamReaderMax(maxLine)}
}

type answerReader struct{ *StreamReader }

func (r answerReader) Answer() (history.Message, string, error) { return answerOf(r.Response()) }

// UsageSoFar is message_start's usage, updated by any message_delta
// since (wire.UsageSoFar); nil before message_start.
func (r answerReader) UsageSoFar() *history.Usage {
	r.events.Flush(r.handleEvent) // a final event without its blank line
	if r.resp.ID == "" && r.resp.Model == "" {
		return nil
	}
	u := r.resp.Usage
	return u.Canonical()
}

func answerOf(resp *Response, err error) (history.Message, string, error) {
	if resp != nil && resp.Error != nil {
		return history.Message{}, resp.Error.Type + ": " + resp.Error.Message, nil
	}
	if err != nil || resp == nil {
		return history.Message{}, "", err
	}
	return resp.Message(), "", nil
}

func (Dialect) DecodeAnswer(body []byte) (history.Message, string, error) {
	return answerOf(DecodeResponse(body))
}

func (Dialect) ErrorMessage(body []byte) (string, bool) {
	e, ok := ErrorBody(body)
	return e.Type + ": " + e.Message, ok
}

// WriteError answers with an error in the Anthropic shape.
func (Dialect) WriteError(w http.ResponseWriter, status int, typ, msg string) {
	WriteError(w, status, typ, msg)
}

// WriteError answers with an error in the Anthropic shape, so an agent
// shows it as it would the provider's.
func WriteError(w http.ResponseWriter, status int, typ, msg string) {
	wire.WriteJSONError(w, status, ErrorJSON(typ, msg))
}

// ErrorJSON is an Anthropic error body of type typ ("overloaded_error",
// …) and message msg: {"type":"error","error":{"type":…,"message":…}}.
func ErrorJSON(typ, msg string) []byte {
	b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}})
	return b
}
