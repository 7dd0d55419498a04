package wirereplay

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/summarizer"
	"github.com/ctxd/ctxd/wire/anthropic"
)

// Prices are the cost of a token relative to an uncached input token:
// Anthropic's prompt-cache prices (docs/design.md §4), and output at five
// times input (the Claude models' list price), counted only for the
// summaries ctxd asks for (the agent's own answers are the same bytes
// either way).
const (
	PriceInput      = 1.0
	PriceCacheRead  = 0.1
	PriceCacheWrite = 1.25
	PriceOutput     = 5.0
)

// Usage is what the fake upstream billed: tokens by kind and requests.
type Usage struct {
	Requests                     int
	Input, CacheRead, CacheWrite uint64
	// Output counts only summarizer answers.
	Output uint64
	// Summaries is the number of summarizer requests.
	Summaries int
	// MaxPrompt is the largest agent request, in tokens.
	MaxPrompt uint64
}

// Cost is u priced: 1 × input + 0.1 × cache read + 1.25 × cache write + 5 ×
// summary output, in input-token units.
func (u Usage) Cost() float64 {
	return PriceInput*float64(u.Input) + PriceCacheRead*float64(u.CacheRead) + PriceCacheWrite*float64(u.CacheWrite) + PriceOutput*float64(u.Output)
}

// Upstream is a fake Anthropic Messages endpoint for the replay. It answers
// an agent's request with the answer the test queued (Next), a summarizer
// request (one whose last message holds summarizer.BuiltinPrompt) with a
// summary built from the request's text (the prompt left out, so a later
// request holding the summary is no summarizer request), and models the prompt cache: a request's cached
// part is the longest prefix — tools, system, then messages, compared as
// whole elements with cache markers left out — that an earlier request
// had; what follows up to its last cache marker is written to the cache;
// the rest is uncached input. A token is 4 bytes of those elements' JSON
// (the fakeprovider's count). It reports usage as Anthropic does
// (input_tokens, cache_read_input_tokens, cache_creation_input_tokens).
type Upstream struct {
	srv *httptest.Server

	mu     sync.Mutex
	seen   map[[32]byte]bool // chain digests of every prefix sent
	elems  map[[32]byte]element
	next   []queued
	usage  Usage
	bodies [][]byte // the agent requests received (not summaries)
	errs   []string
}

// StartUpstream starts an Upstream on loopback, closed when tb ends.
func StartUpstream(tb testing.TB) *Upstream {
	u := &Upstream{seen: map[[32]byte]bool{}, elems: map[[32]byte]element{}}
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	tb.Cleanup(u.srv.Close)
	return u
}

// URL is the upstream's base URL.
func (u *Upstream) URL() string { return u.srv.URL }

// queued is an answer to come: a message (Messages API) or output items
// (Responses API).
type queued struct {
	msg   history.Message
	items json.RawMessage
}

// Next queues the answer to the next agent request.
func (u *Upstream) Next(m history.Message) {
	u.mu.Lock()
	u.next = append(u.next, queued{msg: m})
	u.mu.Unlock()
}

// NextTurn queues t's answer: its output items when it has them, else its
// message.
func (u *Upstream) NextTurn(t Turn) {
	u.mu.Lock()
	u.next = append(u.next, queued{msg: t.Answer, items: t.Items})
	u.mu.Unlock()
}

// Usage returns what was billed so far.
func (u *Upstream) Usage() Usage {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.usage
}

// Bodies returns the agent requests received, in order.
func (u *Upstream) Bodies() [][]byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([][]byte(nil), u.bodies...)
}

// Errors returns what the upstream could not serve (a request with no
// answer queued, a body that is not a Messages request).
func (u *Upstream) Errors() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.errs...)
}

var summaryKey = []byte(strings.SplitN(summarizer.BuiltinPrompt, ".", 2)[0])

func (u *Upstream) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if r.URL.Path == "/v1/responses" {
		u.serveResponses(w, body)
		return
	}
	if r.URL.Path != "/v1/messages" {
		http.Error(w, "not served by the replay upstream", http.StatusNotFound)
		return
	}
	var f map[string]json.RawMessage
	if json.Unmarshal(body, &f) != nil {
		u.fail(w, "not a Messages request")
		return
	}
	msgs, ok := splitArray(f["messages"])
	if !ok {
		u.fail(w, "messages is not an array")
		return
	}
	summary := len(msgs) > 0 && bytes.Contains(msgs[len(msgs)-1], summaryKey)
	elems := append([]json.RawMessage{f["tools"], f["system"]}, msgs...)
	read, write, input := u.bill(elems)

	u.mu.Lock()
	var answer history.Message
	if summary {
		answer = summaryOf(msgs)
		u.usage.Summaries++
	} else {
		if len(u.next) == 0 {
			u.mu.Unlock()
			u.fail(w, "no answer queued for an agent request")
			return
		}
		answer, u.next = u.next[0].msg, u.next[1:]
		u.bodies = append(u.bodies, body)
		u.usage.MaxPrompt = max(u.usage.MaxPrompt, read+write+input)
	}
	out := uint64(0)
	if summary {
		out = uint64(len(answer.Content[0].Text)+3) / 4
		u.usage.Output += out
	}
	u.usage.Requests++
	u.usage.Input += input
	u.usage.CacheRead += read
	u.usage.CacheWrite += write
	u.mu.Unlock()

	content, _ := json.Marshal(anthropic.Render("", nil, []history.Message{answer}).Messages[0].Content)
	stop := "end_turn"
	for _, b := range answer.Content {
		if b.Type == history.BlockToolCall {
			stop = "tool_use"
		}
	}
	var model struct {
		Model string `json:"model"`
	}
	_ = json.Unmarshal(body, &model)
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"msg_replay","type":"message","role":"assistant","model":%q,"content":%s,"stop_reason":%q,"usage":{"input_tokens":%d,"cache_creation_input_tokens":%d,"cache_read_input_tokens":%d,"output_tokens":%d}}`,
		model.Model, content, stop, input, write, read, max(out, 50))
}

func (u *Upstream) fail(w http.ResponseWriter, msg string) {
	u.mu.Lock()
	u.errs = append(u.errs, msg)
	u.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	fmt.Fprintf(w, `{"type":"error","error":{"type":"invalid_request_error","message":%q}}`, msg)
}

// markerRE matches a cache marker field in an element's JSON.
var (
	markerRE  = regexp.MustCompile(`,?"cache_control":\{[^{}]*\}`)
	markerKey = []byte(`"cache_control"`)
)

// element is what bill keeps of an element's bytes: the digest and size
// of its JSON without cache markers, and whether it had one.
type element struct {
	digest [32]byte
	tokens uint64
	marked bool
}

// splitArray cuts a JSON array into its elements' bytes without decoding
// them (the body is valid JSON: json.Unmarshal read it).
func splitArray(raw json.RawMessage) ([]json.RawMessage, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) < 2 || raw[0] != '[' {
		return nil, false
	}
	var out []json.RawMessage
	depth, start, inStr, esc := 0, -1, false, false
	for i := 1; i < len(raw)-1; i++ {
		c := raw[i]
		switch {
		case inStr:
			if esc {
				esc = false
			} else if c == '\\' {
				esc = true
			} else if c == '"' {
				inStr = false
			}
			continue
		case c == '"':
			inStr = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
		case c == ',' && depth == 0:
			out = append(out, bytes.TrimSpace(raw[start:i]))
			start = -1
			continue
		case c == ' ' || c == '\n' || c == '\t' || c == '\r':
			continue
		}
		if start < 0 {
			start = i
		}
	}
	if start >= 0 {
		out = append(out, bytes.TrimSpace(raw[start:len(raw)-1]))
	}
	return out, true
}

// bill is the cache model of Upstream for the request's elements: tokens
// read from the cache, written to it, and uncached input.
func (u *Upstream) bill(elems []json.RawMessage) (read, write, input uint64) {
	var chain [32]byte
	lastMarker := -1
	sizes := make([]uint64, len(elems))
	chains := make([][32]byte, len(elems))
	u.mu.Lock()
	defer u.mu.Unlock()
	for i, e := range elems {
		key := sha256.Sum256(e)
		el, ok := u.elems[key]
		if !ok {
			plain := []byte(e)
			if bytes.Contains(e, markerKey) {
				el.marked = true
				plain = markerRE.ReplaceAll(e, nil)
			}
			el.digest, el.tokens = sha256.Sum256(plain), uint64(len(plain)+3)/4
			u.elems[key] = el
		}
		if el.marked {
			lastMarker = i
		}
		sizes[i] = el.tokens
		h := sha256.New()
		h.Write(chain[:])
		h.Write(el.digest[:])
		copy(chain[:], h.Sum(nil))
		chains[i] = chain
	}
	cached := 0
	for cached < len(elems) && u.seen[chains[cached]] {
		cached++
	}
	for i := 0; i <= lastMarker; i++ {
		u.seen[chains[i]] = true
	}
	for i, n := range sizes {
		switch {
		case i < cached:
			read += n
		case i <= lastMarker:
			write += n
		default:
			input += n
		}
	}
	return read, write, input
}

// summaryOf is the upstream's summary of a summarizer request: the first
// line of each user text of the conversation, up to 12 KB, under the
// headings the built-in prompt asks for.
func summaryOf(msgs []json.RawMessage) history.Message {
	var b strings.Builder
	b.WriteString("## Goal\nContinue the task the user gave.\n## State\n")
	for _, raw := range msgs {
		ms, err := anthropic.ParseMessage(raw, nil)
		if err != nil {
			continue
		}
		for _, m := range ms {
			for _, bl := range m.Content {
				if bl.Type != history.BlockText || b.Len() > 12000 || strings.Contains(bl.Text, string(summaryKey)) {
					continue
				}
				line, _, _ := strings.Cut(strings.TrimSpace(bl.Text), "\n")
				if r := []rune(line); len(r) > 200 {
					line = string(r[:200])
				}
				if line != "" {
					fmt.Fprintf(&b, "- %s: %s\n", m.Role, line)
				}
			}
		}
	}
	b.WriteString("## Next steps\nGo on from the last step above.\n")
	return history.Message{Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockText, Text: b.String()}}}
}

// serveResponses is the Responses API endpoint: it answers an agent's
// request with the output items queued (NextTurn) and a summarizer request
// with summaryOf's text as one output message, and bills the request as
// OpenAI's automatic prompt cache does: the elements are tools,
// instructions, then each input item; the cached part is the longest
// prefix an earlier request had, and the whole request is written to the
// cache (there are no markers), the uncached part counted as a cache write
// so that both APIs are priced alike. Usage is reported as OpenAI does
// (input_tokens including input_tokens_details.cached_tokens).
func (u *Upstream) serveResponses(w http.ResponseWriter, body []byte) {
	var f map[string]json.RawMessage
	if json.Unmarshal(body, &f) != nil {
		u.fail(w, "not a Responses request")
		return
	}
	items, ok := splitArray(f["input"])
	if !ok {
		u.fail(w, "input is not an array")
		return
	}
	summary := len(items) > 0 && bytes.Contains(items[len(items)-1], summaryKey)
	elems := append([]json.RawMessage{f["tools"], f["instructions"]}, items...)
	read, write := u.billAll(elems)

	u.mu.Lock()
	var output json.RawMessage
	out := uint64(0)
	if summary {
		m := summaryOfItems(items)
		out = uint64(len(m)+3) / 4
		o, _ := json.Marshal([]map[string]any{{"type": "message", "id": "msg_replay_summary", "status": "completed", "role": "assistant",
			"content": []map[string]any{{"type": "output_text", "text": m, "annotations": []any{}}}}})
		output = o
		u.usage.Summaries++
		u.usage.Output += out
	} else {
		if len(u.next) == 0 {
			u.mu.Unlock()
			u.fail(w, "no answer queued for an agent request")
			return
		}
		var q queued
		q, u.next = u.next[0], u.next[1:]
		output = q.items
		u.bodies = append(u.bodies, body)
		u.usage.MaxPrompt = max(u.usage.MaxPrompt, read+write)
	}
	u.usage.Requests++
	u.usage.CacheRead += read
	u.usage.CacheWrite += write
	u.mu.Unlock()

	var model struct {
		Model string `json:"model"`
	}
	_ = json.Unmarshal(body, &model)
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"resp_replay","object":"response","created_at":1764662400,"status":"completed","model":%q,"output":%s,"usage":{"input_tokens":%d,"input_tokens_details":{"cached_tokens":%d},"output_tokens":%d,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":%d}}`,
		model.Model, output, read+write, read, max(out, 50), read+write+max(out, 50))
}

// billAll is bill for a request whose every element is written to the
// cache (no markers: OpenAI caches the whole prompt).
func (u *Upstream) billAll(elems []json.RawMessage) (read, write uint64) {
	var chain [32]byte
	u.mu.Lock()
	defer u.mu.Unlock()
	cached := true
	for _, e := range elems {
		key := sha256.Sum256(e)
		el, ok := u.elems[key]
		if !ok {
			el.digest, el.tokens = sha256.Sum256(e), uint64(len(e)+3)/4
			u.elems[key] = el
		}
		h := sha256.New()
		h.Write(chain[:])
		h.Write(el.digest[:])
		copy(chain[:], h.Sum(nil))
		if cached && u.seen[chain] {
			read += el.tokens
			continue
		}
		cached = false
		u.seen[chain] = true
		write += el.tokens
	}
	return read, write
}

// summaryOfItems is summaryOf for Responses input items: the first line of
// each message's text, under the built-in prompt's headings.
func summaryOfItems(items []json.RawMessage) string {
	var b strings.Builder
	b.WriteString("## Goal\nContinue the task the user gave.\n## State\n")
	for _, raw := range items {
		var m struct {
			Type    string          `json:"type"`
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(raw, &m) != nil || m.Type != "message" && m.Type != "" {
			continue
		}
		var parts []struct {
			Text string `json:"text"`
		}
		var text string
		if json.Unmarshal(m.Content, &text) != nil {
			_ = json.Unmarshal(m.Content, &parts)
			for _, p := range parts {
				text += p.Text + "\n"
			}
		}
		line, _, _ := strings.Cut(strings.TrimSpace(text), "\n")
		if r := []rune(line); len(r) > 200 {
			line = string(r[:200])
		}
		if line != "" && b.Len() < 12000 && !strings.Contains(text, string(summaryKey)) {
			fmt.Fprintf(&b, "- %s: %s\n", m.Role, line)
		}
	}
	b.WriteString("## Next steps\nGo on from the last step above.\n")
	return b.String()
}
