package proxy

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/wire"
)

// Headers that name a session (docs/design.md §10), most explicit first.
const (
	// HeaderSession is ctxd's own: a client that sets it chooses its
	// session's identity.
	HeaderSession = "X-Ctxd-Session"
	// HeaderClaudeCodeSession is what Claude Code sends on every request.
	HeaderClaudeCodeSession = "X-Claude-Code-Session-Id"
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

// mac is HMAC-SHA256 under the daemon secret of the parts, each followed by
// a NUL so that no two part lists collide.
func mac(secret []byte, parts ...string) []byte {
	h := hmac.New(sha256.New, secret)
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return h.Sum(nil)
}

// fingerprint is the keyed fingerprint of the request's credential (its
// x-api-key and Authorization values): sessions are scoped by it, so a
// caller with another credential can neither continue nor read them. The
// credential itself is never kept.
func fingerprint(secret []byte, h http.Header) string {
	return hex.EncodeToString(mac(secret, "ctxd proxy credential", h.Get("X-Api-Key"), h.Get("Authorization")))[:32]
}

// agentSession is the agent's own session id: X-Ctxd-Session, then
// X-Claude-Code-Session-Id, session-id / session_id, then the session id
// inside metadata.user_id (Claude Code writes there a JSON string holding
// "session_id"; older versions "user_<…>_account_<…>_session_<uuid>").
// "" when the request names none.
func agentSession(h http.Header, metadata json.RawMessage) string {
	for _, k := range []string{HeaderSession, HeaderClaudeCodeSession, "Session-Id", "Session_id"} {
		if v := strings.TrimSpace(h.Get(k)); v != "" {
			return v
		}
	}
	if v := h.Values("session_id"); len(v) > 0 && v[0] != "" {
		return v[0]
	}
	var md struct {
		UserID string `json:"user_id"`
	}
	if len(metadata) == 0 || json.Unmarshal(metadata, &md) != nil || md.UserID == "" {
		return ""
	}
	var inner struct {
		SessionID string `json:"session_id"`
	}
	if json.Unmarshal([]byte(md.UserID), &inner) == nil && inner.SessionID != "" {
		return inner.SessionID
	}
	if _, after, ok := strings.Cut(md.UserID, "_session_"); ok && after != "" {
		return after
	}
	return ""
}

// conversationKey names one conversation of a caller: the credential's
// fingerprint, the agent's session id, the model and the tool set — so a
// side request of the same agent session (a title on a small model, a
// sub-agent with its own tools) never merges into the main conversation.
// A request naming no session is keyed by the conversation itself: its
// system prompt and first message, that message's markers cut and its
// plain text in one form (matchForm, as the matching reads it).
func conversationKey(secret []byte, fp, agent string, r *request) string {
	toolsDigest := sha256.Sum256(r.tools)
	if agent != "" {
		return hex.EncodeToString(mac(secret, "ctxd proxy conversation", fp, agent, r.model, string(toolsDigest[:])))
	}
	sysDigest := sha256.Sum256(r.system)
	// Plain text in one form, as matched (matchForm): a client that sends
	// its first message as a string in one request and as one text block
	// in the next stays in its conversation.
	first := sha256.Sum256(wire.MatchForm(wire.Normalize(r.messages[0])))
	return hex.EncodeToString(mac(secret, "ctxd proxy conversation", fp, "", r.model, string(toolsDigest[:]), string(sysDigest[:]), string(first[:])))
}

// sessionID is the ctxd session id of a conversation's branch k (0 is the
// first): "p-" and 24 hex digits of the key's MAC, then "-b<k>".
func sessionID(secret []byte, key string, k int) string {
	id := engine.ProxyIDPrefix + hex.EncodeToString(mac(secret, "ctxd proxy session", key))[:24]
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
