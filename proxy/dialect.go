package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/wire/anthropic"
	"github.com/ctxd/ctxd/wire/openai"
	wiresse "github.com/ctxd/ctxd/wire/sse"
)

// dialect is what differs between the wire APIs the proxy manages
// (docs/design.md §10): the key of the conversation in the body, how its items
// convert to and from canonical messages, how an answer and an error are
// read, and the error shape ctxd answers with. Everything else — the
// listener, identity, matching, recording, pre-send and overflow — is the
// same code for all of them.
type dialect interface {
	// name is the "proxy" label of the sessions ("anthropic", "responses",
	// "chat") and the upstream's key ("anthropic" or "openai").
	name() string
	upstream() string
	// itemsKey is the body's conversation array: "messages" or "input".
	itemsKey() string
	// isPrefix reports whether a leading item belongs to the fixed prefix
	// (kept verbatim ahead of the assembled conversation, never compacted).
	isPrefix(raw json.RawMessage) bool
	// parse converts items[from:] to canonical messages; errors name the
	// item.
	parse(items []json.RawMessage, from int) ([]history.Message, error)
	// matchKey is the tolerant form assistant messages are matched by
	// (nil: none, items match by their normalized bytes).
	matchKey() matchKey
	// answerLen reports how many items from n are the recorded answer s
	// (0: they are not).
	answerLen(s *answerSig, items []json.RawMessage, n int) int
	// render builds the outgoing conversation array; errors wrap
	// errViolation when it breaks docs/design.md §4a.
	render(p *Proxy, b *branch, msgs []history.Message, req *request) ([]byte, error)
	// systemText and tools read the request's prefix for the engine's
	// estimate.
	systemText(req *request) string
	tools(req *request) []history.ToolDef
	// isContextLength classifies an upstream refusal.
	isContextLength(status int, body []byte) bool
	// contextLengthFigures reads such a refusal's count of the request
	// and the window it names, in tokens (0: not given).
	contextLengthFigures(body []byte) (count, limit uint64)
	// reader reads a streamed answer on its way; decode a whole one.
	reader(maxLine int) answerReader
	decode(body []byte) (history.Message, string, error)
	// errorMessage is the provider's message in an error body.
	errorMessage(body []byte) (string, bool)
	// writeError answers with ctxd's own error in the API's shape.
	writeError(w http.ResponseWriter, status int, typ, msg string)
}

// answerReader is fed a streamed answer as it passes (a tee) and rebuilds
// it: the assistant message, an error the stream carried ("" when none),
// and an error when the stream did not complete.
type answerReader interface {
	io.Writer
	answer() (history.Message, string, error)
}

// The dialects.
var (
	dialectAnthropic dialect = anthropicDialect{}
	dialectResponses dialect = openaiDialect{responses: true}
	dialectChat      dialect = openaiDialect{}
)

// anthropicDialect is the Messages API (POST /v1/messages).
type anthropicDialect struct{}

func (anthropicDialect) name() string                  { return "anthropic" }
func (anthropicDialect) upstream() string              { return "anthropic" }
func (anthropicDialect) itemsKey() string              { return "messages" }
func (anthropicDialect) isPrefix(json.RawMessage) bool { return false }

func (anthropicDialect) parse(raw []json.RawMessage, from int) ([]history.Message, error) {
	names := map[string]string{}
	if from > 0 {
		_, _ = anthropic.ParseMessage(raw[from-1], names)
	}
	var out []history.Message
	for i := from; i < len(raw); i++ {
		ms, err := anthropic.ParseMessage(raw[i], names)
		if err != nil {
			return nil, fmt.Errorf("messages[%d].%w", i, err)
		}
		out = append(out, ms...)
	}
	return out, nil
}

// matchKey: an assistant message matches by anthropic.MatchKey, so a
// client that strips thinking, re-flows whitespace, drops or reorders
// fields or edits a tool input in what it resends does not start a branch
// (docs/design.md §10).
func (anthropicDialect) matchKey() matchKey {
	return func(raw []byte) ([]byte, bool) {
		if roleOf(raw) != "assistant" {
			return nil, false
		}
		return anthropic.MatchKey(raw)
	}
}

func (anthropicDialect) answerLen(s *answerSig, items []json.RawMessage, n int) int {
	msgs, err := anthropic.ParseMessage(items[n], nil)
	if err != nil || len(msgs) != 1 || msgs[0].Role != history.RoleAssistant || !s.equal(msgs[0]) {
		return 0
	}
	return 1
}

func (anthropicDialect) render(p *Proxy, b *branch, msgs []history.Message, req *request) ([]byte, error) {
	return p.renderAnthropic(b, msgs, req)
}

func (anthropicDialect) systemText(req *request) string       { return systemText(req.system) }
func (anthropicDialect) tools(req *request) []history.ToolDef { return toolDefs(req.tools) }
func (anthropicDialect) isContextLength(status int, body []byte) bool {
	return anthropic.IsContextLength(status, body)
}
func (anthropicDialect) contextLengthFigures(body []byte) (uint64, uint64) {
	return anthropic.ContextLengthFigures(body)
}

func (anthropicDialect) reader(maxLine int) answerReader {
	return &anthropicReader{anthropic.NewStreamReaderMax(maxLine)}
}

type anthropicReader struct{ *anthropic.StreamReader }

func (r *anthropicReader) answer() (history.Message, string, error) {
	resp, err := r.Response()
	return anthropicAnswer(resp, err)
}

func anthropicAnswer(resp *anthropic.Response, err error) (history.Message, string, error) {
	if resp != nil && resp.Error != nil {
		return history.Message{}, resp.Error.Type + ": " + resp.Error.Message, nil
	}
	if err != nil || resp == nil {
		return history.Message{}, "", err
	}
	return resp.Message(), "", nil
}

func (anthropicDialect) decode(body []byte) (history.Message, string, error) {
	return anthropicAnswer(anthropic.DecodeResponse(body))
}

func (anthropicDialect) errorMessage(body []byte) (string, bool) {
	e, ok := anthropic.ErrorBody(body)
	return e.Type + ": " + e.Message, ok
}

func (anthropicDialect) writeError(w http.ResponseWriter, status int, typ, msg string) {
	writeError(w, status, typ, msg)
}

// openaiDialect is the Responses API (POST /v1/responses) or Chat
// Completions (POST /v1/chat/completions).
type openaiDialect struct{ responses bool }

func (d openaiDialect) name() string {
	if d.responses {
		return "responses"
	}
	return "chat"
}
func (openaiDialect) upstream() string { return "openai" }
func (d openaiDialect) itemsKey() string {
	if d.responses {
		return "input"
	}
	return "messages"
}

func (d openaiDialect) isPrefix(raw json.RawMessage) bool {
	if d.responses {
		return openai.IsPrefixItem(raw)
	}
	return openai.IsChatPrefix(raw)
}

func (d openaiDialect) parse(items []json.RawMessage, from int) ([]history.Message, error) {
	if d.responses {
		return openai.ParseItems(items, from)
	}
	return openai.ParseChat(items, from)
}

// answerLen: a Responses answer is the run of assistant-side items from n
// (reasoning, message, calls); a Chat answer one assistant message.
func (openaiDialect) matchKey() matchKey { return nil }

func (d openaiDialect) answerLen(s *answerSig, items []json.RawMessage, n int) int {
	k := 1
	if d.responses {
		for k = 0; n+k < len(items); k++ {
			ms, err := openai.ParseItems(items[n+k:n+k+1], 0)
			if err != nil || len(ms) != 1 || ms[0].Role != history.RoleAssistant {
				break
			}
		}
		if k == 0 {
			return 0
		}
	}
	ms, err := d.parse(items[:n+k], n)
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
	if !s.equal(history.Message{Content: kept}) {
		return 0
	}
	return k
}

// render is the prefix items as the client sent them, then the assembled
// messages rendered, each item that ctxd has not rewritten as the client's
// own bytes (withClientItems).
func (d openaiDialect) render(p *Proxy, b *branch, msgs []history.Message, req *request) ([]byte, error) {
	var rendered []json.RawMessage
	var custom map[string]bool
	if d.responses {
		tools := append([]json.RawMessage{req.tools}, req.messages[:req.prefix]...)
		custom = openai.CustomToolNames(tools...)
		rendered = openai.RenderItems(msgs, custom)
	} else {
		rendered = openai.RenderChatMessages(msgs)
	}
	rendered = d.withClientItems(p, b, req, rendered, custom)
	items := make([]json.RawMessage, 0, req.prefix+len(rendered))
	items = append(items, req.messages[:req.prefix]...)
	items = append(items, rendered...)
	return openai.JoinItems(items), nil
}

// systemText is the instructions and the prefix items' text.
func (d openaiDialect) systemText(req *request) string {
	var parts []string
	if len(req.system) > 0 {
		var s string
		if json.Unmarshal(req.system, &s) == nil && s != "" {
			parts = append(parts, s)
		}
	}
	for _, raw := range req.messages[:req.prefix] {
		parts = append(parts, string(raw))
	}
	return strings.Join(parts, "\n\n")
}

// tools reads function tools in either API's shape (Responses: name at the
// top; Chat: under "function").
func (openaiDialect) tools(req *request) []history.ToolDef {
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
	if len(req.tools) == 0 || json.Unmarshal(req.tools, &in) != nil {
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

func (openaiDialect) isContextLength(status int, body []byte) bool {
	return openai.IsContextLength(status, body)
}
func (openaiDialect) contextLengthFigures(body []byte) (uint64, uint64) {
	return openai.ContextLengthFigures(body)
}

func (d openaiDialect) reader(maxLine int) answerReader {
	if d.responses {
		return &openaiReader{openai.NewResponsesStreamReader(maxLine)}
	}
	return &openaiReader{openai.NewChatStreamReader(maxLine)}
}

type openaiReader struct{ *openai.StreamReader }

func (r *openaiReader) answer() (history.Message, string, error) {
	return openaiAnswer(r.Answer())
}

func openaiAnswer(a *openai.Answer, err error) (history.Message, string, error) {
	if a != nil && a.Error != nil {
		return history.Message{}, a.Error.Type + ": " + a.Error.Message, nil
	}
	if err != nil || a == nil {
		return history.Message{}, "", err
	}
	m, err := a.Message()
	return m, "", err
}

func (d openaiDialect) decode(body []byte) (history.Message, string, error) {
	if d.responses {
		return openaiAnswer(openai.DecodeResponses(body))
	}
	return openaiAnswer(openai.DecodeChat(body))
}

func (openaiDialect) errorMessage(body []byte) (string, bool) {
	e, ok := openai.ErrorBody(body)
	return e.Type + ": " + e.Message, ok
}

// writeError answers in OpenAI's error shape, so an agent shows it as it
// would the provider's.
func (openaiDialect) writeError(w http.ResponseWriter, status int, typ, msg string) {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// dialectOf returns the dialect of a managed endpoint, nil for any other
// request.
func dialectOf(r *http.Request) dialect {
	if r.Method != http.MethodPost {
		return nil
	}
	switch strings.TrimSuffix(r.URL.Path, "/") {
	case "/v1/messages":
		return dialectAnthropic
	case "/v1/responses":
		return dialectResponses
	case "/v1/chat/completions":
		return dialectChat
	}
	return nil
}

// upstreamOf chooses the upstream of a request the proxy does not manage
// (count_tokens, /v1/models, HEAD /): OpenAI's for the OpenAI paths and for
// a request with a bearer token and no Anthropic header; Anthropic's
// otherwise.
// anthropicToken reports whether an Authorization value carries an
// Anthropic key or OAuth token ("Bearer sk-ant-…").
func anthropicToken(auth string) bool {
	_, tok, _ := strings.Cut(strings.TrimSpace(auth), " ")
	return strings.HasPrefix(strings.TrimSpace(tok), "sk-ant-")
}

func upstreamOf(r *http.Request) string {
	p := r.URL.Path
	switch {
	case strings.HasPrefix(p, "/v1/messages"), r.Header.Get("Anthropic-Version") != "", r.Header.Get("Anthropic-Beta") != "",
		r.Header.Get("X-Api-Key") != "", strings.HasPrefix(p, "/api/"), anthropicToken(r.Header.Get("Authorization")):
		// An Anthropic credential (an OAuth token "sk-ant-oat…" in
		// Authorization, with or without anthropic-version) never goes to
		// the OpenAI upstream.
		return "anthropic"
	case strings.HasPrefix(p, "/v1/responses"), strings.HasPrefix(p, "/v1/chat/"), strings.HasPrefix(p, "/v1/completions"), strings.HasPrefix(p, "/v1/embeddings"),
		strings.HasPrefix(strings.ToLower(r.Header.Get("Authorization")), "bearer "):
		return "openai"
	}
	return "anthropic"
}

// chatUsageFilter hides, from a Chat client that did not ask for usage,
// the usage chunk ctxd asked for (stream_options.include_usage): a data
// line whose chunk has an empty choices array and a usage, and the blank
// line after it. Every other byte passes as it came.
type chatUsageFilter struct {
	io.ReadCloser
	line    []byte // the current, unterminated line
	out     []byte // filtered bytes not yet read
	dropped bool   // the last line was dropped: drop the blank one after it
	eof     error
}

func (f *chatUsageFilter) Read(p []byte) (int, error) {
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

func (f *chatUsageFilter) feed(b []byte) {
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

// prefixDigest is the digest of what the engine is given as the system
// prompt: the system or instructions bytes and the prefix items.
func prefixDigest(req *request) digest {
	h := sha256.New()
	h.Write(req.system)
	for _, raw := range req.messages[:req.prefix] {
		h.Write([]byte{0})
		h.Write(raw)
	}
	var d digest
	h.Sum(d[:0])
	return d
}

// withIncludeUsage asks a Chat upstream for the usage chunk (docs/design.md §5.1
// post-check): "stream_options":{"include_usage":true} inserted as the
// body's first member; the client's members keep their bytes.
func withIncludeUsage(body []byte) []byte {
	i := bytes.IndexByte(body, '{')
	if i < 0 {
		return body
	}
	member := `"stream_options":{"include_usage":true}`
	rest := bytes.TrimSpace(body[i+1:])
	sep := ","
	if len(rest) > 0 && rest[0] == '}' {
		sep = ""
	}
	out := make([]byte, 0, len(body)+len(member)+1)
	out = append(out, body[:i+1]...)
	out = append(out, member...)
	out = append(out, sep...)
	return append(out, body[i+1:]...)
}
