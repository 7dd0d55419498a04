package proxy

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/identity"
	"github.com/ctxd/ctxd/internal/bodybuf"
)

// clientBody is the client's body as it came, for the upstream.
func (r *request) clientBody() *bodybuf.Body {
	return bodybuf.Pooled(r.body, r.buf)
}

// passThrough forwards the client's request untouched (body, nil: as it
// came); outcome is its MetricRequests outcome.
func (p *Proxy) passThrough(w http.ResponseWriter, r *http.Request, body *bodybuf.Body, outcome, diag string) {
	p.passed.Add(1)
	p.m.Request(apiLabel(dialectOf(r)), outcome)
	w.Header().Set(HeaderDiagnostic, headerSafe(diag))
	p.forward(w, r, &exchange{body: body, d: dialectOf(r), fp: identity.Fingerprint(p.secret, r.Header)})
}

// contextLimitHeader reads the X-Ctxd-Context-Limit header of h: 0 when
// absent; an error naming the header and the accepted range (tokens,
// engine.MinContextLimit to engine.MaxContextLimit) when it is not a
// whole number in it.
func contextLimitHeader(h http.Header) (uint64, error) {
	vs := h.Values(HeaderContextLimit)
	if len(vs) == 0 {
		return 0, nil
	}
	v := strings.TrimSpace(vs[0])
	n, err := strconv.ParseUint(v, 10, 64)
	if len(vs) > 1 || err != nil || n < engine.MinContextLimit || n > engine.MaxContextLimit {
		return 0, fmt.Errorf("%s: %q is not a context window: give one whole number of tokens from %d to %d", HeaderContextLimit, strings.Join(vs, ", "), engine.MinContextLimit, engine.MaxContextLimit)
	}
	return n, nil
}
