package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/ctxd/ctxd/engine"
)

// readBody reads a managed request's body, at most limit bytes. With a
// Content-Length it reads into buffers from the pools of their size
// classes (getBodyBuf; io.ReadAll would allocate and zero new ones),
// doubling as the bytes arrive up to that length: a client that announces
// a large body and sends it slowly holds at most twice what it sent, not
// what it announced. The caller releases the returned *bodyBuf (nil when
// not pooled) when the request is done.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *bodyBuf, error) {
	rd := http.MaxBytesReader(w, r.Body, limit)
	n := r.ContentLength
	if n <= 0 || n > limit {
		b, err := io.ReadAll(rd)
		return b, nil, err
	}
	var (
		bb  *bodyBuf
		buf []byte
		got int
	)
	for size := min(int(n), firstBodyChunk); ; size = min(2*size, int(n)) {
		nbb := getBodyBuf(size)
		var nbuf []byte
		if nbb != nil {
			nbuf = nbb.b
		} else {
			nbuf = make([]byte, size)
		}
		copy(nbuf, buf[:got])
		bb.release()
		bb, buf = nbb, nbuf
		k, err := io.ReadFull(rd, buf[got:])
		got += k
		if err != nil {
			bb.release()
			return nil, nil, err
		}
		if size == int(n) {
			break
		}
	}
	// A body longer than its Content-Length (the server refuses one; a
	// handler called directly may not): the rest too.
	var one [1]byte
	if k, _ := io.ReadFull(rd, one[:]); k == 1 {
		rest, err := io.ReadAll(rd)
		body := append(append(append(make([]byte, 0, len(buf)+1+len(rest)), buf...), one[0]), rest...)
		bb.release()
		return body, nil, err
	}
	return buf, bb, nil
}

// firstBodyChunk is the first buffer readBody reads a body into, in bytes.
const firstBodyChunk = 256 << 10

// clientBody is the client's body as it came, for the upstream.
func (r *request) clientBody() *outBody {
	return &outBody{parts: [][]byte{r.body}, n: len(r.body), buf: r.buf}
}

// passThrough forwards the client's request untouched (body, nil: as it
// came); outcome is its MetricRequests outcome.
func (p *Proxy) passThrough(w http.ResponseWriter, r *http.Request, body *outBody, outcome, diag string) {
	p.passed.Add(1)
	p.m.request(dialectOf(r), outcome)
	w.Header().Set(HeaderDiagnostic, headerSafe(diag))
	p.forward(w, r, &exchange{body: body, d: dialectOf(r), fp: fingerprint(p.secret, r.Header)})
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

// hasCredential reports whether h carries a credential for the upstream
// (x-api-key or Authorization).
func hasCredential(h http.Header) bool {
	return strings.TrimSpace(h.Get("X-Api-Key")) != "" || strings.TrimSpace(h.Get("Authorization")) != ""
}
