package proxy

import (
	"context"
	"net/http"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/identity"
)

// A cold first request (docs/design.md §10 "A cold first request goes out
// on an estimate"; docs/decisions.md "A cold first request goes out on an
// estimate") goes upstream as the client sent it, and is recorded, parsed
// and counted only once the upstream accepted it, in the trailing record.

// coldBytes is the least size of a first request's messages, in bytes,
// that goes out on an estimate: under it the full path costs a few
// milliseconds and is kept (the first request is then ctxd's rendering).
const coldBytes = 256 << 10

// coldRequest is what a cold plan keeps to record its conversation after
// the upstream accepted it.
type coldRequest struct {
	l     *lane
	h     http.Header
	agent string
}

// coldPlan returns the plan of req as a cold first request, nil when it
// is not one (a conversation the lane holds, a small request or one of an
// API without a size estimate, or one whose estimate reaches the threshold
// of a credential the upstream accepted: a pre-send compaction may be
// due). The estimate is engine.ColdEstimate's, at the dialect's
// BytesPerToken.
// Errors: the lane's loading, quota.ErrQuota.
func (p *Proxy) coldPlan(ctx context.Context, l *lane, req *request, h http.Header, fp, agent string) (*plan, error) {
	bytesPerToken := req.d.BytesPerToken()
	if bytesPerToken == 0 {
		return nil, nil
	}
	n := 0
	for _, m := range req.Messages {
		n += len(m)
	}
	if n < coldBytes {
		return nil, nil
	}
	if err := p.fresh(ctx, l); err != nil {
		return nil, err
	}
	if len(l.branches) > 0 {
		return nil, nil
	}
	accepted := p.creds.Accepted(fp)
	params := engine.CreateParams{Model: req.Model, Provider: engineProvider(req.d), WireContextLimit: identity.WireContextLimit(h)}
	if w, _ := identity.ContextLimit(h); w > 0 && identity.HasCredential(h) && accepted {
		params.ContextLimit = w
	}
	est, threshold, err := p.eng.ColdEstimate(params, n+len(req.System)+len(req.Tools), bytesPerToken)
	if err != nil {
		return nil, nil // the full path says why
	}
	if est >= threshold && accepted {
		return nil, nil
	}
	if err := p.quota.Check(ctx, p.cfg.Quotas, fp); err != nil {
		return nil, err
	}
	if err := p.quota.Grow(ctx, p.cfg.Quotas, fp, "bytes", uint64(n)); err != nil {
		return nil, err
	}
	pl := &plan{b: &branch{id: engine.ProxySessionID(p.secret, l.key, 0)}, out: req.clientBody(),
		tokens: est, threshold: threshold, cold: &coldRequest{l: l, h: h.Clone(), agent: agent}}
	if w, _ := identity.ContextLimit(h); w > 0 && !identity.HasCredential(h) {
		pl.diag = identity.NoCredentialLimit
	}
	return pl, nil
}

// warm manages a cold request in full (prepare: recorded, staged,
// rendered) in place of pl, for its overflow recovery: the upstream
// refused it as too long. It reports whether it could.
func (p *Proxy) warm(ctx context.Context, x *exchange) bool {
	pl, c := x.pl, x.pl.cold
	full, err := p.prepare(ctx, c.l, x.req, c.h, x.fp, c.agent, false)
	if err != nil {
		p.log.Warn("a cold request refused as too long could not be managed for its retry", "err", err)
		return false
	}
	full.tokens = max(full.tokens, pl.tokens)
	*pl = *full
	if pl.staged != nil {
		x.onAccept = func() { p.commitAsync(pl) }
	}
	return true
}

// recordCold records a cold request the upstream accepted: its
// conversation is parsed, counted and recorded as any first request's
// (prepare without the rendering), and pl becomes that plan, with what
// was sent. It reports whether it was recorded. Called in the trailing
// record, under the lane's lock.
func (p *Proxy) recordCold(ctx context.Context, pl *plan, req *request, fp string) bool {
	c := pl.cold
	full, err := p.prepare(ctx, c.l, req, c.h, fp, c.agent, true)
	if err != nil {
		p.log.Info("a cold request accepted by the upstream is not recorded", "err", err)
		return false
	}
	if _, err := p.mode(ctx, full.b.id, c.h); err != nil {
		p.log.Warn("setting a cold request's mode", "session", full.b.id, "err", err)
	}
	full.out, full.observe, full.threshold = pl.out, pl.observe, pl.threshold
	if info, err := p.eng.Session(ctx, full.b.id); err == nil {
		full.limit, full.threshold = info.ContextLimit, info.Threshold
	}
	*pl = *full
	return true
}
