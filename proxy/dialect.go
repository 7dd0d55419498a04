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

// The dialects.
var (
	dialectAnthropic dialect = anthropic.Dialect{}
	dialectResponses dialect = responses.Dialect{}
	dialectChat      dialect = chat.Dialect{}
)

// dialectOf returns the dialect of a managed endpoint, nil for any other
// request.
func dialectOf(r *http.Request) dialect {
	if r.Method != http.MethodPost {
		return nil
	}
	switch strings.TrimSuffix(r.URL.Path, "/") {
	case "/v1/messages":
		return dialectAnthropic
	case "/v1/responses":
		return dialectResponses
	case "/v1/chat/completions":
		return dialectChat
	}
	return nil
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
