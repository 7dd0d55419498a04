package proxy

import (
	"net/http"

	"github.com/ctxd/ctxd/identity"
	"github.com/ctxd/ctxd/internal/bodybuf"
)

// clientBody is the client's body as it came, for the upstream.
func (r *request) clientBody() *bodybuf.Body {
	return bodybuf.Pooled(r.body, r.buf)
}

// passThrough forwards the client's request untouched (body, nil: as it
// came); outcome is its Metrics.Request outcome, diag its diagnostic
// ("": none).
func (p *Proxy) passThrough(w http.ResponseWriter, r *http.Request, body *bodybuf.Body, outcome, diag string) {
	p.passed.Add(1)
	p.m.Request(apiLabel(dialectOf(r)), outcome)
	if diag != "" {
		w.Header().Set(HeaderDiagnostic, headerSafe(diag))
	}
	p.forward(w, r, &exchange{body: body, d: dialectOf(r), fp: identity.Fingerprint(p.secret, r.Header)})
}
