package summarizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/wire/overflow"
)

// Class is the class of a summarizer failure (docs/design.md §5.5). It decides
// what happens next: a context-length failure permits the one pruned retry,
// a transient one is retried with backoff inside the call's timeout, a
// permanent one moves on to the next binding.
type Class int

// The failure classes. The zero value is ClassPermanent: a failure nobody
// recognised is never retried and never prunes.
const (
	// ClassPermanent is every failure that is neither transient nor a
	// context-length failure: 4xx other than 408/413/429, malformed answers,
	// answer-check failures, configuration problems.
	ClassPermanent Class = iota
	// ClassTransient is 408, 429, 5xx, 529 (overloaded), a connection error
	// or a timeout: retried by go-retryablehttp while the call's timeout
	// allows.
	ClassTransient
	// ClassContextLength is a provider refusing the request because it does
	// not fit the model's context window: Anthropic "prompt is too long" and
	// "input length and max_tokens exceed context limit", OpenAI
	// context_length_exceeded, HTTP 413, and the wrappers of Bedrock,
	// OpenRouter and compatible servers.
	ClassContextLength
)

// String returns "permanent", "transient" or "context_length"; the names are
// stable and safe as metric label values.
func (c Class) String() string {
	switch c {
	case ClassTransient:
		return "transient"
	case ClassContextLength:
		return "context_length"
	default:
		return "permanent"
	}
}

// Sentinels matched with errors.Is. A *ProviderError matches the sentinel of
// its Class; the answer-check sentinels are wrapped by the *ProviderError of
// the binding whose answer failed.
var (
	// ErrContextLength: the request did not fit the model's context window.
	ErrContextLength = errors.New("summarizer: request exceeds the model's context window")
	// ErrTransient: a rate limit, an overloaded or failing server, a
	// connection error or a timeout.
	ErrTransient = errors.New("summarizer: transient provider failure")
	// ErrPermanent: any other failure of a binding.
	ErrPermanent = errors.New("summarizer: permanent provider failure")

	// ErrToolCallAnswer: the summarizer answered with a tool call, which is
	// non-text output (docs/design.md §5.3).
	ErrToolCallAnswer = errors.New("summarizer: answer contains a tool call")
	// ErrEmptyAnswer: the summarizer answered with no text.
	ErrEmptyAnswer = errors.New("summarizer: answer is empty")
	// ErrAnswerTooShort: the answer is implausibly short for the history
	// it summarizes (MinSummaryBytes): a failed attempt, the next binding
	// is tried.
	ErrAnswerTooShort = errors.New("summarizer: answer is implausibly short for its input")
	// ErrAnswerTooLarge: the answer is longer than max_summary_bytes.
	ErrAnswerTooLarge = errors.New("summarizer: answer exceeds max_summary_bytes")
	// ErrAnswerTruncated: the provider cut the answer at its output cap
	// (Anthropic stop_reason "max_tokens", OpenAI finish_reason "length").
	ErrAnswerTruncated = errors.New("summarizer: answer was cut at the output cap")
	// ErrAnswerRefused: the provider refused or filtered the answer
	// (Anthropic stop_reason "refusal", OpenAI finish_reason
	// "content_filter" or a refusal message).
	ErrAnswerRefused = errors.New("summarizer: answer was refused or filtered")

	// ErrAllBindingsFailed: every binding failed; the compaction failed.
	// The error returned by Summarizer.Summarize also wraps each binding's
	// failure.
	ErrAllBindingsFailed error = api.NewCoded(api.Upstream, "summarizer: every binding failed")
	// ErrInvalidHistory: the assembled request would carry a tool call
	// without its result, or a result without its call. No binding is tried.
	ErrInvalidHistory = errors.New("summarizer: history is not closed")
	// ErrUnknownProvider: a binding names a provider other than
	// "anthropic", "openai" or "extractive".
	ErrUnknownProvider = errors.New("summarizer: unknown provider")
	// ErrMissingAPIKey: the binding's api_key_env names a variable that is
	// unset or empty at call time.
	ErrMissingAPIKey = errors.New("summarizer: API key environment variable is unset")
	// ErrNoArtifactStore: the pruned retry was needed but no ArtifactStore
	// was given.
	ErrNoArtifactStore = errors.New("summarizer: pruned retry needs an artifact store")
)

// ProviderError is the failure of one binding's call. Use errors.As to read
// it and errors.Is with ErrContextLength, ErrTransient or ErrPermanent to
// test its class; Unwrap gives the underlying cause (a context deadline, a
// connection error, an answer-check sentinel) when there is one.
//
// Message is the provider's own error message (or the start of its body),
// at most 1 KiB; it never contains the request, and a Summarizer has
// passed it (and Err's text) through its redactor: a key the provider
// echoed reads "[REDACTED]" (docs/design.md §8b).
type ProviderError struct {
	// Binding is the binding's name.
	Binding string
	// Provider is "anthropic", "openai" or "extractive".
	Provider string
	// Status is the HTTP status, or 0 when no response arrived.
	Status int
	// Class is the failure's class.
	Class Class
	// Message is what the provider said, or what went wrong.
	Message string
	// Err is the underlying cause, or nil.
	Err error
	// Count and Limit are the figures a context-length refusal named, in
	// tokens: the provider's count of the refused request's input and the
	// window left for it (0: the refusal did not give it).
	Count, Limit uint64
}

// Error describes the failure: binding, provider, status, class, message.
func (e *ProviderError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "summarizer binding %q (%s)", e.Binding, e.Provider)
	if e.Status != 0 {
		fmt.Fprintf(&b, ": HTTP %d", e.Status)
	}
	fmt.Fprintf(&b, ": %s", e.Class)
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	if e.Err != nil && (e.Message == "" || !strings.Contains(e.Message, e.Err.Error())) {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the underlying cause, or nil.
func (e *ProviderError) Unwrap() error { return e.Err }

// Is reports whether target is the class sentinel of e.
func (e *ProviderError) Is(target error) bool {
	switch target {
	case ErrContextLength:
		return e.Class == ClassContextLength
	case ErrTransient:
		return e.Class == ClassTransient
	case ErrPermanent:
		return e.Class == ClassPermanent
	}
	return false
}

// ClassOf returns the class of err: the Class of the first *ProviderError in
// its chain, ClassTransient for a context deadline, else ClassPermanent.
func ClassOf(err error) Class {
	var pe *ProviderError
	switch {
	case errors.As(err, &pe):
		return pe.Class
	case errors.Is(err, ErrContextLength):
		return ClassContextLength
	case errors.Is(err, ErrTransient):
		return ClassTransient
	}
	return ClassPermanent
}

// transientPhrases mark a body as transient whatever its status (some
// proxies answer 400 or 200 with an overloaded body).
var transientPhrases = []string{
	"overloaded_error",
	"rate_limit_error",
	"rate_limit_exceeded",
}

// Classify returns the class of a provider's error response (docs/design.md
// §5.5). status is the HTTP status (0 when no response arrived: a
// connection error, which is transient); body is the response body, JSON or
// not. Rules, first match wins:
//
//   - 0, 408, 429: transient (a rate limit is never a context-length
//     problem, even when its message says "reduce the prompt length");
//   - 413, or a body carrying a context-length phrase (Anthropic, OpenAI,
//     Bedrock, OpenRouter, vLLM, llama.cpp, Ollama wordings): context
//     length, by the one classifier of every caller (wire/overflow);
//   - 5xx, 529, or an overloaded / rate-limit error type in the body:
//     transient;
//   - anything else: permanent.
func Classify(status int, body []byte) Class {
	switch {
	case status == 0, status == http.StatusRequestTimeout, status == http.StatusTooManyRequests:
		return ClassTransient
	case overflow.IsContextLength(status, body):
		return ClassContextLength
	}
	lower := strings.ToLower(string(body))
	if status >= 500 {
		return ClassTransient
	}
	for _, p := range transientPhrases {
		if strings.Contains(lower, p) {
			return ClassTransient
		}
	}
	return ClassPermanent
}

// maxMessageBytes bounds ProviderError.Message so a provider's HTML error
// page does not end up whole in logs and events.
const maxMessageBytes = 1024

// errorMessage extracts the provider's own message from an error body: the
// "message" of Anthropic's and OpenAI's error objects (nested raw bodies of
// OpenRouter included), else the body itself, cut to maxMessageBytes.
func errorMessage(body []byte) string {
	msg := ""
	var v any
	if json.Unmarshal(body, &v) == nil {
		msg = findMessage(v, 0)
	}
	if msg == "" {
		msg = strings.TrimSpace(string(body))
	}
	msg = strings.Join(strings.Fields(msg), " ")
	return truncateBytes(msg, maxMessageBytes)
}

// findMessage looks for the most specific "message" string in a decoded
// error body: a nested raw provider body wins over the wrapper's generic
// "Provider returned error".
func findMessage(v any, depth int) string {
	if depth > 4 {
		return ""
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return ""
	}
	if e, ok := obj["error"]; ok {
		if m := findMessage(e, depth+1); m != "" {
			return m
		}
	}
	if md, ok := obj["metadata"].(map[string]any); ok {
		if raw, ok := md["raw"].(string); ok {
			var inner any
			if json.Unmarshal([]byte(raw), &inner) == nil {
				if m := findMessage(inner, depth+1); m != "" {
					return m
				}
			}
		}
	}
	if m, ok := obj["message"].(string); ok {
		return m
	}
	return ""
}

// truncateBytes cuts s to at most n bytes on a code-point boundary.
func truncateBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
