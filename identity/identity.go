// Package identity holds the rules by which the proxy tells who a request
// is and which conversation it continues (docs/design.md §10): the keyed
// fingerprint of a client's credential, the agent's own session id from
// its headers or metadata, the key of a conversation, and the window a
// request asks for its session. Everything is a MAC under the daemon
// secret; no credential is kept.
package identity

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/wire"
	"github.com/ctxd/ctxd/wire/anthropic"
)

// Headers an agent names its session with (docs/design.md §10), most
// explicit first.
const (
	// HeaderSession is ctxd's own: a client that sets it chooses its
	// session's identity.
	HeaderSession = "X-Ctxd-Session"
	// HeaderClaudeCodeSession is what Claude Code sends on every request.
	HeaderClaudeCodeSession = "X-Claude-Code-Session-Id"
	// HeaderContextLimit gives the context window, in tokens, of a model
	// the catalog lacks (ContextLimit).
	HeaderContextLimit = "X-Ctxd-Context-Limit"
)

// MAC is HMAC-SHA256 under the daemon secret of the parts, each followed by
// a NUL so that no two part lists collide.
func MAC(secret []byte, parts ...string) []byte {
	h := hmac.New(sha256.New, secret)
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return h.Sum(nil)
}

// Fingerprint is the keyed fingerprint of the request's credential (its
// x-api-key and Authorization values): sessions are scoped by it, so a
// caller with another credential can neither continue nor read them. The
// credential itself is never kept.
func Fingerprint(secret []byte, h http.Header) string {
	return hex.EncodeToString(MAC(secret, "ctxd proxy credential", h.Get("X-Api-Key"), h.Get("Authorization")))[:32]
}

// AgentSession is the agent's own session id: X-Ctxd-Session, then
// X-Claude-Code-Session-Id, session-id / session_id, then the session id
// inside metadata.user_id (Claude Code writes there a JSON string holding
// "session_id"; older versions "user_<…>_account_<…>_session_<uuid>").
// "" when the request names none.
func AgentSession(h http.Header, metadata json.RawMessage) string {
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

// ConversationKey names one conversation of a caller: the credential's
// fingerprint, the agent's session id, the model and the tool set — so a
// side request of the same agent session (a title on a small model, a
// sub-agent with its own tools) never merges into the main conversation.
// A request naming no session is keyed by the conversation itself: its
// system prompt and first message, that message's markers cut and its
// plain text in one form (wire.MatchForm, as the matching reads it).
// tools and system are the request's raw values (nil when absent), msgs
// its conversation (at least one message when agent is "").
func ConversationKey(secret []byte, fp, agent, model string, tools, system json.RawMessage, msgs []json.RawMessage) string {
	toolsDigest := sha256.Sum256(tools)
	if agent != "" {
		return hex.EncodeToString(MAC(secret, "ctxd proxy conversation", fp, agent, model, string(toolsDigest[:])))
	}
	sysDigest := sha256.Sum256(system)
	// Plain text in one form, as matched (wire.MatchForm): a client that sends
	// its first message as a string in one request and as one text block
	// in the next stays in its conversation.
	first := sha256.Sum256(wire.MatchForm(wire.Normalize(msgs[0])))
	return hex.EncodeToString(MAC(secret, "ctxd proxy conversation", fp, "", model, string(toolsDigest[:]), string(sysDigest[:]), string(first[:])))
}

// HasCredential reports whether h carries a credential for the upstream:
// a non-blank x-api-key or Authorization, the headers Fingerprint reads.
func HasCredential(h http.Header) bool {
	return strings.TrimSpace(h.Get("X-Api-Key")) != "" || strings.TrimSpace(h.Get("Authorization")) != ""
}

// ContextLimit reads the HeaderContextLimit of h: 0 when absent; an error
// naming the header and the accepted range (tokens, config.MinContextLimit
// to config.MaxContextLimit) when it is not a whole number in it. It is
// honoured only on a request that has a credential (HasCredential): who
// pays for the window must be known.
func ContextLimit(h http.Header) (uint64, error) {
	vs := h.Values(HeaderContextLimit)
	if len(vs) == 0 {
		return 0, nil
	}
	v := strings.TrimSpace(vs[0])
	n, err := strconv.ParseUint(v, 10, 64)
	if len(vs) > 1 || err != nil || n < config.MinContextLimit || n > config.MaxContextLimit {
		return 0, fmt.Errorf("%s: %q is not a context window: give one whole number of tokens from %d to %d", HeaderContextLimit, strings.Join(vs, ", "), config.MinContextLimit, config.MaxContextLimit)
	}
	return n, nil
}

// NoCredentialLimit is the diagnostic of a HeaderContextLimit on a request
// without a credential (HasCredential): who pays is unknown, so the window
// is the model's.
const NoCredentialLimit = HeaderContextLimit + " not honoured: the request carries no credential (x-api-key or Authorization); the window is the model's"

// WireContextLimit is the context window a request's headers imply, in
// tokens: anthropic.LongContextWindow when they ask for Anthropic's 1M
// window (anthropic.LongContextBeta); 0 when nothing says.
func WireContextLimit(h http.Header) uint64 {
	if anthropic.LongContextBeta(h) {
		return anthropic.LongContextWindow
	}
	return 0
}
