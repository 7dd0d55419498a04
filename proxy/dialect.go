package proxy

import (
	"net/http"
	"strings"

	"github.com/ctxd/ctxd/wire"
	"github.com/ctxd/ctxd/wire/anthropic"
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

// errorDialect is the dialect whose error shape answers r: its endpoint's,
// else its upstream's (Chat's and Responses' are OpenAI's one shape).
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
// (count_tokens, /v1/models, HEAD /): OpenAI's for the OpenAI paths and for
// a request with a bearer token and no Anthropic header; Anthropic's
// otherwise.
func upstreamOf(r *http.Request) string {
	p := r.URL.Path
	switch {
	case strings.HasPrefix(p, "/v1/messages"), r.Header.Get("Anthropic-Version") != "", r.Header.Get("Anthropic-Beta") != "",
		r.Header.Get("X-Api-Key") != "", strings.HasPrefix(p, "/api/"), anthropic.OwnToken(r.Header.Get("Authorization")):
		// An Anthropic credential (an OAuth token "sk-ant-oat…" in
		// Authorization, with or without anthropic-version) never goes to
		// the OpenAI upstream.
		return "anthropic"
	case strings.HasPrefix(p, "/v1/responses"), strings.HasPrefix(p, "/v1/chat/"), strings.HasPrefix(p, "/v1/completions"), strings.HasPrefix(p, "/v1/embeddings"),
		strings.HasPrefix(strings.ToLower(r.Header.Get("Authorization")), "bearer "):
		return "openai"
	}
	return "anthropic"
}
