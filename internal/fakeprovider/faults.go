package fakeprovider

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
)

// Fault is an error the fake answers one model request with instead of its
// scripted answer (queued with FailNext), for tests of retries and of errors
// passed through a proxy.
type Fault struct {
	// Status is the HTTP status: 429 (rate limit), 500 (server error) or 529
	// (Anthropic's overload; OpenAI's requests get 503 for it). The body is
	// the provider's own for that status.
	Status int
	// MidStream, for a streamed request, answers 200 and starts the stream
	// (Anthropic: message_start and a first content block; Responses:
	// response.created), then sends the provider's error event
	// (Anthropic "event: error"; Responses "response.failed") and ends it.
	MidStream bool
}

// FailNext queues f: the next model request that passes validation and the
// window gets it instead of its answer (one fault per request, in queue
// order). Recorded with Step "fault".
func (p *Provider) FailNext(f Fault) {
	p.mu.Lock()
	p.faults = append(p.faults, f)
	p.mu.Unlock()
}

// StepFault is the Step recorded for a request answered with a Fault.
const StepFault = "fault"

func (p *Provider) nextFault() (Fault, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.faults) == 0 {
		return Fault{}, false
	}
	f := p.faults[0]
	p.faults = p.faults[1:]
	return f, true
}

// anthropicFault is the real API's error for a fault status.
func anthropicFault(status int) *APIError {
	switch status {
	case 429:
		return &APIError{Status: 429, Type: "rate_limit_error", Message: "Number of concurrent connections has exceeded your rate limit. Please try again later or contact sales at https://www.anthropic.com/contact-sales to discuss your options for a rate limit increase."}
	case 529:
		return &APIError{Status: 529, Type: "overloaded_error", Message: "Overloaded"}
	default:
		return &APIError{Status: status, Type: "api_error", Message: "Internal server error"}
	}
}

// openAIFault is OpenAI's error for a fault status.
func openAIFault(status int) *OpenAIError {
	switch status {
	case 429:
		return &OpenAIError{Status: 429, Type: "requests", Code: "rate_limit_exceeded", Message: "Rate limit reached for requests. Please try again in 1s."}
	case 529, 503:
		return &OpenAIError{Status: 503, Type: "server_error", Message: "The engine is currently overloaded, please try again later"}
	default:
		return &OpenAIError{Status: status, Type: "server_error", Message: "The server had an error while processing your request. Sorry about that!"}
	}
}

// writeAnthropicFault answers f to a Messages request.
func writeAnthropicFault(w http.ResponseWriter, f Fault, stream bool, model string) {
	e := anthropicFault(f.Status)
	if !f.MidStream || !stream {
		if f.Status == 429 {
			w.Header().Set("retry-after", "1")
		}
		writeError(w, e)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.WriteHeader(200)
	send := func(event string, data any) {
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
		if fl, ok := w.(http.Flusher); ok {
			fl.Flush()
		}
	}
	send("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": "msg_01Fault" + newRequestID()[12:28], "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": usage{OutputTokens: 1}}})
	send("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
	send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": "Working"}})
	send("error", map[string]any{"type": "error", "error": map[string]any{"type": e.Type, "message": e.Message}})
}

// writeOpenAIFault answers f to a Responses or Chat request.
func writeOpenAIFault(w http.ResponseWriter, f Fault, responses, stream bool, model string) {
	e := openAIFault(f.Status)
	if !f.MidStream || !stream || !responses {
		writeOpenAIError(w, e)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.WriteHeader(200)
	id := "resp_" + newRequestID()[12:36]
	for i, ev := range []map[string]any{
		{"type": "response.created", "response": map[string]any{"id": id, "object": "response", "status": "in_progress", "model": model, "output": []any{}}},
		{"type": "response.failed", "response": map[string]any{"id": id, "object": "response", "status": "failed", "model": model, "output": []any{},
			"error": map[string]any{"code": "server_error", "message": e.Message}}},
	} {
		ev["sequence_number"] = i
		b, _ := json.Marshal(ev)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev["type"], b)
	}
}

// The prompt cache. The fake keeps, for every cache_control breakpoint of
// every answered Messages request, a digest of the prefix up to it (tools,
// system, messages through the marked one, markers removed); a request then
// reads from the cache the longest prefix of its own that was stored, and
// writes the rest up to its last breakpoint. Usage reports them as the real
// API does: input_tokens is what was neither read nor written.

// cacheUsage computes a request's cache read and creation tokens and stores
// its breakpoints. tokens is the request's whole count.
func (p *Provider) cacheUsage(body []byte, tokens int) (read, created int) {
	var f struct {
		System   json.RawMessage   `json:"system"`
		Tools    json.RawMessage   `json:"tools"`
		Messages []json.RawMessage `json:"messages"`
	}
	if json.Unmarshal(body, &f) != nil {
		return 0, 0
	}
	marked := func(raw json.RawMessage) bool { return json.Valid(raw) && containsMarker(raw) }
	// Prefix digests: index 0 is tools+system, index i+1 through message i.
	h := sha256.New()
	h.Write(normalizeMarkers(f.Tools))
	h.Write([]byte{0})
	h.Write(normalizeMarkers(f.System))
	size := len(f.Tools) + len(f.System)
	digests := [][32]byte{[32]byte(h.Sum(nil))}
	sizes := []int{size}
	breaks := []int{}
	if marked(f.Tools) || marked(f.System) {
		breaks = append(breaks, 0)
	}
	for i, m := range f.Messages {
		h.Write([]byte{1})
		h.Write(normalizeMarkers(m))
		size += len(m)
		digests = append(digests, [32]byte(h.Sum(nil)))
		sizes = append(sizes, size)
		if marked(m) {
			breaks = append(breaks, i+1)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cache == nil {
		p.cache = map[[32]byte]bool{}
	}
	for i := len(digests) - 1; i >= 0; i-- {
		if p.cache[digests[i]] {
			read = min((sizes[i]+3)/4, tokens)
			break
		}
	}
	if len(breaks) > 0 {
		last := breaks[len(breaks)-1]
		created = max(min((sizes[last]+3)/4, tokens)-read, 0)
	}
	for _, b := range breaks {
		p.cache[digests[b]] = true
	}
	return read, created
}

// containsMarker reports whether a JSON value has a "cache_control" field at
// any depth.
func containsMarker(raw json.RawMessage) bool {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return false
	}
	var walk func(any) bool
	walk = func(v any) bool {
		switch x := v.(type) {
		case map[string]any:
			if _, ok := x["cache_control"]; ok {
				return true
			}
			for _, e := range x {
				if walk(e) {
					return true
				}
			}
		case []any:
			for _, e := range x {
				if walk(e) {
					return true
				}
			}
		}
		return false
	}
	return walk(v)
}
