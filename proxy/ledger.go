package proxy

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/ledger"
	"github.com/ctxd/ctxd/wire"
)

// HeaderMode sets the proxy mode of the request's session ("enforce" or
// "observe", docs/design.md §10); the session keeps it for later requests.
const HeaderMode = "X-Ctxd-Mode"

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
	client, err := req.d.CacheView(req.body)
	var ctxd wire.CacheView
	if err == nil {
		ctxd, err = req.d.CacheView(pl.out.Bytes())
	}
	if err != nil {
		p.log.Info("ledger: request not entered", "session", pl.b.id, "err", err)
		return nil
	}
	mode := ledger.ModeEnforce
	if pl.observe {
		mode = ledger.ModeObserve
	}
	en, err := p.eng.RecordRequest(ctx, pl.b.id, &pl.b.conv, ledger.Observation{Time: time.Now().UTC(), Model: req.Model, Mode: mode,
		Client: ledger.RequestOf(req.Model, client), Ctxd: ledger.RequestOf(req.Model, ctxd), Reported: ledger.FromHistory(u),
		ContextLimit: pl.limit, Threshold: pl.threshold, CacheTTLSeconds: ctxd.Lifetime, Cut: cut}, pl.assembledAt)
	if err != nil {
		p.log.Warn("ledger: request not entered", "session", pl.b.id, "err", err)
		return nil
	}
	return &en
}
