package proxy

import (
	"net/http"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/identity"
	"github.com/ctxd/ctxd/wire/anthropic"
)

// Headers that name a session (docs/design.md §10), most explicit first.
const (
	// HeaderSession is ctxd's own: a client that sets it chooses its
	// session's identity (identity.AgentSession).
	HeaderSession = identity.HeaderSession
	// HeaderClaudeCodeSession is what Claude Code sends on every request.
	HeaderClaudeCodeSession = identity.HeaderClaudeCodeSession
	// HeaderContextLimit gives the context window, in tokens, of a model
	// the catalog lacks (identity.ContextLimit).
	HeaderContextLimit = identity.HeaderContextLimit
	// HeaderDiagnostic carries a diagnostic on the answer (a pre-send
	// compaction that failed, a request passed through unmanaged).
	HeaderDiagnostic = api.HeaderDiagnostic
	// HeaderSessionID names, on the answer, the ctxd session that recorded
	// the request.
	HeaderSessionID = "Ctxd-Session"
)

// noCredentialLimit is the diagnostic of a HeaderContextLimit on a request
// without a credential: who pays is unknown, so the window is the model's.
const noCredentialLimit = HeaderContextLimit + " not honoured: the request carries no credential (x-api-key or Authorization); the window is the model's"

// wireContextLimit is the context window a request's headers imply, in
// tokens: engine.ContextLimit1M when they ask for Anthropic's 1M window
// (anthropic.LongContextBeta); 0 when nothing says.
func wireContextLimit(h http.Header) uint64 {
	if anthropic.LongContextBeta(h) {
		return engine.ContextLimit1M
	}
	return 0
}
