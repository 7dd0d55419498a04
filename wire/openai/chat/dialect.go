package chat

import (
	"bytes"
	"encoding/json"
	"io"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/rawjson"
	"github.com/ctxd/ctxd/wire"
	"github.com/ctxd/ctxd/wire/openai"
	wiresse "github.com/ctxd/ctxd/wire/sse"
)

// Dialect is Chat Completions (POST /v1/chat/completions) as wire.Dialect.
type Dialect struct{ openai.Common }

var _ wire.Dialect = Dialect{}

func (Dialect) Name() string                      { return "chat" }
func (Dialect) Path() string                      { return "/v1/chat/completions" }
func (Dialect) ItemsKey() string                  { return "messages" }
func (Dialect) IsPrefix(raw json.RawMessage) bool { return IsChatPrefix(raw) }
func (Dialect) Parse(items []json.RawMessage, from int) ([]history.Message, error) {
	return ParseChat(items, from)
}

// AnswerLen: a Chat answer is one assistant message.
func (d Dialect) AnswerLen(items []json.RawMessage, n int, same func(history.Message) bool) int {
	return openai.AnswerLen(d.Parse, items, n, 1, same)
}

func (Dialect) NewAnswerReader(maxLine int) wire.AnswerReader {
	return answerReader{NewChatStreamReader(maxLine)}
}
func (Dialect) DecodeAnswer(body []byte) (history.Message, string, error) {
	return answerOf(DecodeChat(body))
}

func (Dialect) ServerCompaction() bool { return false }
func (Dialect) WithServerCompaction([]byte, uint64) ([]byte, string, error) {
	return nil, "", wire.ErrNoServerCompaction
}
func (Dialect) IsServerCompactionRefusal(int, []byte) (string, bool) { return "", false }

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

// RenderChatAlone is ctxd's rendering of the client's Chat message
// items[k] read on its own (tool names from the items before it): nil
// unless it renders to exactly one message.
func RenderChatAlone(items []json.RawMessage, k int) json.RawMessage {
	ms, err := ParseChat(items, k)
	if err != nil || len(ms) != 1 {
		return nil
	}
	r := RenderChatMessages(ms)
	if len(r) != 1 {
		return nil
	}
	return r[0]
}
