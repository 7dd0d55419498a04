// Package overflow is the one classifier of a provider's refusal of a
// request too long for the model's context window ("context window
// exceeded"), for every wire API and every caller: the proxy's overflow
// recovery (through wire/anthropic and wire/openai), the summarizer's
// error classes and its pruned retry. The wordings are those of the real
// error bodies in testdata/corpus/providers/error-bodies.json and of the
// compatible servers ctxd is used with. The figures a refusal names (its
// count, the window) are read by each API's own package, which knows its
// message.
package overflow

import (
	"bytes"
	"net/http"
)

// phrases are lower-case fragments that only ever appear in a provider's
// "this does not fit the context window" error. They are matched against
// the whole body, so wrappers that nest the provider's body as an escaped
// string (OpenRouter's metadata.raw, Bedrock's "The model returned the
// following errors: …", python reprs) match too.
var phrases = []string{
	"prompt is too long",                      // Anthropic, Bedrock, OpenRouter raw
	"exceed context limit",                    // Anthropic: input length and `max_tokens` exceed context limit
	"context_length_exceeded",                 // OpenAI chat and Responses code
	"maximum context length",                  // OpenAI chat, vLLM, OpenRouter message
	"exceeds the context window",              // OpenAI Responses message
	"input is too long",                       // Bedrock "Input is too long for requested model"
	"exceed_context_size",                     // llama.cpp error type
	"exceeds the available context size",      // llama.cpp message
	"context window exceeded",                 // generic
	"model_context_window_exceeded",           // Anthropic stop reason echoed by proxies
	"exceeds the maximum number of tokens",    // Gemini via OpenRouter
	"input length exceeds the context length", // Ollama
	"request_too_large",                       // Anthropic 413 type
}

// pairs are fragments that say it only together: OpenAI-compatible
// servers' "… context length … exceeded" in their own words.
var pairs = [][2]string{
	{"context length", "exceed"},
}

// IsContextLength reports whether an HTTP status and body are a refusal of
// a request too long for the model's context window. Rules, first match
// wins:
//
//   - 0 (no answer), 408 and 429: never (a rate limit is not a
//     context-length problem, even when its message says "reduce the
//     prompt length");
//   - 413: always;
//   - any other status: when the body, any case, carries one of the
//     phrases above (or both fragments of a pair).
func IsContextLength(status int, body []byte) bool {
	switch status {
	case 0, http.StatusRequestTimeout, http.StatusTooManyRequests:
		return false
	case http.StatusRequestEntityTooLarge:
		return true
	}
	lower := bytes.ToLower(body)
	for _, p := range phrases {
		if bytes.Contains(lower, []byte(p)) {
			return true
		}
	}
	for _, p := range pairs {
		if bytes.Contains(lower, []byte(p[0])) && bytes.Contains(lower, []byte(p[1])) {
			return true
		}
	}
	return false
}
