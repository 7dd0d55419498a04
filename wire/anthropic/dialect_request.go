package anthropic

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/wire"
)

// CacheView is CacheElements; a marker asking for the 1-hour lifetime
// makes the cache live an hour (3600 seconds).
func (Dialect) CacheView(body []byte) (wire.CacheView, error) {
	elems, last, long, err := CacheElements(body)
	v := wire.CacheView{Elements: elems, LastMarker: last, LongTTL: long}
	if long {
		v.Lifetime = 3600
	}
	return v, err
}

// ClientCompacting: a Messages client has no compaction of its own that
// ctxd could race.
func (Dialect) ClientCompacting(http.Header, []json.RawMessage) bool { return false }

// HidesUsage: a Messages stream always reports its usage.
func (Dialect) HidesUsage(bool, json.RawMessage) bool { return false }

// ClientAnswer is body: the Messages API's usage is always sent.
func (Dialect) ClientAnswer(body io.ReadCloser, _ bool) io.ReadCloser { return body }

// WithBeta is the package's WithBeta.
func (Dialect) WithBeta(h http.Header, beta string) { WithBeta(h, beta) }

// ClientViolations is the package's ClientViolations.
func (Dialect) ClientViolations(items []json.RawMessage, prefix int, thinking json.RawMessage, added []history.Message, from int) history.Violations {
	return ClientViolations(items, prefix, thinking, added, from)
}

// ParseEach is the package's ParseEach (wire.EachParser).
func (Dialect) ParseEach(items []json.RawMessage, from int) ([]history.Message, []int, error) {
	return ParseEach(items, from)
}

// BytesPerToken is 3: fewer than the ~3.5–4 of Claude Code's
// conversations, so an estimate from a body's size leans high.
func (Dialect) BytesPerToken() float64 { return 3 }

// SummaryPrefix carries the client's own system, tools and tool_choice:
// a changed tool_choice costs Anthropic's cache of the messages.
func (Dialect) SummaryPrefix(system, tools, toolChoice json.RawMessage, _ []json.RawMessage) wire.SummaryPrefix {
	return wire.SummaryPrefix{System: system, Tools: tools, ToolChoice: toolChoice}
}

// SummarizerProvider is the Messages API's.
func (Dialect) SummarizerProvider() string { return config.ProviderAnthropic }

// OwnToken reports whether an Authorization value carries an Anthropic
// key or OAuth token ("Bearer sk-ant-…").
func OwnToken(auth string) bool {
	_, tok, _ := strings.Cut(strings.TrimSpace(auth), " ")
	return strings.HasPrefix(strings.TrimSpace(tok), "sk-ant-")
}

// OwnRequest reports whether r is Anthropic's by its path or headers: a
// /v1/messages or /api/ path, an anthropic-version, anthropic-beta or
// x-api-key header, or an Anthropic key or token in Authorization
// (OwnToken; an OAuth token "sk-ant-oat…" comes as a bearer, with or
// without anthropic-version). The proxy never sends such a request, which
// may carry an Anthropic credential, to another provider.
func OwnRequest(r *http.Request) bool {
	p := r.URL.Path
	return strings.HasPrefix(p, "/v1/messages") || strings.HasPrefix(p, "/api/") || r.Header.Get("Anthropic-Version") != "" ||
		r.Header.Get("Anthropic-Beta") != "" || r.Header.Get("X-Api-Key") != "" || OwnToken(r.Header.Get("Authorization"))
}

// LongContextWindow is the window, in tokens, a context-1m-* beta gives
// (LongContextBeta).
const LongContextWindow = 1_000_000

// LongContextBeta reports whether a request's anthropic-beta header asks
// for the 1M-token context window: a context-1m-* beta (Claude Code sends
// context-1m-2025-08-07 with its default model).
func LongContextBeta(h http.Header) bool {
	for _, v := range h.Values("Anthropic-Beta") {
		for _, b := range strings.Split(v, ",") {
			if strings.HasPrefix(strings.TrimSpace(b), "context-1m-") {
				return true
			}
		}
	}
	return false
}

// WithBeta adds beta to the request header h's anthropic-beta (a comma
// list the client may have started), once: the beta a parameter ctxd
// added needs (Dialect.WithServerCompaction).
func WithBeta(h http.Header, beta string) {
	var have []string
	for _, v := range h.Values("Anthropic-Beta") {
		for _, b := range strings.Split(v, ",") {
			if b = strings.TrimSpace(b); b != "" {
				if b == beta {
					return
				}
				have = append(have, b)
			}
		}
	}
	h.Set("Anthropic-Beta", strings.Join(append(have, beta), ","))
}
