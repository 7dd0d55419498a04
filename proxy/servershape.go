package proxy

import (
	"context"
	"errors"
	"net/http"

	"github.com/ctxd/ctxd/internal/bodybuf"
	"github.com/ctxd/ctxd/wire"
)

// withServerShape adds the provider's compaction (docs/design.md §10,
// shape "server": wire.Dialect.WithServerCompaction) to out, the outgoing
// body, when the engine says it is in effect for the plan's session
// (engine.ServerShape: compaction.shape "server", a model with
// server_compaction, an API that has it, an upstream that did not refuse
// it); the compaction block the provider answers with becomes the
// session's checkpoint. It sets pl.server and pl.beta; out is returned
// unchanged otherwise. An upstream that refuses the parameter makes the
// session fall back to the summarizer (recoverServerShape).
func (p *Proxy) withServerShape(ctx context.Context, pl *plan, req *request, out *bodybuf.Body) *bodybuf.Body {
	pl.server, pl.beta = false, ""
	if pl.noServer || !req.d.ServerCompaction() {
		return out
	}
	sh, err := p.eng.ServerShape(ctx, pl.b.id)
	if err != nil || !sh.Active {
		return out
	}
	next, beta, err := req.d.WithServerCompaction(out.Bytes(), sh.Trigger)
	var below *wire.BelowMinimumError
	if errors.As(err, &below) {
		_ = p.eng.RefuseServerShape(ctx, pl.b.id, err.Error())
		return out
	}
	if err != nil {
		p.log.Warn("shape server: the request's context_management is not one ctxd can extend; sent without the provider's compaction", "session", pl.b.id, "err", err)
		return out
	}
	pl.server, pl.beta = true, beta
	return bodybuf.Of(next)
}

// recoverServerShape answers an upstream refusal of the provider's
// compaction: the session falls back to the summarizer, and the request
// goes once more without it (x carries the retry, the attempt loop sends
// it). False when the retry could not be built.
func (p *Proxy) recoverServerShape(w http.ResponseWriter, r *http.Request, x *exchange) bool {
	ctx, pl, req := r.Context(), x.pl, x.req
	if err := p.eng.RefuseServerShape(ctx, pl.b.id, x.refusal); err != nil {
		return false
	}
	pl.noServer = true
	out, diag, err := p.assemble(ctx, pl, req)
	if err != nil {
		p.log.Warn("retry without the provider's compaction not built", "session", pl.b.id, "err", err)
		return false
	}
	pl.out = out
	x.body, x.retried, x.overflow = out, true, nil
	w.Header().Set(HeaderDiagnostic, headerSafe(joinDiag(diag, "shape server: the upstream refused the provider's compaction; this session falls back to the summarizer")))
	return true
}

// joinDiag is the diagnostics a and b in one ("": none).
func joinDiag(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
