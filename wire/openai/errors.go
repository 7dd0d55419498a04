package openai

import (
	"encoding/json"
	"errors"
	"regexp"
	"strconv"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/wire/overflow"
)

// APIError is the error object of an OpenAI error body.
type APIError struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    any    `json:"code"`
}

// Usage maps either API's usage object to the canonical one.
func Usage(raw json.RawMessage) *history.Usage {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var u struct {
		InputTokens        uint64 `json:"input_tokens"`
		OutputTokens       uint64 `json:"output_tokens"`
		PromptTokens       uint64 `json:"prompt_tokens"`
		CompletionTokens   uint64 `json:"completion_tokens"`
		InputTokensDetails *struct {
			CachedTokens uint64 `json:"cached_tokens"`
		} `json:"input_tokens_details"`
		PromptTokensDetails *struct {
			CachedTokens uint64 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	}
	if json.Unmarshal(raw, &u) != nil {
		return nil
	}
	in, out, cached := u.InputTokens+u.PromptTokens, u.OutputTokens+u.CompletionTokens, uint64(0)
	if u.InputTokensDetails != nil {
		cached = u.InputTokensDetails.CachedTokens
	}
	if u.PromptTokensDetails != nil {
		cached += u.PromptTokensDetails.CachedTokens
	}
	cached = min(cached, in)
	return &history.Usage{InputTokens: in - cached, CacheReadInputTokens: cached, OutputTokens: out}
}

// ErrIncomplete: the stream ended before its end event.
var ErrIncomplete = errors.New("the stream ended before its end")

// MaxToolCalls bounds the index of a streamed tool call: a hostile index
// would otherwise allocate that many calls.
const MaxToolCalls = 4096

// ErrorBody decodes an OpenAI error body {"error":{...}}; ok is false when
// body is not one.
func ErrorBody(body []byte) (e APIError, ok bool) {
	var b struct {
		Error *APIError `json:"error"`
	}
	if json.Unmarshal(body, &b) != nil || b.Error == nil {
		return APIError{}, false
	}
	return *b.Error, true
}

// IsContextLength reports whether an HTTP status and body are a refusal of
// a request too long for the model's context window, by OpenAI or a
// compatible server (code context_length_exceeded, "maximum context
// length", "exceeds the context window", llama.cpp's "exceeds the
// available context size", a 413): wire/overflow's classifier, the one
// every caller uses.
func IsContextLength(status int, body []byte) bool {
	return overflow.IsContextLength(status, body)
}

// ContextLengthFigures reads the figures of a context-length refusal's
// message (IsContextLength): count is the provider's count of the refused
// request's input, limit the window it names, both in tokens; 0 for a
// figure the message does not give (the Responses API's "Your input
// exceeds the context window of this model" gives none). "This model's
// maximum context length is 4097 tokens. However, your messages resulted
// in 4363 tokens" gives 4363 and 4097; "… you requested 4120 tokens (3120
// in the messages, 1000 in the completion)" gives 3120 and 4097.
func ContextLengthFigures(body []byte) (count, limit uint64) {
	msg := string(body)
	if e, ok := ErrorBody(body); ok {
		msg = e.Message
	}
	if m := maxContextLength.FindStringSubmatch(msg); m != nil {
		limit = atou(m[1])
	}
	if m := inTheMessages.FindStringSubmatch(msg); m != nil {
		count = atou(m[1])
	} else if m := resultedIn.FindStringSubmatch(msg); m != nil {
		count = atou(m[1])
	}
	return count, limit
}

// atou is s as a uint64, 0 when it is not one.
func atou(s string) uint64 {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

var (
	maxContextLength = regexp.MustCompile(`(?i)maximum context length is\s*([0-9]+)\s*tokens`)
	resultedIn       = regexp.MustCompile(`(?i)resulted in\s*([0-9]+)\s*tokens`)
	inTheMessages    = regexp.MustCompile(`(?i)\(([0-9]+) in the messages`)
)
