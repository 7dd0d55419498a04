package proxy

import (
	"encoding/hex"
	"net/http"
	"strings"

	"github.com/ctxd/ctxd/engine"
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
	// the catalog lacks.
	HeaderContextLimit = "X-Ctxd-Context-Limit"
	// HeaderDiagnostic carries a diagnostic on the answer (a pre-send
	// compaction that failed, a request passed through unmanaged).
	HeaderDiagnostic = "Ctxd-Diagnostic"
	// HeaderSessionID names, on the answer, the ctxd session that recorded
	// the request.
	HeaderSessionID = "Ctxd-Session"
)

// headerASCII spells in ASCII the non-ASCII characters ctxd's diagnostics
// use, for header values only ("docs/design.md §4a" becomes "docs/design.md section
// 4a", not "docs/design.md ?4a"); bodies and events keep them.
var headerASCII = strings.NewReplacer("§", "section ", "≥", ">=", "≤", "<=", "…", "...", "—", "-", "–", "-", "→", "->")

// sessionID is the ctxd session id of a conversation's branch k (0 is the
// first): "p-" and 24 hex digits of the key's MAC, then "-b<k>".
func sessionID(secret []byte, key string, k int) string {
	id := engine.ProxyIDPrefix + hex.EncodeToString(identity.MAC(secret, "ctxd proxy session", key))[:24]
	if k > 0 {
		id += "-b" + itoa(k)
	}
	return id
}

func itoa(k int) string {
	if k == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for k > 0 {
		i--
		b[i] = byte('0' + k%10)
		k /= 10
	}
	return string(b[i:])
}

// wireContextLimit is the context window a request's headers imply, in
// tokens: Anthropic's context-1m-* beta in anthropic-beta (Claude Code sends
// context-1m-2025-08-07 with its default model) gives a 1M window; 0 when
// nothing says.
func wireContextLimit(h http.Header) uint64 {
	for _, v := range h.Values("Anthropic-Beta") {
		for _, b := range strings.Split(v, ",") {
			if strings.HasPrefix(strings.TrimSpace(b), "context-1m-") {
				return engine.ContextLimit1M
			}
		}
	}
	return 0
}
