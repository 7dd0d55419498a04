package openai

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/ctxd/ctxd/history"
)

// Common is the part of wire.Dialect both OpenAI APIs share; chat.Dialect
// and responses.Dialect embed it.
type Common struct{}

func (Common) Upstream() string                     { return "openai" }
func (Common) MatchKey([]byte) ([]byte, bool)       { return nil, false }
func (Common) IsContextLength(s int, b []byte) bool { return IsContextLength(s, b) }
func (Common) ContextLengthFigures(body []byte) (uint64, uint64) {
	return ContextLengthFigures(body)
}

// SystemText is the instructions and the prefix items' text.
func (Common) SystemText(system json.RawMessage, prefix []json.RawMessage) string {
	var parts []string
	if len(system) > 0 {
		var s string
		if json.Unmarshal(system, &s) == nil && s != "" {
			parts = append(parts, s)
		}
	}
	for _, raw := range prefix {
		parts = append(parts, string(raw))
	}
	return strings.Join(parts, "\n\n")
}

// Tools reads function tools in either API's shape (Responses: name at the
// top; Chat: under "function").
func (Common) Tools(raw json.RawMessage) []history.ToolDef {
	var in []struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
		Function    *struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &in) != nil {
		return nil
	}
	var out []history.ToolDef
	for _, t := range in {
		if t.Function != nil {
			t.Name, t.Description, t.Parameters = t.Function.Name, t.Function.Description, t.Function.Parameters
		}
		if t.Name == "" {
			continue
		}
		if len(t.Parameters) == 0 || t.Parameters[0] != '{' {
			t.Parameters = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		out = append(out, history.ToolDef{Name: t.Name, Description: t.Description, InputSchema: t.Parameters})
	}
	return out
}

func (Common) ErrorMessage(body []byte) (string, bool) {
	e, ok := ErrorBody(body)
	return e.Type + ": " + e.Message, ok
}

// WriteError answers in OpenAI's error shape, so an agent shows it as it
// would the provider's.
func (Common) WriteError(w http.ResponseWriter, status int, typ, msg string) {
	WriteError(w, status, typ, msg)
}

// WriteError answers in OpenAI's error shape.
func WriteError(w http.ResponseWriter, status int, typ, msg string) {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// AnswerLen is a wire.Dialect's AnswerLen over parse: the k items from n
// parsed as one assistant message, blank text blocks left out for same
// (0: they are not one).
func AnswerLen(parse func([]json.RawMessage, int) ([]history.Message, error), items []json.RawMessage, n, k int, same func(history.Message) bool) int {
	ms, err := parse(items[:n+k], n)
	if err != nil || len(ms) != 1 || ms[0].Role != history.RoleAssistant {
		return 0
	}
	var kept []history.Block
	for _, b := range ms[0].Content {
		if b.Type == history.BlockText && strings.TrimSpace(b.Text) == "" {
			continue
		}
		kept = append(kept, b)
	}
	if !same(history.Message{Content: kept}) {
		return 0
	}
	return k
}

// ArrayOf is raws as one JSON array, each element byte for byte; nil when
// there are none.
func ArrayOf(raws []json.RawMessage) []byte {
	if len(raws) == 0 {
		return nil
	}
	n := 2
	for _, r := range raws {
		n += len(r) + 1
	}
	out := make([]byte, 0, n)
	out = append(out, '[')
	for i, r := range raws {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, r...)
	}
	return append(out, ']')
}
