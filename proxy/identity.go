package proxy

import (
	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/identity"
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
