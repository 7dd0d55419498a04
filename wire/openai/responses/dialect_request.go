package responses

import (
	"encoding/json"
	"net/http"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/wire"
	"github.com/ctxd/ctxd/wire/openai"
)

// CacheView is openai.Cache of a Responses request.
func (Dialect) CacheView(body []byte) (wire.CacheView, error) {
	elems, last, lifetime, err := openai.Cache(body, true)
	return wire.CacheView{Elements: elems, LastMarker: last, Lifetime: lifetime}, err
}

// ClientCompacting is the package's ClientCompacting of the request's
// TurnMetadataHeader and input.
func (Dialect) ClientCompacting(h http.Header, items []json.RawMessage) bool {
	return ClientCompacting(h.Get(TurnMetadataHeader), items)
}

// SummaryPrefix carries the client's instructions and prefix items
// (developer messages, Codex's additional_tools item: its code-mode tools
// as the API declares them), byte for byte ahead of the history; not its
// tools: a Responses client's tools (Codex's free-form tools with their
// grammars) would make the summary request larger than the request it
// compacts, and the summarizer sends the session's function tools
// instead.
func (Dialect) SummaryPrefix(system, _, _ json.RawMessage, prefix []json.RawMessage) wire.SummaryPrefix {
	return wire.SummaryPrefix{System: system, Prefix: openai.ArrayOf(prefix)}
}

// SummarizerProvider is the Responses API's, the API a Responses
// session's model is served on.
func (Dialect) SummarizerProvider() string { return config.ProviderOpenAIResponses }
