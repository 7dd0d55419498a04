package openai

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/ctxd/ctxd/history"
)

// OwnRequest reports whether r is OpenAI's by its path (/v1/responses,
// /v1/chat/…, /v1/completions, /v1/embeddings) or by a bearer token in
// Authorization; an Anthropic request may carry a bearer too
// (anthropic.OwnRequest, which the proxy asks first).
func OwnRequest(r *http.Request) bool {
	p := r.URL.Path
	return strings.HasPrefix(p, "/v1/responses") || strings.HasPrefix(p, "/v1/chat/") || strings.HasPrefix(p, "/v1/completions") ||
		strings.HasPrefix(p, "/v1/embeddings") || strings.HasPrefix(strings.ToLower(r.Header.Get("Authorization")), "bearer ")
}

// ClientCompacting: false, unless the API's dialect says otherwise.
func (Common) ClientCompacting(http.Header, []json.RawMessage) bool { return false }

// HidesUsage: false, unless the API's dialect says otherwise.
func (Common) HidesUsage(bool, json.RawMessage) bool { return false }

// ClientAnswer is body (see chat.Dialect.ClientAnswer).
func (Common) ClientAnswer(body io.ReadCloser, _ bool) io.ReadCloser { return body }

// WithBeta does nothing: the OpenAI APIs have no beta headers.
func (Common) WithBeta(http.Header, string) {}

// ClientViolations: none; OpenAI's APIs accept, e.g., an empty content.
func (Common) ClientViolations([]json.RawMessage, int, json.RawMessage, []history.Message, int) history.Violations {
	return nil
}

// BytesPerToken: no figure; OpenAI requests are always counted.
func (Common) BytesPerToken() float64 { return 0 }
