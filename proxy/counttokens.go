package proxy

import (
	"context"
	"net/http"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/identity"
	"github.com/ctxd/ctxd/internal/bodybuf"
	"github.com/ctxd/ctxd/ledger"
	"github.com/ctxd/ctxd/wire"
)

// countTokens serves POST /v1/messages/count_tokens (docs/proxy.md
// "Conformance"): for a conversation ctxd manages, the upstream counts
// what ctxd would send — the context it holds (offloads, stubs, edits,
// compactions), rendered as for the conversation's next request, then the
// client's messages it does not hold yet as the client sent them. It only
// reads: nothing is recorded, staged, compacted or entered in the ledger.
// Any other request (a conversation ctxd does not know, a body it cannot
// read, observe mode) is forwarded as sent.
func (p *Proxy) countTokens(w http.ResponseWriter, r *http.Request) {
	if encodedBody(r) != "" {
		p.passThrough(w, r, nil, outcomePassedThrough, "")
		return
	}
	body, bb, ok := p.readBody(w, r, nil, dialectAnthropic)
	defer bb.Release()
	if !ok {
		return
	}
	fp := identity.Fingerprint(p.secret, r.Header)
	out, id := p.countedBody(r.Context(), r.Header, body, bb, fp)
	if r.Context().Err() != nil {
		return
	}
	if out == nil {
		p.passThrough(w, r, bodybuf.Pooled(body, bb), outcomePassedThrough, "")
		return
	}
	p.m.Request(apiLabel(nil), outcomeManaged)
	w.Header().Set(HeaderSessionID, id)
	p.forward(w, r, &exchange{fp: fp, body: out})
}

// countedBody is the count_tokens body with ctxd's context in place of
// the client's messages, and the session it is of; nil when the request
// is not of a conversation ctxd manages (forwarded as sent). Read only:
// the engine's context without the pre-send check, no append.
func (p *Proxy) countedBody(ctx context.Context, h http.Header, body []byte, bb *bodybuf.Buf, fp string) (*bodybuf.Body, string) {
	req, err := parseBody(body, dialectAnthropic)
	if err != nil || len(req.Messages) == 0 {
		return nil, ""
	}
	req.buf = bb
	agent := identity.AgentSession(h, req.Metadata)
	key := identity.ConversationKey(p.secret, fp, agent, req.Model, req.Tools, req.System, req.Messages)
	p.mu.Lock()
	_, known := p.lanes[key]
	p.mu.Unlock()
	if !known {
		// A conversation this proxy has not served since it started:
		// managed only when a previous run recorded it (no lane is made
		// for a count of a conversation that does not exist).
		if ok, err := p.eng.Exists(ctx, engine.ProxySessionID(p.secret, key, 0)); err != nil || !ok {
			return nil, ""
		}
	}
	l := p.lane(key)
	defer p.release(l)
	if err := l.lock(ctx); err != nil {
		return nil, ""
	}
	defer l.unlock()
	if p.fresh(ctx, l) != nil {
		return nil, ""
	}
	// Without the lane's digest cache: it is the conversation's last
	// request's, which this count must not replace.
	b, from, resend := l.extended(req, wire.Chains(req.Messages, req.d.MatchKey))
	if b == nil {
		return nil, ""
	}
	// Observe mode sends the client's own messages. The header's mode is
	// not recorded on the session, and a value that is not a mode is
	// ignored.
	mode := h.Get(HeaderMode)
	if mode != ledger.ModeEnforce && mode != ledger.ModeObserve {
		own, err := p.eng.Mode(ctx, b.id)
		if err != nil {
			return nil, ""
		}
		mode, _ = p.modeOf("", own)
	}
	if mode == ledger.ModeObserve {
		return nil, ""
	}
	a, err := p.eng.Context(ctx, b.id, engine.ContextOptions{NoPreSend: true})
	if err != nil {
		return nil, ""
	}
	msgs, checked := sendable(a, resend, b)
	// The client's messages ctxd does not hold yet go as the client sent
	// them (recording them, and offloading their tool results, would
	// write).
	out, err := p.render(b, msgs, checked, req, from)
	if err != nil {
		return nil, ""
	}
	return out, b.id
}
