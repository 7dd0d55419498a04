package proxy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/ledger"
)

// HeaderMode sets the proxy mode of the request's session ("enforce" or
// "observe", docs/design.md §10); the session keeps it for later requests.
const HeaderMode = "X-Ctxd-Mode"

// cacheRequest is body as the prompt cache sees it (ledger.Request), read
// by the dialect, and the cache lifetime it asks for, in seconds, for idle
// compaction (docs/design.md §5.1; wire.CacheView).
func cacheRequest(d dialect, body []byte, model string) (ledger.Request, uint64, error) {
	v, err := d.CacheView(body)
	return ledger.Request{Model: model, Elements: v.Elements, LastMarker: v.LastMarker, LongTTL: v.LongTTL}, v.Lifetime, err
}

// mode is the request's proxy mode: X-Ctxd-Mode, which the session then
// keeps, else the session's own, else [proxy] mode. Errors: a header value
// that is not a mode (naming the header).
func (p *Proxy) mode(ctx context.Context, id string, h http.Header) (string, error) {
	own, err := p.eng.Mode(ctx, id)
	if err != nil {
		return "", err
	}
	v := h.Get(HeaderMode)
	m, err := p.modeOf(v, own)
	if err == nil && v != "" && v != own {
		err = p.eng.SetMode(ctx, id, v)
	}
	if err != nil {
		return "", err
	}
	return m, nil
}

// modeOf is the mode of a request whose HeaderMode value is v ("" when
// absent) of a session whose own mode is own ("" when none): v, else own,
// else [proxy] mode. Errors: v is not a mode (naming the header).
func (p *Proxy) modeOf(v, own string) (string, error) {
	switch {
	case v == ledger.ModeEnforce || v == ledger.ModeObserve:
		return v, nil
	case v != "":
		return "", fmt.Errorf("%s: %q is not a mode: send %q or %q", HeaderMode, v, ledger.ModeEnforce, ledger.ModeObserve)
	case own != "":
		return own, nil
	case p.cfg.Mode == ledger.ModeObserve:
		return ledger.ModeObserve, nil
	}
	return ledger.ModeEnforce, nil
}

// rewritesSince lists ctxd's recorded rewrites of the session after seq
// after and up to seq upTo (ledger causes): those in the context a request
// assembled at upTo was sent from. A rewrite recorded later — a
// compaction the request set off, ending before its answer is entered —
// is the next request's.
func (p *Proxy) rewritesSince(ctx context.Context, id string, after, upTo uint64) []string {
	var out []string
	seen := map[string]bool{}
	_ = p.eng.Events(ctx, id, after+1, false, func(ev checkpoint.Event) error {
		if ev.Seq > upTo {
			return errRewritesRead
		}
		c := ledger.RewriteCause(ev.Kind)
		if c != "" && !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
		return nil
	})
	return out
}

// errRewritesRead stops rewritesSince's read at its bound.
var errRewritesRead = errors.New("rewrites read")

// recordLedger enters one answered request in its session's ledger
// (docs/design.md §10): the client's body, ctxd's (sent in enforce mode,
// built but not sent in observe mode), and the usage the provider reported.
// A failure is logged: the ledger never fails a request. cut marks an
// answer whose stream ended early, u then the usage it reported so far
// (ledger.Entry.Cut). It returns the entry, nil when none was entered.
func (p *Proxy) recordLedger(ctx context.Context, pl *plan, req *request, u *history.Usage, cut bool) *ledger.Entry {
	if u == nil || pl.out == nil {
		return nil
	}
	b := pl.b
	now := time.Now().UTC()
	client, _, err := cacheRequest(req.d, req.body, req.model)
	if err != nil {
		p.log.Info("ledger: request not entered", "session", b.id, "err", err)
		return nil
	}
	ctxd, lifetime, err := cacheRequest(req.d, pl.out.Bytes(), req.model)
	if err != nil {
		p.log.Info("ledger: request not entered", "session", b.id, "err", err)
		return nil
	}
	// The rewrites since the previous entry's context, up to this
	// request's (pl.assembledAt; unknown: up to now).
	upTo := pl.assembledAt
	if upTo == 0 {
		upTo = math.MaxUint64
	}
	var rewrites []string
	if b.ledgerSeq > 0 && upTo > b.ledgerSeq {
		rewrites = p.rewritesSince(ctx, b.id, b.ledgerSeq, upTo)
	}
	mode := ledger.ModeEnforce
	if pl.observe {
		mode = ledger.ModeObserve
	}
	en := b.conv.Entry(ledger.Observation{Time: now, Model: req.model, Mode: mode, Client: client, Ctxd: ctxd,
		Reported: ledger.FromHistory(u), Rewrites: rewrites, ContextLimit: pl.limit, Threshold: pl.threshold})
	en.CacheTTLSeconds = lifetime
	en.Cut = cut
	if err := p.eng.RecordLedger(ctx, b.id, en); err != nil {
		p.log.Warn("ledger: request not entered", "session", b.id, "err", err)
		return nil
	}
	if pl.assembledAt > 0 {
		b.ledgerSeq = max(b.ledgerSeq, pl.assembledAt)
	} else if seq, err := p.eng.LastSeq(ctx, b.id); err == nil {
		b.ledgerSeq = seq
	}
	return &en
}

// projectedUsage is an observe-mode entry's projection of ctxd's request as
// the usage the provider would have reported for it: what the answer is
// recorded with, so that the session's post-check and calibration see
// ctxd's context, as they would in enforce mode, not the client's.
func projectedUsage(en *ledger.Entry) *history.Usage {
	c := en.Counterfactual
	return &history.Usage{InputTokens: c.Input, CacheReadInputTokens: c.CacheRead, CacheCreationInputTokens: c.CacheWrite(),
		CacheCreation1hInputTokens: c.CacheWrite1h, OutputTokens: c.Output}
}
