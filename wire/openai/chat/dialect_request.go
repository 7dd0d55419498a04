package chat

import (
	"encoding/json"
	"io"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/wire"
	"github.com/ctxd/ctxd/wire/openai"
)

// CacheView is openai.Cache of a Chat request.
func (Dialect) CacheView(body []byte) (wire.CacheView, error) {
	elems, last, lifetime, err := openai.Cache(body, false)
	return wire.CacheView{Elements: elems, LastMarker: last, Lifetime: lifetime}, err
}

// HidesUsage: a Chat stream reports its usage only when the request asks
// (stream_options.include_usage); ctxd asks for it when the client's
// request has no stream_options, and hides it (WithIncludeUsage,
// UsageFilter).
func (Dialect) HidesUsage(stream bool, streamOptions json.RawMessage) bool {
	return stream && len(streamOptions) == 0
}

// ClientAnswer hides the usage chunk from the stream of a client that did
// not ask for it (UsageFilter) when hidden.
func (Dialect) ClientAnswer(body io.ReadCloser, hidden bool) io.ReadCloser {
	if hidden {
		return &UsageFilter{ReadCloser: body}
	}
	return body
}

// SummaryPrefix is the client's leading system and developer messages, as
// a JSON array of them byte for byte: the summarizer's request starts as
// the client's did (its prompt as the model reads it, and the provider's
// cached prefix). A Chat session is summarized with its function tools,
// which the summarizer sends itself.
func (Dialect) SummaryPrefix(_, _, _ json.RawMessage, prefix []json.RawMessage) wire.SummaryPrefix {
	return wire.SummaryPrefix{Prefix: openai.ArrayOf(prefix)}
}

// SummarizerProvider is Chat Completions', the API every
// OpenAI-compatible upstream serves.
func (Dialect) SummarizerProvider() string { return config.ProviderOpenAI }
