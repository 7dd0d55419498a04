// Package fakeprovider is a strict fake of the Anthropic Messages API (and of
// OpenAI's Responses and Chat Completions APIs) for tests that run real
// agents (Claude Code, pi, Codex) or ctxd's proxy against a provider: an
// httptest server on loopback that streams SSE exactly as the real APIs do,
// scripts a small coding task from the tools each request declares, enforces
// a configurable context window with the real 400 body, refuses (400, the
// real texts) every request that breaks docs/design.md §4a, simulates the prompt
// cache, injects faults on demand, and records every request for assertions.
// docs/testing.md describes it.
//
// The fake is deliberately independent of ctxd's own packages: it is the
// oracle the proxy is tested against, so it shares no code with it (its tests
// read ctxd's prompts only to check it recognizes them).
package fakeprovider

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"
)

// Config sets the fake provider's knobs. The zero value of each field is
// replaced by the default named on it.
type Config struct {
	// WindowTokens is the context window, in the fake's tokens (see
	// CountTokens): a request over it gets the real 400 "prompt is too long:
	// N tokens > M maximum". Default 200000.
	WindowTokens int
	// Headroom, when > 0, replaces WindowTokens: the window becomes the token
	// count of the first task request (one declaring a shell tool) plus
	// Headroom, so one scenario fits agents whose system prompt and tools
	// differ in size. Window reports the value in force.
	Headroom int
	// CheckMaxTokens also refuses a request whose tokens plus its max_tokens
	// exceed the window, with the real "input length and `max_tokens` exceed
	// context limit" 400.
	CheckMaxTokens bool
	// Rounds is the number of shell commands the task runs per turn before it
	// writes its file. Default 1.
	Rounds int
	// OutputBytes is about how many bytes each shell command prints. Default
	// 2000.
	OutputBytes int
	// Marker is the string the final answer contains. Default
	// "CTXD-FAKE-TASK-DONE".
	Marker string
	// WriteFile is the file the task writes; a relative name is joined to the
	// working directory the agent's system prompt states. Default
	// "ctxd-fake-output.txt".
	WriteFile string
	// WriteContent is what the task writes. Default "written by the fake
	// provider\n".
	WriteContent string
	// NoThinking stops the fake from answering with thinking blocks even when
	// the request enables thinking (by default it emits a signed thinking
	// block first in every answer to such a request).
	NoThinking bool
	// SideAnswer is the text answer to a side request (one that declares no
	// shell tool). Default "Fake provider task".
	SideAnswer string
	// APIKey, when set, is the only credential accepted (x-api-key or
	// Authorization: Bearer); others get the real 401.
	APIKey string
	// ChunkBytes is the size of each streamed delta. Default 40.
	ChunkBytes int
	// ServerCompaction makes the fake accept Anthropic's server-side
	// compaction (compaction.go): the context_management edit
	// compact_20260112 with the anthropic-beta compact-2026-01-12. Without
	// it, a request carrying the beta gets the API's 400 for an unknown
	// beta value.
	ServerCompaction bool
	// CompactionSummary is the content of the compaction block the fake
	// answers with once a request passes the edit's trigger (tests give the
	// recorded one). Default "Summary of the conversation so far (the fake
	// provider's server-side compaction).".
	CompactionSummary string
	// RecallTool, when set, is a tool the task calls once, after its file
	// is written and before its final answer, when a request declares a
	// tool of that name (an MCP tool such as Claude Code's
	// mcp__ctxd__search), with RecallInput; the final answer then quotes
	// the first line of the tool's result holding RecallExpect (or its
	// first line), after "recalled: ".
	RecallTool   string
	RecallInput  map[string]any
	RecallExpect string
}

func (c *Config) defaults() {
	if c.WindowTokens <= 0 {
		c.WindowTokens = 200000
	}
	if c.Rounds <= 0 {
		c.Rounds = 1
	}
	if c.OutputBytes <= 0 {
		c.OutputBytes = 2000
	}
	if c.Marker == "" {
		c.Marker = "CTXD-FAKE-TASK-DONE"
	}
	if c.WriteFile == "" {
		c.WriteFile = "ctxd-fake-output.txt"
	}
	if c.WriteContent == "" {
		c.WriteContent = "written by the fake provider\n"
	}
	if c.SideAnswer == "" {
		c.SideAnswer = "Fake provider task"
	}
	if c.ChunkBytes <= 0 {
		c.ChunkBytes = 40
	}
	if c.CompactionSummary == "" {
		c.CompactionSummary = "Summary of the conversation so far (the fake provider's server-side compaction)."
	}
}

// Request is one recorded request and the fake's answer to it.
type Request struct {
	// Seq numbers the requests from 1 in arrival order.
	Seq    int
	Time   time.Time
	Method string
	// Path and RawQuery of the URL ("/v1/messages", "beta=true").
	Path, RawQuery string
	Header         http.Header
	// Body is the raw request body, byte for byte.
	Body []byte
	// Parsed is the decoded Messages request (nil for other paths, or a body
	// that is not JSON). An OpenAI request is converted to this shape: tool
	// calls as tool_use blocks, their outputs as tool_result blocks,
	// instructions and system/developer messages as the system prompt.
	Parsed *MessagesRequest
	// Tokens is the request's size by CountTokens (0 when not a Messages
	// request).
	Tokens int
	// CacheRead is the part of Tokens read from the fake's prompt cache (an
	// Anthropic request whose prefix up to a cache_control breakpoint an
	// earlier request stored): a proxy that keeps the prefix stable keeps
	// this high.
	CacheRead int
	// Status is the HTTP status answered; Error the refusal's message (""
	// on success).
	Status int
	Error  string
	// Step is what the fake answered a Messages request with (StepShell,
	// StepWrite, StepFinal, StepSide, StepSummary, StepFault; "" when
	// refused).
	Step string
	// Compacted: the answer began with a server-side compaction block
	// (compaction.go).
	Compacted bool
}

// Refused reports whether the fake answered with an error status.
func (r Request) Refused() bool { return r.Status >= 400 }

// Provider is a running fake Anthropic Messages API. It is safe for
// concurrent use.
type Provider struct {
	cfg Config
	srv *httptest.Server

	mu     sync.Mutex
	reqs   []Request
	issued map[string]string // tool_use id → step
	window int               // the context window in force, in tokens
	faults []Fault           // queued by FailNext
	cache  map[[32]byte]bool // prompt-cache prefixes stored at breakpoints
}

// New starts a fake provider on a loopback port with cfg (defaults filled
// in). Close it when done (Start does it with t.Cleanup).
func New(cfg Config) *Provider {
	cfg.defaults()
	p := &Provider{cfg: cfg, issued: map[string]string{}, window: cfg.WindowTokens}
	if cfg.Headroom > 0 {
		p.window = 0 // set by the first task request
	}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	return p
}

// Start is New with p.Close registered on tb's cleanup.
func Start(tb interface{ Cleanup(func()) }, cfg Config) *Provider {
	p := New(cfg)
	tb.Cleanup(p.Close)
	return p
}

// URL is the base URL agents take (ANTHROPIC_BASE_URL, pi's baseUrl):
// "http://127.0.0.1:PORT", no trailing slash.
func (p *Provider) URL() string { return p.srv.URL }

// Config returns the configuration in force (defaults filled in).
func (p *Provider) Config() Config { return p.cfg }

// Close stops the server, waiting for requests in flight.
func (p *Provider) Close() { p.srv.Close() }

// SetWindow changes the context window for the requests that follow (for
// tests that measure an agent's base prompt first).
func (p *Provider) SetWindow(tokens int) {
	p.mu.Lock()
	p.window = tokens
	p.mu.Unlock()
}

// Window returns the context window in force, in tokens (0 while Headroom
// waits for the first task request).
func (p *Provider) Window() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.window
}

// Requests returns a copy of every request received so far, in order.
func (p *Provider) Requests() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Request(nil), p.reqs...)
}

// Messages returns the recorded model requests that were parsed (POST
// /v1/messages, /v1/responses, /v1/chat/completions; not count_tokens); with
// main set, only those that declared a shell tool (the agent's task
// conversation, not its side requests).
func (p *Provider) Messages(main bool) []Request {
	var out []Request
	for _, r := range p.Requests() {
		if r.Parsed == nil || r.Path == "/v1/messages/count_tokens" {
			continue
		}
		if main && findTools(r.Parsed.Tools).shell == "" {
			continue
		}
		out = append(out, r)
	}
	return out
}

// Refused returns the requests answered with an error status.
func (p *Provider) Refused() []Request {
	var out []Request
	for _, r := range p.Requests() {
		if r.Refused() {
			out = append(out, r)
		}
	}
	return out
}

func (p *Provider) issuedStep(id string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.issued[id]
}

// CountTokens is the fake's deterministic token count of a Messages request
// body: the bytes of its system, tools and messages fields, divided by 4 and
// rounded up. Cheap and stable; not any real tokenizer.
func CountTokens(body []byte) int {
	var f map[string]json.RawMessage
	if json.Unmarshal(body, &f) != nil {
		return (len(body) + 3) / 4
	}
	return (len(f["system"]) + len(f["tools"]) + len(f["messages"]) + 3) / 4
}

func newRequestID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "req_011CFake" + hex.EncodeToString(b)
}

func (p *Provider) record(r Request) {
	p.mu.Lock()
	r.Seq = len(p.reqs) + 1
	p.reqs = append(p.reqs, r)
	p.mu.Unlock()
}

// writeError answers e in the real API's shape (JSON body, request-id header,
// x-should-retry false for 4xx as the API sends).
func writeError(w http.ResponseWriter, e *APIError) {
	id := newRequestID()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("request-id", id)
	if e.Status < 500 {
		w.Header().Set("x-should-retry", "false")
	}
	w.WriteHeader(e.Status)
	_, _ = w.Write(e.Body(id))
}

func (p *Provider) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	rec := Request{
		Time: time.Now(), Method: req.Method, Path: req.URL.Path, RawQuery: req.URL.RawQuery,
		Header: req.Header.Clone(), Body: body,
	}
	if req.Method == http.MethodPost && (req.URL.Path == "/v1/responses" || req.URL.Path == "/v1/chat/completions") {
		p.serveOpenAI(w, req, rec)
		return
	}
	isMessages := req.Method == http.MethodPost && req.URL.Path == "/v1/messages"
	isCount := req.Method == http.MethodPost && req.URL.Path == "/v1/messages/count_tokens"
	if !isMessages && !isCount {
		// The real API answers HEAD / and unknown paths with a 404.
		e := &APIError{Status: 404, Type: "not_found_error", Message: msgNotFound}
		rec.Status, rec.Error = e.Status, e.Message
		p.record(rec)
		writeError(w, e)
		return
	}
	if e := p.checkHeaders(req); e != nil {
		rec.Status, rec.Error = e.Status, e.Message
		p.record(rec)
		writeError(w, e)
		return
	}
	var r MessagesRequest
	if err := json.Unmarshal(body, &r); err != nil {
		e := invalidRequest(msgMalformedJSON)
		rec.Status, rec.Error = e.Status, e.Message
		p.record(rec)
		writeError(w, e)
		return
	}
	rec.Parsed = &r
	if e := p.admitCompaction(req.Header, body); isMessages && e != nil {
		rec.Status, rec.Error = e.Status, e.Message
		p.record(rec)
		writeError(w, e)
		return
	}
	rec.Tokens = billedTokens(body, &r)
	if isCount {
		rec.Status = 200
		p.record(rec)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"input_tokens":%d}`, rec.Tokens)
		return
	}
	if e := p.admit(&r, rec.Tokens); e != nil {
		rec.Status, rec.Error = e.Status, e.Message
		p.record(rec)
		writeError(w, e)
		return
	}
	if f, ok := p.nextFault(); ok {
		rec.Status, rec.Step = f.Status, StepFault
		if f.MidStream && r.Stream {
			rec.Status = 200
		}
		rec.Error = anthropicFault(f.Status).Message
		p.record(rec)
		writeAnthropicFault(w, f, r.Stream, r.Model)
		return
	}
	pl := p.decide(&r)
	msg := p.answer(&r, body, pl, rec.Tokens)
	read, created := p.cacheUsage(body, rec.Tokens)
	msg.Usage.CacheReadInputTokens, msg.Usage.CacheCreationInputTokens = read, created
	msg.Usage.InputTokens = max(rec.Tokens-read-created, 0)
	if trigger, ok := compactEdit(body); ok && rec.Tokens > trigger {
		// Server-side compaction: the summary first, and the answer's
		// input is the compacted context.
		sum := p.cfg.CompactionSummary
		msg.Content = append([]block{{Type: "compaction", Text: sum}}, msg.Content...)
		msg.Usage = usage{InputTokens: (len(sum) + 3) / 4, OutputTokens: msg.Usage.OutputTokens}
		rec.Compacted = true
	}
	rec.Status, rec.Step, rec.CacheRead = 200, pl.step, read
	p.record(rec)
	if r.Stream {
		p.stream(w, msg)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("request-id", newRequestID())
	b, _ := json.Marshal(msg)
	_, _ = w.Write(b)
}

func (p *Provider) checkHeaders(req *http.Request) *APIError {
	key := req.Header.Get("x-api-key")
	if key == "" {
		key = strings.TrimPrefix(req.Header.Get("Authorization"), "Bearer ")
	}
	if key == "" {
		return &APIError{Status: 401, Type: "authentication_error", Message: msgAPIKeyRequired}
	}
	if p.cfg.APIKey != "" && key != p.cfg.APIKey {
		return &APIError{Status: 401, Type: "authentication_error", Message: msgAPIKeyInvalid}
	}
	if req.Header.Get("anthropic-version") == "" {
		return invalidRequest(msgVersionRequired)
	}
	return nil
}

// admit applies the shape rules (Validate) and then the context window.
func (p *Provider) admit(r *MessagesRequest, tokens int) *APIError {
	if e := Validate(r); e != nil {
		return e
	}
	p.mu.Lock()
	if p.window == 0 && findTools(r.Tools).shell != "" {
		p.window = tokens + p.cfg.Headroom
	}
	window := p.window
	p.mu.Unlock()
	if window == 0 { // Headroom set and no task request seen yet
		window = p.cfg.WindowTokens
	}
	if tokens > window {
		return invalidRequest(msgPromptTooLong, tokens, window)
	}
	if p.cfg.CheckMaxTokens && tokens+r.MaxTokens > window {
		return invalidRequest(msgInputPlusMaxTokens, tokens, r.MaxTokens, window)
	}
	return nil
}

// message is a complete assistant answer (the non-streaming body, and what
// the stream spells out event by event).
type message struct {
	ID           string  `json:"id"`
	Type         string  `json:"type"`
	Role         string  `json:"role"`
	Model        string  `json:"model"`
	Content      []block `json:"content"`
	StopReason   string  `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
	Usage        usage   `json:"usage"`
}

// block is an answer content block; fields are written as the API writes
// them for each type (see MarshalJSON).
type block struct {
	Type      string
	Text      string
	Thinking  string
	Signature string
	ID, Name  string
	Input     json.RawMessage
}

// MarshalJSON writes only the fields of the block's type.
func (b block) MarshalJSON() ([]byte, error) {
	switch b.Type {
	case "thinking":
		return json.Marshal(map[string]any{"type": "thinking", "thinking": b.Thinking, "signature": b.Signature})
	case "tool_use":
		return json.Marshal(map[string]any{"type": "tool_use", "id": b.ID, "name": b.Name, "input": b.Input})
	case "compaction":
		return json.Marshal(map[string]any{"type": "compaction", "content": b.Text})
	default:
		return json.Marshal(map[string]any{"type": "text", "text": b.Text})
	}
}

type usage struct {
	InputTokens              int `json:"input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	OutputTokens             int `json:"output_tokens"`
}

// answer builds the assistant message for a plan.
func (p *Provider) answer(r *MessagesRequest, body []byte, pl plan, tokens int) message {
	msg := message{
		ID: "msg_01Fake" + newRequestID()[12:30], Type: "message", Role: "assistant",
		Model: r.Model, StopReason: "end_turn",
	}
	if r.Enabled() && !p.cfg.NoThinking && pl.step != StepSide {
		th := fmt.Sprintf("The scripted task is at step %q (round %d). I follow the script.", pl.step, pl.round)
		msg.Content = append(msg.Content, block{Type: "thinking", Thinking: th, Signature: Sign(th)})
	}
	switch pl.step {
	case StepShell, StepWrite, StepRecall:
		in, _ := json.Marshal(pl.input)
		msgsRaw := struct {
			M json.RawMessage `json:"messages"`
		}{}
		_ = json.Unmarshal(body, &msgsRaw)
		id := toolID(normalizeMarkers(msgsRaw.M), pl.step, pl.round)
		p.mu.Lock()
		p.issued[id] = pl.step
		p.mu.Unlock()
		msg.Content = append(msg.Content,
			block{Type: "text", Text: fmt.Sprintf("Running step %s.", pl.step)},
			block{Type: "tool_use", ID: id, Name: pl.tool, Input: in})
		msg.StopReason = "tool_use"
	default:
		msg.Content = append(msg.Content, block{Type: "text", Text: pl.text})
	}
	out, _ := json.Marshal(msg.Content)
	msg.Usage = usage{InputTokens: tokens, OutputTokens: (len(out) + 3) / 4}
	return msg
}

// stream writes msg as the real API's SSE: message_start, per block
// content_block_start / deltas / content_block_stop (a ping after the first
// start), message_delta with the stop reason and usage, message_stop; each
// event flushed.
func (p *Provider) stream(w http.ResponseWriter, msg message) {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("request-id", newRequestID())
	w.WriteHeader(200)
	fl, _ := w.(http.Flusher)
	send := func(event string, data any) {
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
		if fl != nil {
			fl.Flush()
		}
	}
	start := msg
	start.Content = []block{}
	start.StopReason = ""
	startUsage := msg.Usage
	startUsage.OutputTokens = 1
	send("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": start.ID, "type": "message", "role": "assistant", "model": start.Model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": startUsage,
	}})
	for i, b := range msg.Content {
		var cb any
		switch b.Type {
		case "thinking":
			cb = map[string]any{"type": "thinking", "thinking": "", "signature": ""}
		case "tool_use":
			cb = map[string]any{"type": "tool_use", "id": b.ID, "name": b.Name, "input": map[string]any{}}
		case "compaction":
			cb = map[string]any{"type": "compaction", "content": nil}
		default:
			cb = map[string]any{"type": "text", "text": ""}
		}
		send("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": cb})
		if i == 0 {
			send("ping", map[string]any{"type": "ping"})
		}
		delta := func(d map[string]any) {
			send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": d})
		}
		switch b.Type {
		case "thinking":
			for _, c := range chunks(b.Thinking, p.cfg.ChunkBytes) {
				delta(map[string]any{"type": "thinking_delta", "thinking": c})
			}
			delta(map[string]any{"type": "signature_delta", "signature": b.Signature})
		case "compaction":
			// The summary arrives whole, in one delta.
			delta(map[string]any{"type": "compaction_delta", "content": b.Text})
		case "tool_use":
			delta(map[string]any{"type": "input_json_delta", "partial_json": ""})
			for _, c := range chunks(string(b.Input), p.cfg.ChunkBytes) {
				delta(map[string]any{"type": "input_json_delta", "partial_json": c})
			}
		default:
			for _, c := range chunks(b.Text, p.cfg.ChunkBytes) {
				delta(map[string]any{"type": "text_delta", "text": c})
			}
		}
		send("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	send("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": msg.StopReason, "stop_sequence": nil},
		"usage": msg.Usage})
	send("message_stop", map[string]any{"type": "message_stop"})
}

// chunks cuts s into pieces of at most n bytes, never inside a UTF-8
// sequence.
func chunks(s string, n int) []string {
	var out []string
	for len(s) > n {
		cut := n
		for cut > 0 && !utf8Start(s[cut]) {
			cut--
		}
		if cut == 0 {
			cut = n
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

func utf8Start(c byte) bool { return c&0xC0 != 0x80 }

// normalizeMarkers returns the canonical JSON of v (object keys sorted) with
// every "cache_control" field removed: two requests that differ only in
// where the agent put its moving cache marker normalize alike.
func normalizeMarkers(raw json.RawMessage) []byte {
	if len(raw) == 0 {
		return nil
	}
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if d.Decode(&v) != nil {
		return raw
	}
	b, _ := json.Marshal(stripMarkers(v))
	return b
}

func stripMarkers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		delete(x, "cache_control")
		for k, e := range x {
			x[k] = stripMarkers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = stripMarkers(e)
		}
	}
	return v
}
