package proxy

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/internal/bodybuf"
	"github.com/ctxd/ctxd/trigger"
)

// recoverOverflow is the overflow recovery (docs/design.md §10): the
// provider's figures go to the session (its count corrects the estimate, a
// window it names is learned), then an overflow compaction, and the
// request is retried once — only when it is now under the window by the
// provider's count with a margin (trigger.OverflowMargin); otherwise a deeper
// compaction that retains nothing, and if even that leaves it over, no
// retry. True when the retry is ready (x carries it); false when none is to be
// sent: the attempt loop then passes the
// provider's error on, with a Ctxd-Diagnostic saying why
// (docs/decisions.md "Overflow recovery retries only what fits").
func (p *Proxy) recoverOverflow(w http.ResponseWriter, r *http.Request, x *exchange) bool {
	ctx, pl, req := r.Context(), x.pl, x.req
	count, limit := req.d.ContextLengthFigures(x.ovBody)
	if _, err := p.eng.ObserveOverflow(ctx, pl.b.id, engine.Overflow{Count: count, Limit: limit}); err != nil {
		p.log.Warn("recording the overflow's figures", "session", pl.b.id, "err", err)
	}
	before := pl.tokens
	fail := func(why string) bool {
		p.log.Warn("overflow not retried; the provider's error goes to the client", "session", pl.b.id, "why", why)
		w.Header().Set(HeaderDiagnostic, headerSafe("overflow not recovered: "+why))
		p.m.Overflow(apiLabel(req.d), false)
		return false
	}
	var (
		out  *bodybuf.Body
		diag string
	)
	for pass := 0; ; pass++ {
		var err error
		if pass == 0 {
			_, err = p.eng.Compact(ctx, pl.b.id, trigger.Overflow, true)
		} else {
			_, err = p.eng.CompactDeeper(ctx, pl.b.id)
		}
		// A stalled compaction wrote its checkpoint: whether the retry
		// fits is the test below.
		if err != nil && !errors.Is(err, engine.ErrStalled) && (pass == 0 || !errors.Is(err, engine.ErrNothingToCompact)) {
			return fail("the overflow compaction failed: " + err.Error())
		}
		if out, diag, err = p.assemble(ctx, pl, req); err != nil {
			return fail("the retry could not be built: " + err.Error())
		}
		target, of := trigger.OverflowTarget(pl.limit, count, before)
		if pl.tokens <= target {
			break
		}
		if pass == 1 {
			return fail(fmt.Sprintf("after the overflow compaction the request is still %d tokens by the provider's count, over %s: a retry would be refused again", pl.tokens, of))
		}
	}
	pl.out = out
	x.body, x.retried, x.overflow = out, true, nil
	if diag != "" {
		w.Header().Set(HeaderDiagnostic, headerSafe(diag))
	}
	p.m.Overflow(apiLabel(req.d), true)
	// Sent again by the attempt loop; counted recovered or failed by
	// modifyResponse when the retry's answer arrives.
	return true
}
