package proxy

import (
	"net/http"
	"strings"

	"github.com/ctxd/ctxd/wire"
	"github.com/ctxd/ctxd/wire/anthropic"
	"github.com/ctxd/ctxd/wire/openai"
	"github.com/ctxd/ctxd/wire/openai/chat"
	"github.com/ctxd/ctxd/wire/openai/responses"
)

// dialect is the wire API of a managed request (wire.Dialect): what
// differs between the APIs lives in its wire/ package; the listener,
// identity, matching, recording, pre-send and overflow are the same code
// for all of them.
type dialect = wire.Dialect

// The dialects; dialects lists them in the order status shows their
// endpoints (Upstreams).
var (
	dialectAnthropic dialect = anthropic.Dialect{}
	dialectResponses dialect = responses.Dialect{}
	dialectChat      dialect = chat.Dialect{}
	dialects                 = []dialect{dialectAnthropic, dialectResponses, dialectChat}
)

// dialectOf returns the dialect of a managed endpoint (wire.Dialect.Path),
// nil for any other request.
func dialectOf(r *http.Request) dialect {
	if r.Method != http.MethodPost {
		return nil
	}
	path := strings.TrimSuffix(r.URL.Path, "/")
	for _, d := range dialects {
		if d.Path() == path {
			return d
		}
	}
	return nil
}

// isCountTokens reports whether r is a Messages token count
// (anthropic.CountTokensPath).
func isCountTokens(r *http.Request) bool {
	return r.Method == http.MethodPost && strings.TrimSuffix(r.URL.Path, "/") == anthropic.CountTokensPath
}

// errorDialect is the dialect whose error shape answers r and whose
// upstream serves it: its endpoint's, else its upstream's (upstreamOf;
// Chat's and Responses' are OpenAI's one shape and upstream).
func errorDialect(r *http.Request) dialect {
	if d := dialectOf(r); d != nil {
		return d
	}
	if upstreamOf(r) == "openai" {
		return dialectChat
	}
	return dialectAnthropic
}

// upstreamOf chooses the upstream of a request the proxy does not manage
// (count_tokens, /v1/models, HEAD /): Anthropic's for a request of its
// API or credential, asked first (an Anthropic OAuth token comes as a
// bearer too), OpenAI's for one of OpenAI's, Anthropic's otherwise.
func upstreamOf(r *http.Request) string {
	if !anthropic.OwnRequest(r) && openai.OwnRequest(r) {
		return "openai"
	}
	return "anthropic"
}
