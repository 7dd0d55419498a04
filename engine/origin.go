package engine

import (
	"context"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/identity"
	"github.com/ctxd/ctxd/quota"
)

// Who owns a session (docs/design.md §10): a session the provider proxy
// created is its client's, which resends its whole history, system prompt,
// tools and model with every request; the daemon API may read it, compact
// it and set its window, never write what the client sends. These are the
// rule's one home: the server and the proxy use them, neither decides it.

// LabelProxy is the session label naming the wire API of a proxied
// session ("anthropic", "responses" or "chat"). The proxy sets it when it
// creates the session; no route changes it afterwards, and the daemon API
// may not set it (ReservedForProxy).
const LabelProxy = "proxy"

// LabelCredential is the label of a proxied session naming its client
// credential's hash (quota.CredHash); LabelInherits names, on a branch
// that inherited its parent's log (ForkSession), that parent, whose files
// are kept while the branch is (quota.Expirable).
const (
	LabelCredential = "proxy.credential"
	LabelInherits   = "proxy.inherits"
)

// ProxyIDPrefix begins the id of every session the provider proxy creates
// (ProxySessionID). The daemon API may not create a session under it
// (ReservedForProxy).
const ProxyIDPrefix = "p-"

// ProxySessionID is the id of branch k (0 is the first) of the proxied
// conversation whose key is key (identity.ConversationKey): ProxyIDPrefix
// and 24 hex digits of the key's MAC under the daemon secret, then
// "-b<k>" for k > 0.
func ProxySessionID(secret []byte, key string, k int) string {
	id := ProxyIDPrefix + hex.EncodeToString(identity.MAC(secret, "ctxd proxy session", key))[:24]
	if k > 0 {
		id += "-b" + strconv.Itoa(k)
	}
	return id
}

// ErrProxyOwned: a write through the daemon API to what a proxied
// session's client owns (its messages, system prompt, tools, pinned
// context or model). It wraps ErrConflict; RefuseProxyOwned's errors wrap
// it.
var ErrProxyOwned = fmt.Errorf("%w: %s", ErrConflict, proxyOwnedPhrase)

// proxyOwnedPhrase is the phrase every refusal of a write to a proxied
// session says (docs/api.md "Proxied sessions").
const proxyOwnedPhrase = "is owned by the proxy"

// proxyOwnedWhy says, per field the daemon API may not write on a proxied
// session ("messages" for an append), why: what the proxy sends in its place.
var proxyOwnedWhy = map[string]string{
	"messages": "its client resends its whole history with every request and the proxy records only what the client sends: a message appended here would reach the provider between the recorded answer and the client's next message",
	"system":   "the proxy sends the client's own system prompt with every request: one stored here would disagree with what is sent",
	"tools":    "the proxy sends the client's own tool definitions with every request: ones stored here would disagree with what is sent",
	"pinned":   "pinned context would be sent to the provider inside the client's conversation, which the client did not write",
	"model":    "the client names its model in every request (and the proxy keys its sessions by it): a model stored here would disagree with what is sent",
}

// ProxyOwnedError is RefuseProxyOwned's refusal: Field ("messages" for an
// append, else the PATCH field) of session ID is the client of the proxy's
// API to write. It unwraps to ErrProxyOwned (so ErrConflict).
type ProxyOwnedError struct {
	ID, API, Field string
}

// Error says what was refused, why, and what still works on the session.
func (e *ProxyOwnedError) Error() string {
	msg := fmt.Sprintf("session %q %s (%s API): %s; nothing was stored. Reads, compaction, runs and context_limit work on it; what it sends changes through its agent (docs/proxy.md)", e.ID, proxyOwnedPhrase, e.API, proxyOwnedWhy[e.Field])
	if e.Field == "messages" {
		return msg
	}
	return e.Field + ": " + msg
}

// Unwrap returns ErrProxyOwned.
func (e *ProxyOwnedError) Unwrap() error { return ErrProxyOwned }

// APIError answers conflict, with Field set unless the whole route (an
// append) is refused.
func (e *ProxyOwnedError) APIError(error) *api.Error {
	field := e.Field
	if field == "messages" {
		field = ""
	}
	return &api.Error{Code: api.Conflict, Field: field, Message: e.Error()}
}

// ProxyAPI returns the wire API through which the provider proxy owns
// session id — the LabelProxy label the proxy sets when it creates the
// session: "anthropic", "responses" or "chat" — or "" for a session of
// the daemon API (docs/design.md §10). Labels are fixed at creation, so the
// answer holds for the session's life; it is read from the loaded session
// without the catch-up on the shared log that a write takes (docs/design.md §9),
// so it costs no storage round trip for a session in memory.
// Errors: ErrInvalid (a bad id), ErrNotFound.
func (e *Engine) ProxyAPI(ctx context.Context, id string) (string, error) {
	s, err := e.session(ctx, id)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.meta.Labels[LabelProxy], nil
}

// RefuseProxyOwned returns a *ProxyOwnedError when session id belongs to
// the provider proxy: field ("messages" for an append, else a Patch field
// ProxyOwnedField names) is its client's to write, never the daemon API's.
// nil for a session of the daemon API; ErrInvalid or ErrNotFound when the
// session cannot be read.
func (e *Engine) RefuseProxyOwned(ctx context.Context, id, field string) error {
	proxied, err := e.ProxyAPI(ctx, id)
	if err != nil || proxied == "" {
		return err
	}
	return &ProxyOwnedError{ID: id, API: proxied, Field: field}
}

// ProxyOwnedField names the first field of p that only a proxied
// session's client may change ("system", "tools", "pinned", "model"), ""
// when there is none (context_limit is the daemon's policy).
func ProxyOwnedField(p Patch) string {
	switch {
	case p.System != nil:
		return "system"
	case p.Tools != nil:
		return "tools"
	case p.Pinned != nil:
		return "pinned"
	case p.Model != nil:
		return "model"
	}
	return ""
}

// ErrReservedForProxy: a session created through the daemon API under an
// id or a label only the proxy gives (ReservedForProxy). It wraps
// ErrInvalid.
var ErrReservedForProxy = fmt.Errorf("%w: reserved for the proxy", ErrInvalid)

// ReservedForProxy refuses, for a session created through the daemon API,
// what marks a session as the proxy's: the LabelProxy label (field
// "labels.proxy") and an id beginning ProxyIDPrefix, which the proxy may
// later derive for one of its conversations (field "id"): a daemon-API
// session under either would be taken for the client's recorded history,
// and its messages sent upstream with the client's credential. The error
// is a *FieldError wrapping ErrReservedForProxy; nil when neither is used.
func ReservedForProxy(id string, labels map[string]string) error {
	if _, ok := labels[LabelProxy]; ok {
		field := "labels." + LabelProxy
		return &FieldError{Field: field, Err: reservedErr{"reserved: the proxy sets it on the sessions it creates, whose history belongs to its client (docs/design.md §10); choose another label name"}}
	}
	if strings.HasPrefix(id, ProxyIDPrefix) {
		return &FieldError{Field: "id", Err: reservedErr{fmt.Sprintf("%q: ids beginning %q are reserved for the sessions the proxy creates; choose another id", id, ProxyIDPrefix)}}
	}
	return nil
}

// reservedErr is the cause of ReservedForProxy's FieldError: its text
// without the sentinel's, unwrapping to ErrReservedForProxy.
type reservedErr struct{ msg string }

func (r reservedErr) Error() string { return r.msg }
func (r reservedErr) Unwrap() error { return ErrReservedForProxy }

// proxiedSessions calls fn with each stored proxied session (LabelProxy),
// a page at a time. Errors: the listing's.
func (e *Engine) proxiedSessions(ctx context.Context, fn func(Info)) error {
	after := ""
	for {
		page, next, err := e.ListSessionPage(ctx, after, 1000)
		if err != nil {
			return err
		}
		for _, in := range page {
			if in.Labels[LabelProxy] != "" {
				fn(in)
			}
		}
		if next == "" {
			return nil
		}
		after = next
	}
}

// ProxiedQuotas lists the stored proxied sessions with their credential
// hash and bytes (estimated tokens times 4): the seed of the proxy's
// quota.Table. Errors: the listing's.
func (e *Engine) ProxiedQuotas(ctx context.Context) ([]quota.Stored, error) {
	var all []quota.Stored
	err := e.proxiedSessions(ctx, func(in Info) {
		if c := in.Labels[LabelCredential]; c != "" {
			all = append(all, quota.Stored{ID: in.ID, Credential: c, Bytes: in.Tokens * 4})
		}
	})
	return all, err
}

// ExpirableProxied lists the stored proxied sessions an expiry at cut
// deletes (quota.Expirable: idle since before cut, but for the parents of
// a fork that stays). Errors: the listing's.
func (e *Engine) ExpirableProxied(ctx context.Context, cut time.Time) ([]string, error) {
	var all []quota.Activity
	if err := e.proxiedSessions(ctx, func(in Info) {
		all = append(all, quota.Activity{ID: in.ID, Updated: in.Updated, Inherits: in.Labels[LabelInherits]})
	}); err != nil {
		return nil, err
	}
	return quota.Expirable(all, cut), nil
}
