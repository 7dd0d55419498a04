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
// canonical messages, how an answer and an error are read, the error shape
// ctxd answers with, and the provider's own compaction. Everything the
// proxy does with a request that is not one of these is the same for
// every API.
type Dialect interface {
	// Name is the "proxy" label of the sessions ("anthropic",
	// "responses", "chat"); Upstream the upstream's key ("anthropic" or
	// "openai").
	Name() string
	Upstream() string
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
