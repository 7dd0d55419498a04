package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
)

// QueryPreSend, "true" (default) or "false", says whether RouteContext is
// the pre-send check (docs/design.md §5.1). With "false" the context is returned
// as it stands and no compaction is started or waited for: for inspection
// (`ctxctl session context`), and for comparing two reads byte for byte.
const QueryPreSend = "presend"

// HeaderAnthropicBeta is the response header of RouteContext in
// FormatAnthropic when the body carries "context_management" (the session's
// context_editing mode is "server", docs/design.md §6). Its value is what the
// agent must send in Anthropic's "anthropic-beta" request header for the
// parameter to be accepted.
const HeaderAnthropicBeta = "Ctxd-Anthropic-Beta"

// ContextOptions selects what Client.ContextWith reads.
type ContextOptions struct {
	// Format is FormatCanonical (default when empty), FormatAnthropic or
	// FormatOpenAI.
	Format string
	// NoPreSend skips the pre-send check (QueryPreSend=false): nothing is
	// compacted and nothing waits.
	NoPreSend bool
}

// ContextPathWith is the path and query of RouteContext for opt.
func ContextPathWith(id string, opt ContextOptions) string {
	q := url.Values{}
	if opt.Format != "" {
		q.Set(QueryFormat, opt.Format)
	}
	if opt.NoPreSend {
		q.Set(QueryPreSend, "false")
	}
	p := SessionPath(id) + "/context"
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	return p
}

// ContextWith returns the assembled context of session id as selected by
// opt, as the exact bytes the daemon sent (RouteContext). Errors: Invalid
// (format), NotFound.
func (c *Client) ContextWith(ctx context.Context, id string, opt ContextOptions) (json.RawMessage, error) {
	if err := checkID("session", id); err != nil {
		return nil, err
	}
	return c.raw(ctx, http.MethodGet, ContextPathWith(id, opt), ContentTypeJSON)
}
