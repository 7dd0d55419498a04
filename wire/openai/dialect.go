package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/rawjson"
	"github.com/ctxd/ctxd/wire"
	wiresse "github.com/ctxd/ctxd/wire/sse"
)

// ChatDialect is Chat Completions (POST /v1/chat/completions) as
// wire.Dialect; ResponsesDialect the Responses API (POST /v1/responses).
type (
	ChatDialect      struct{ common }
	ResponsesDialect struct{ common }
)

var (
	_ wire.Dialect = ChatDialect{}
	_ wire.Dialect = ResponsesDialect{}
)

// common is what both OpenAI APIs share.
type common struct{}

func (common) Upstream() string                     { return "openai" }
func (common) MatchKey([]byte) ([]byte, bool)       { return nil, false }
func (common) IsContextLength(s int, b []byte) bool { return IsContextLength(s, b) }
func (common) ContextLengthFigures(body []byte) (uint64, uint64) {
	return ContextLengthFigures(body)
}

// SystemText is the instructions and the prefix items' text.
func (common) SystemText(system json.RawMessage, prefix []json.RawMessage) string {
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
func (common) Tools(raw json.RawMessage) []history.ToolDef {
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

func (common) ErrorMessage(body []byte) (string, bool) {
	e, ok := ErrorBody(body)
	return e.Type + ": " + e.Message, ok
}

// WriteError answers in OpenAI's error shape, so an agent shows it as it
// would the provider's.
func (common) WriteError(w http.ResponseWriter, status int, typ, msg string) {
	WriteError(w, status, typ, msg)
}

// WriteError answers in OpenAI's error shape.
func WriteError(w http.ResponseWriter, status int, typ, msg string) {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}})
	wire.WriteJSONError(w, status, b)
}

type answerReader struct{ *StreamReader }

func (r answerReader) Answer() (history.Message, string, error) {
	return answerOf(r.StreamReader.Answer())
}

func answerOf(a *Answer, err error) (history.Message, string, error) {
	if a != nil && a.Error != nil {
		return history.Message{}, a.Error.Type + ": " + a.Error.Message, nil
	}
	if err != nil || a == nil {
		return history.Message{}, "", err
	}
	m, err := a.Message()
	return m, "", err
}

// answerLen is AnswerLen over d: the k items from n parsed as one
// assistant message, blank text blocks left out for same.
func answerLen(d wire.Dialect, items []json.RawMessage, n, k int, same func(history.Message) bool) int {
	ms, err := d.Parse(items[:n+k], n)
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

// Chat.

func (ChatDialect) Name() string                      { return "chat" }
func (ChatDialect) ItemsKey() string                  { return "messages" }
func (ChatDialect) IsPrefix(raw json.RawMessage) bool { return IsChatPrefix(raw) }
func (ChatDialect) Parse(items []json.RawMessage, from int) ([]history.Message, error) {
	return ParseChat(items, from)
}

// AnswerLen: a Chat answer is one assistant message.
func (d ChatDialect) AnswerLen(items []json.RawMessage, n int, same func(history.Message) bool) int {
	return answerLen(d, items, n, 1, same)
}

func (ChatDialect) NewAnswerReader(maxLine int) wire.AnswerReader {
	return answerReader{NewChatStreamReader(maxLine)}
}
func (ChatDialect) DecodeAnswer(body []byte) (history.Message, string, error) {
	return answerOf(DecodeChat(body))
}

func (ChatDialect) ServerCompaction() bool { return false }
func (ChatDialect) WithServerCompaction([]byte, uint64) ([]byte, string, error) {
	return nil, "", wire.ErrNoServerCompaction
}
func (ChatDialect) IsServerCompactionRefusal(int, []byte) (string, bool) { return "", false }

// Responses.

func (ResponsesDialect) Name() string                      { return "responses" }
func (ResponsesDialect) ItemsKey() string                  { return "input" }
func (ResponsesDialect) IsPrefix(raw json.RawMessage) bool { return IsPrefixItem(raw) }
func (ResponsesDialect) Parse(items []json.RawMessage, from int) ([]history.Message, error) {
	return ParseItems(items, from)
}

// AnswerLen: a Responses answer is the run of assistant-side items from n
// (reasoning, message, calls).
func (d ResponsesDialect) AnswerLen(items []json.RawMessage, n int, same func(history.Message) bool) int {
	k := 0
	for ; n+k < len(items); k++ {
		ms, err := ParseItems(items[n+k:n+k+1], 0)
		if err != nil || len(ms) != 1 || ms[0].Role != history.RoleAssistant {
			break
		}
	}
	if k == 0 {
		return 0
	}
	return answerLen(d, items, n, k, same)
}

func (ResponsesDialect) NewAnswerReader(maxLine int) wire.AnswerReader {
	return answerReader{NewResponsesStreamReader(maxLine)}
}
func (ResponsesDialect) DecodeAnswer(body []byte) (history.Message, string, error) {
	return answerOf(DecodeResponses(body))
}

// Compaction is the type of the Responses API's compaction entry in
// context_management: {"type":"compaction","compact_threshold":N}.
const Compaction = "compaction"

func (ResponsesDialect) ServerCompaction() bool { return true }

// WithServerCompaction adds the compaction entry to the body's
// context_management array (creating it when absent); a client compaction
// entry is kept instead.
func (ResponsesDialect) WithServerCompaction(body []byte, trigger uint64) ([]byte, string, error) {
	entry := fmt.Sprintf(`{"type":%q,"compact_threshold":%d}`, Compaction, trigger)
	start, end, ok := rawjson.MemberRange(body, "context_management")
	if !ok {
		return rawjson.WithMember(body, `"context_management":[`+entry+`]`), "", nil
	}
	var entries []json.RawMessage
	if err := json.Unmarshal(body[start:end], &entries); err != nil {
		return nil, "", fmt.Errorf("context_management: not an array")
	}
	for _, e := range entries {
		if wire.TypeOf(e) == Compaction {
			return body, "", nil
		}
	}
	v, _ := json.Marshal(append(entries, json.RawMessage(entry)))
	return rawjson.Splice(body, start, end, v), "", nil
}

// IsServerCompactionRefusal: a 400 or 422 whose message names the
// context_management parameter or its compact_threshold.
func (d ResponsesDialect) IsServerCompactionRefusal(status int, body []byte) (string, bool) {
	msg, ok := d.ErrorMessage(body)
	if !ok {
		msg = string(body)
	}
	return wire.RefusalNaming(status, msg, "context_management", "compact_20260112", "compact-2026-01-12", "compact_threshold")
}

// WithIncludeUsage asks a Chat upstream for the usage chunk
// (docs/design.md §5.1 post-check): "stream_options":{"include_usage":true}
// inserted as the body's first member; the client's members keep their
// bytes.
func WithIncludeUsage(body []byte) []byte {
	return rawjson.WithMember(body, `"stream_options":{"include_usage":true}`)
}

// UsageFilter hides, from a Chat client that did not ask for usage, the
// usage chunk ctxd asked for (WithIncludeUsage): a data line whose chunk
// has an empty choices array and a usage, and the blank line after it.
// Every other byte passes as it came.
type UsageFilter struct {
	io.ReadCloser
	line    []byte // the current, unterminated line
	out     []byte // filtered bytes not yet read
	dropped bool   // the last line was dropped: drop the blank one after it
	eof     error
}

func (f *UsageFilter) Read(p []byte) (int, error) {
	for len(f.out) == 0 && f.eof == nil {
		buf := make([]byte, 32<<10)
		n, err := f.ReadCloser.Read(buf)
		f.feed(buf[:n])
		if err != nil {
			f.out = append(f.out, f.line...)
			f.line, f.eof = nil, err
		}
	}
	n := copy(p, f.out)
	f.out = f.out[n:]
	if len(f.out) == 0 && f.eof != nil {
		return n, f.eof
	}
	return n, nil
}

func (f *UsageFilter) feed(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			f.line = append(f.line, b...)
			return
		}
		f.line = append(f.line, b[:i+1]...)
		b = b[i+1:]
		line := f.line
		f.line = nil
		if f.dropped && len(bytes.TrimSpace(line)) == 0 {
			f.dropped = false
			continue
		}
		f.dropped = false
		if isUsageOnlyChunk(line) {
			f.dropped = true
			continue
		}
		f.out = append(f.out, line...)
	}
}

// isUsageOnlyChunk: a "data:" line of a chunk with no choices and a usage.
func isUsageOnlyChunk(line []byte) bool {
	data, ok := wiresse.Data(bytes.TrimSpace(line))
	if !ok || !bytes.Contains(data, []byte(`"usage"`)) {
		return false
	}
	var c struct {
		Choices []json.RawMessage `json:"choices"`
		Usage   json.RawMessage   `json:"usage"`
	}
	return json.Unmarshal(bytes.TrimSpace(data), &c) == nil && len(c.Choices) == 0 && len(c.Usage) > 0 && string(c.Usage) != "null"
}
