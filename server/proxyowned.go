package server

import (
	"context"
	"fmt"
	"strings"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/engine"
)

// proxyOwned is the phrase every refusal of a write to a proxied session
// says (docs/api.md "Proxied sessions"): such a
// session's history, system prompt, tools and model are its client's,
// which resends them with every request (docs/design.md §10).
const proxyOwned = "is owned by the proxy"

// proxyOwnedWhy says, per field the daemon API may not write on a proxied
// session, why: what the proxy sends in its place.
var proxyOwnedWhy = map[string]string{
	"messages": "its client resends its whole history with every request and the proxy records only what the client sends: a message appended here would reach the provider between the recorded answer and the client's next message",
	"system":   "the proxy sends the client's own system prompt with every request: one stored here would disagree with what is sent",
	"tools":    "the proxy sends the client's own tool definitions with every request: ones stored here would disagree with what is sent",
	"pinned":   "pinned context would be sent to the provider inside the client's conversation, which the client did not write",
	"model":    "the client names its model in every request (and the proxy keys its sessions by it): a model stored here would disagree with what is sent",
}

// refuseProxyOwned returns a conflict when session id belongs to the
// provider proxy (engine.ProxyAPI): field ("messages" for an append, else
// the PATCH field) is its client's to write, never the daemon API's. nil
// for a session of the daemon API; the engine's error (not_found, invalid)
// when the session cannot be read.
func (s *Server) refuseProxyOwned(ctx context.Context, id, field string) error {
	proxied, err := s.eng.ProxyAPI(ctx, id)
	if err != nil || proxied == "" {
		return err
	}
	msg := fmt.Sprintf("session %q %s (%s API): %s; nothing was stored. Reads, compaction, runs and context_limit work on it; what it sends changes through its agent (docs/proxy.md)", id, proxyOwned, proxied, proxyOwnedWhy[field])
	if field == "messages" {
		// The whole route is refused, not one field of the body.
		return api.Errorf(api.Conflict, "", "%s", msg)
	}
	return api.Errorf(api.Conflict, field, "%s: %s", field, msg)
}

// patchOwnedField names the first field of req that only a proxied
// session's client may change (system, tools, pinned, model), "" when
// there is none (context_limit is the daemon's policy).
func patchOwnedField(req api.PatchSessionRequest) string {
	switch {
	case req.System != nil:
		return "system"
	case req.Tools != nil:
		return "tools"
	case req.Pinned != nil:
		return "pinned"
	case req.Model != nil:
		return "model"
	}
	return ""
}

// reservedLabel refuses, on a session created through the daemon API, the
// label that marks a session as the proxy's (engine.LabelProxy): only the
// proxy sets it, on the sessions it creates.
func reservedLabel(labels map[string]string) error {
	if _, ok := labels[engine.LabelProxy]; !ok {
		return nil
	}
	field := "labels." + engine.LabelProxy
	return api.Errorf(api.Invalid, field, "%s: reserved: the proxy sets it on the sessions it creates, whose history belongs to its client (docs/design.md §10); choose another label name", field)
}

// ProxyIDPrefix begins the id of every session the provider proxy creates
// ("p-" and a keyed digest, then "-b<k>" for a branch; proxy/identity.go).
const ProxyIDPrefix = "p-"

// reservedID refuses a session id the proxy may later derive for one of its
// conversations: a daemon-API session created under it would be taken for
// the client's recorded history, and its messages sent upstream with the
// client's credential (docs/design.md §10). Error: invalid, field id.
func reservedID(id string) error {
	if !strings.HasPrefix(id, ProxyIDPrefix) {
		return nil
	}
	return api.Errorf(api.Invalid, "id", "id: %q: ids beginning %q are reserved for the sessions the proxy creates; choose another id", id, ProxyIDPrefix)
}
