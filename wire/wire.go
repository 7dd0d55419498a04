// Package wire is what every provider wire API's package has in common:
// the Dialect interface the proxy, the importers and the summarizer use
// (wire/anthropic, wire/openai/chat and wire/openai/responses implement
// it), and the normalisation a resent message is matched by
// (docs/design.md §10), which is the same for all of them.
package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/ctxd/ctxd/history"
)

// Dialect is one wire API (docs/design.md §10): the key of the
// conversation in a request body, how its items convert to and from
// canonical messages, how an assembled context is rendered into the
// outgoing body, how an answer and an error are read, the error shape
// ctxd answers with, and the provider's own compaction. Everything the
// proxy does with a request that is not one of these is the same for
// every API.
type Dialect interface {
	// Name is the "proxy" label of the sessions ("anthropic",
	// "responses", "chat"); Upstream the upstream's key ("anthropic" or
	// "openai"); Path the endpoint of its requests (a POST):
	// "/v1/messages", "/v1/responses" or "/v1/chat/completions".
	Name() string
	Upstream() string
	Path() string
	// ItemsKey is the body's conversation array: "messages" or "input".
	ItemsKey() string
	// IsPrefix reports whether a leading item belongs to the fixed prefix
	// (kept verbatim ahead of the assembled conversation, never
	// compacted).
	IsPrefix(raw json.RawMessage) bool
	// Parse converts items[from:] to canonical messages; errors name the
	// item.
	Parse(items []json.RawMessage, from int) ([]history.Message, error)
	// MatchKey is the tolerant form a resent message is matched by
	// (docs/design.md §10: what real clients change in what they resend is
	// left out); ok false: the message has none and is matched by its
	// normalized bytes (Normalize, MatchForm).
	MatchKey(raw []byte) (key []byte, ok bool)
	// AnswerLen reports how many items from n are one assistant answer
	// that same accepts (0: they are not).
	AnswerLen(items []json.RawMessage, n int, same func(history.Message) bool) int
	// SystemText and Tools read a request's prefix (its system or
	// instructions member and its prefix items) and its tools, for the
	// engine's estimate.
	SystemText(system json.RawMessage, prefix []json.RawMessage) string
	Tools(raw json.RawMessage) []history.ToolDef
	// IsContextLength classifies an upstream refusal (wire/overflow);
	// ContextLengthFigures reads such a refusal's count of the request
	// and the window it names, in tokens (0: not given).
	IsContextLength(status int, body []byte) bool
	ContextLengthFigures(body []byte) (count, limit uint64)
	// NewAnswerReader reads a streamed answer on its way; DecodeAnswer a
	// whole one. Both give the assistant message, an error the answer
	// carried ("" when none), and an error when it did not complete.
	NewAnswerReader(maxLine int) AnswerReader
	DecodeAnswer(body []byte) (history.Message, string, error)
	// ErrorMessage is the provider's "type: message" in an error body.
	ErrorMessage(body []byte) (string, bool)
	// WriteError answers with ctxd's own error in the API's shape, so an
	// agent shows it as it would the provider's.
	WriteError(w http.ResponseWriter, status int, typ, msg string)
	// ServerCompaction reports whether the API has the provider's own
	// compaction (docs/design.md §10, shape "server"); WithServerCompaction
	// adds it to a request body, to fire at trigger tokens, and names the
	// beta header it needs (""); IsServerCompactionRefusal recognises an
	// upstream's refusal of it and says why.
	ServerCompaction() bool
	WithServerCompaction(body []byte, trigger uint64) (out []byte, beta string, err error)
	IsServerCompactionRefusal(status int, body []byte) (why string, ok bool)
	// WithBeta adds beta, a beta header value WithServerCompaction named,
	// to the outgoing request's headers h.
	WithBeta(h http.Header, beta string)

	// What the proxy asks of a request instead of knowing its API.

	// CacheView reads a request body as the provider's prompt cache sees
	// it (docs/design.md §5.1). Errors: the body is not a request object
	// of the API.
	CacheView(body []byte) (CacheView, error)
	// ClientCompacting reports whether a request (h its headers, items
	// its conversation) is the client compacting its own conversation:
	// ctxd then compacts nothing for it, before sending it nor on its
	// refusal, so as not to race the client's compaction.
	ClientCompacting(h http.Header, items []json.RawMessage) bool
	// HidesUsage reports whether ctxd asks the upstream of a request for
	// its answer's usage, which the client did not ask for and the
	// answer then hides from it (stream and streamOptions as the request
	// gave them): a Chat stream without stream_options.
	HidesUsage(stream bool, streamOptions json.RawMessage) bool
	// ClientAnswer is a streamed answer's body as its client gets it:
	// without the usage ctxd asked for that the client did not (hidden:
	// HidesUsage held of its request), else body itself.
	ClientAnswer(body io.ReadCloser, hidden bool) io.ReadCloser
	// ClientViolations checks what of docs/design.md §4a a client's own
	// request decides: items is its conversation, of which the first
	// prefix are a fixed prefix and those from from on are new, added
	// being these parsed; thinking is its thinking member (nil when
	// absent). Indexes are items'. Nil when the API has no such rules.
	ClientViolations(items []json.RawMessage, prefix int, thinking json.RawMessage, added []history.Message, from int) history.Violations
	// BytesPerToken is the bytes of a request's JSON per o200k token that
	// an estimate from the body's size alone may assume, leaning high (a
	// due compaction is not missed); 0 when the API has no such figure:
	// its requests are always counted.
	BytesPerToken() float64
	// SummaryPrefix is what of a client's request (its system or
	// instructions member, tools, tool_choice and prefix items) a
	// summarizer request on the client's credential carries ahead of the
	// history, so that it extends the prefix the provider cached.
	SummaryPrefix(system, tools, toolChoice json.RawMessage, prefix []json.RawMessage) SummaryPrefix
	// SummarizerProvider is the summarizer provider (config.Provider…)
	// whose calls are this API: a proxied session is summarized through
	// the API its client speaks.
	SummarizerProvider() string
	// NewRenderer is a new, empty renderer of the outgoing body for one
	// branch of a conversation (Renderer), which keeps its caches from
	// one of the branch's requests to the next.
	NewRenderer() Renderer
}

// CacheView is a request body as the provider's prompt cache compares it
// (docs/design.md §5.1), in its order: the tools, the system prompt or
// instructions, then each conversation item, as JSON bytes (cache markers
// removed). LastMarker is the index of the last element a cache marker
// covers (-1: none, nothing is written); LongTTL reports a marker asking
// for the 1-hour lifetime. Lifetime is the cache lifetime the body asks
// for, in seconds (0: the provider's default, about 5 minutes).
type CacheView struct {
	Elements   [][]byte
	LastMarker int
	LongTTL    bool
	Lifetime   uint64
}

// SummaryPrefix is what a summarizer request on a client's credential
// carries of the client's request (Dialect.SummaryPrefix), each the
// client's JSON, nil when not carried: System its system prompt or
// instructions, Tools and ToolChoice its tools and tool_choice, Prefix a
// JSON array of its prefix items. All but Prefix (newly built) share the
// request's bytes.
type SummaryPrefix struct {
	System, Tools, ToolChoice, Prefix []byte
}

// EachParser is implemented by a Dialect whose conversation items each
// read on their own (the Messages API): ParseEach is Parse with where
// each item's reading ends, items[from+j] reading as
// msgs[ends[j-1]:ends[j]] (ends[-1] being 0). Errors name the item.
type EachParser interface {
	ParseEach(items []json.RawMessage, from int) (msgs []history.Message, ends []int, err error)
}

// AnswerReader is fed a streamed answer as it passes (a tee) and rebuilds
// it: the assistant message, an error the stream carried ("" when none),
// and an error when the stream did not complete.
type AnswerReader interface {
	io.Writer
	Answer() (history.Message, string, error)
}

// UsageSoFar is implemented by the AnswerReader of an API whose stream
// reports usage before its end (the Messages API's message_start: the
// input, cache read and cache write figures). UsageSoFar is the usage the
// stream reported so far, nil when it reported none: what the provider
// bills for an answer cut short.
type UsageSoFar interface {
	UsageSoFar() *history.Usage
}

// BelowMinimumError is WithServerCompaction's refusal of a trigger below
// the provider's smallest: the session cannot have the provider's
// compaction at its threshold.
type BelowMinimumError struct {
	Provider         string
	Trigger, Minimum uint64
}

func (e *BelowMinimumError) Error() string {
	return fmt.Sprintf("the session's threshold of %d tokens is below %s's minimum compaction trigger of %d", e.Trigger, e.Provider, e.Minimum)
}

// ErrNoServerCompaction is WithServerCompaction's answer for an API
// without the provider's compaction.
var ErrNoServerCompaction = errors.New("the API has no server-side compaction")

// WriteJSONError writes an error body b with status.
func WriteJSONError(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// RefusalNaming is the why of an upstream 400 or 422 whose message (msg,
// or the body when the API's envelope gave none) names one of names: a
// refusal of a parameter ctxd added.
func RefusalNaming(status int, msg string, names ...string) (string, bool) {
	if status != http.StatusBadRequest && status != http.StatusUnprocessableEntity {
		return "", false
	}
	for _, s := range names {
		if strings.Contains(msg, s) {
			if len(msg) > 200 {
				msg = msg[:200] + "…"
			}
			return fmt.Sprintf("upstream status %d: %s", status, msg), true
		}
	}
	return "", false
}

// TypeOf is the "type" member of a JSON object ("" when it has none).
func TypeOf(raw json.RawMessage) string {
	var t struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(raw, &t)
	return t.Type
}
