package proxy

import (
	"fmt"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/wire/anthropic"
)

// Limits returns the [proxy.limits] the proxy applies (defaults filled
// in): the daemon sets its http.Server's MaxHeaderBytes and IdleTimeout,
// and the listener's connection cap, from them.
func (p *Proxy) Limits() config.ProxyLimits { return p.limits }

// countLimits refuses a request over proxy.limits.messages or
// proxy.limits.content_blocks before anything parses its messages: the
// message says which limit. The blocks are the elements of each message's
// content array (a Responses item without one counts as one block),
// counted as the body's scan split the conversation (wire.Request.Blocks).
func (p *Proxy) countLimits(req *request) string {
	if n := uint64(len(req.Messages)); n > p.limits.Messages {
		return fmt.Sprintf("ctxd proxy: %d messages, over proxy.limits.messages (%d)", n, p.limits.Messages)
	}
	if req.Blocks > p.limits.ContentBlocks {
		return fmt.Sprintf("ctxd proxy: over proxy.limits.content_blocks (%d) content blocks in one request", p.limits.ContentBlocks)
	}
	return ""
}

// ConnectionsRefusal is the body (Anthropic's error shape) of the 503 a
// connection over proxy.limits.connections gets.
func ConnectionsRefusal(limit uint64) []byte {
	return anthropic.ErrorJSON("overloaded_error", fmt.Sprintf("ctxd proxy: %d connections are open, the limit (proxy.limits.connections); retry shortly", limit))
}
