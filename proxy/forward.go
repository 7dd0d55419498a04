package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"time"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/clientcred"
	"github.com/ctxd/ctxd/internal/bodybuf"
	"github.com/ctxd/ctxd/internal/netlimit"
	"github.com/ctxd/ctxd/wire"
)

// maxAnswerBytes caps what the proxy keeps of a non-streamed answer to read
// it (the client gets every byte regardless).
const maxAnswerBytes = 32 << 20

// maxErrorBytes caps an upstream error body read before it is passed on.
const maxErrorBytes = 1 << 20

// exchange is one client request's state through the reverse proxy.
type exchange struct {
	// pl and req, for a managed request (nil otherwise): its plan, whose
	// answer is read on its way, and the client's request.
	pl  *plan
	req *request
	// body is the outgoing body (the plan's, but the client's in observe
	// mode); nil forwards the client's as it came.
	body *bodybuf.Body
	// retried: the overflow retry is under way; no second recovery.
	retried bool
	// timed: the added latency was observed (at the first send).
	timed bool
	// recoverable: a managed request whose refusal before the first byte
	// (an overflow, or the provider's compaction refused) the attempt loop
	// recovers once (serveManaged); refused is that refusal, set by the
	// error handler for the loop (errOverflow or errServerRefused).
	recoverable bool
	refused     error

	// refusal says why the upstream refused the provider's compaction
	// (servershape.go).
	refusal string

	// fp is the fingerprint of the client's credential; accepted is set
	// once the upstream answered under 300 (the first byte of an answer
	// it accepted).
	fp       string
	accepted bool
	// onAccept, when set, runs once the upstream accepted the request
	// (the request's staged record is committed then, trail.go).
	onAccept func()
	// sessionID, when set, is the new branch's session, named on the
	// answer (HeaderSessionID) only when the upstream accepts the request.
	sessionID string

	// d is the dialect of the endpoint (nil: not a managed endpoint).
	d dialect

	// What came back.
	status   int
	stream   wire.AnswerReader
	buf      *bodybuf.Capped
	errBody  []byte
	overflow *http.Response
	ovBody   []byte
}

// forward sends r upstream once through a reverse proxy whose hooks carry
// x, the request's state, as a plain value (not in the request's
// context): rewrite, modifyResponse and errorHandler read and set it.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, x *exchange) {
	rp := &httputil.ReverseProxy{
		Rewrite:        func(pr *httputil.ProxyRequest) { p.rewrite(pr, x) },
		Transport:      p.transport,
		FlushInterval:  -1,
		ModifyResponse: func(resp *http.Response) error { return p.modifyResponse(resp, x) },
		ErrorHandler:   func(w http.ResponseWriter, r *http.Request, err error) { p.errorHandler(w, r, err, x) },
		ErrorLog:       p.errLog,
	}
	rp.ServeHTTP(w, r)
}

// errOverflow: the upstream refused a managed request as too long for the
// context window, before any byte reached the client.
var errOverflow = errors.New("upstream context-length refusal")

// errServerRefused: the upstream refused the provider's compaction ctxd
// added (shape server), before any byte reached the client.
var errServerRefused = errors.New("upstream refused the provider's compaction")

// rewrite directs a request to the upstream (STYLE.md: Rewrite, not
// Director): the upstream URL joined with the client's path and query, the
// upstream's Host, ctxd's own headers removed, and the managed body.
func (p *Proxy) rewrite(pr *httputil.ProxyRequest, x *exchange) {
	pr.SetURL(p.upstreamFor(pr.In))
	// Every X-Ctxd-* header is ctxd's (docs/proxy.md), not the provider's.
	for k := range pr.Out.Header {
		if strings.HasPrefix(k, "X-Ctxd-") {
			pr.Out.Header.Del(k)
		}
	}
	if !x.timed {
		// The first send (an overflow retry is not ctxd's added time).
		x.timed = true
		if t, ok := pr.In.Context().Value(startKey{}).(time.Time); ok {
			p.m.AddedLatency(apiLabel(dialectOf(pr.In)), time.Since(t))
		}
	}
	if x.pl != nil {
		// The answer is read on its way: ask for it unencoded (the
		// transport still negotiates gzip itself, and decodes it).
		pr.Out.Header.Del("Accept-Encoding")
	}
	if x.pl != nil && x.pl.beta != "" {
		x.d.WithBeta(pr.Out.Header, x.pl.beta)
	}
	if x.body != nil {
		body := x.body
		rd, err := body.Reader()
		if err != nil {
			// Not reached: the body's buffer is held while the request is
			// served. The transport fails the request on this reader.
			rd = bodybuf.Gone()
		}
		pr.Out.Body = rd
		pr.Out.ContentLength = int64(body.Len())
		pr.Out.Header.Set("Content-Length", strconv.Itoa(body.Len()))
		pr.Out.GetBody = body.Reader
	}
}

// modifyResponse sees the upstream's answer before any byte of it reaches
// the client: a context-length refusal of a managed request becomes
// errOverflow (recovered by the error handler); a success is read through
// a tee as it passes.
func (p *Proxy) modifyResponse(resp *http.Response, x *exchange) error {
	d := x.d
	p.m.Upstream(apiLabel(d), resp.StatusCode)
	if resp.StatusCode < 300 && !x.accepted {
		x.accepted = true
		if x.onAccept != nil {
			x.onAccept()
		}
	}
	if resp.StatusCode < 300 && x.sessionID != "" {
		resp.Header.Set(HeaderSessionID, x.sessionID)
	}
	if clientcred.Authenticated(resp.StatusCode) {
		p.creds.Accept(x.fp)
	}
	if key, idle := p.streamIdle(x, resp.Request); idle > 0 {
		resp.Body = netlimit.NewIdleBody(resp.Body, idle, key)
	}
	if resp.StatusCode < 300 && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		// Counted as the client reads it (wrapped outermost below).
		defer func() { resp.Body = &countingBody{ReadCloser: resp.Body, add: p.m.Streamed(apiLabel(d))} }()
	}
	if x.pl == nil {
		return nil
	}
	if x.retried && x.refusal == "" && x.recoverable {
		// The overflow retry's answer: recovered only when the upstream
		// accepted it (status counts the overflows recovered); refused
		// again, for any reason, the recovery failed.
		if resp.StatusCode < 300 {
			p.overflows.Add(1)
		} else {
			p.m.Overflow(apiLabel(d), false)
		}
	}
	x.status = resp.StatusCode
	if resp.StatusCode >= 300 {
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
		_ = resp.Body.Close()
		if err != nil {
			return err
		}
		if !x.retried && x.recoverable && x.d.IsContextLength(resp.StatusCode, body) {
			x.overflow, x.ovBody = resp, body
			return errOverflow
		}
		if !x.retried && x.pl.server && x.recoverable {
			if why, ok := x.d.IsServerCompactionRefusal(resp.StatusCode, body); ok {
				x.overflow, x.ovBody, x.refusal = resp, body, why
				return errServerRefused
			}
		}
		x.errBody = body
		resp.Body = io.NopCloser(bytes.NewReader(body))
		resp.ContentLength = int64(len(body))
		resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
		return nil
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		x.stream = x.d.NewAnswerReader(int(p.limits.SSELineBytes))
		resp.Body = x.d.ClientAnswer(&bodybuf.Tee{ReadCloser: resp.Body, W: x.stream}, x.pl.hideUsage)
	} else {
		x.buf = bodybuf.NewCapped(maxAnswerBytes)
		resp.Body = &bodybuf.Tee{ReadCloser: resp.Body, W: x.buf}
	}
	return nil
}

// errorHandler handles what failed before the first byte reached the
// client: a refusal the attempt loop recovers (an overflow, the provider's
// compaction refused) is left to it, the client given nothing yet;
// anything else is the proxy's own 502.
func (p *Proxy) errorHandler(w http.ResponseWriter, r *http.Request, err error, x *exchange) {
	if (errors.Is(err, errOverflow) || errors.Is(err, errServerRefused)) && x.overflow != nil {
		x.refused = err
		return
	}
	if r.Context().Err() != nil {
		return // the client left
	}
	p.m.Upstream(apiLabel(x.d), 0)
	up := p.upstreamFor(r)
	p.log.Warn("upstream request failed", "upstream", up.Host, "path", r.URL.Path, "err", err)
	x.status = http.StatusBadGateway
	errorDialect(r).WriteError(w, http.StatusBadGateway, "api_error", "ctxd proxy: the upstream "+up.Host+" did not answer: "+err.Error())
}

// streamIdle is the stream idle timeout of the upstream that answered
// outReq, and its key.
func (p *Proxy) streamIdle(x *exchange, outReq *http.Request) (string, time.Duration) {
	openai := outReq.URL.Host == p.openai.Host && outReq.URL.Host != p.upstream.Host
	if x.d != nil {
		openai = x.d.Upstream() == "openai"
	}
	if openai {
		return "proxy.upstreams.openai.stream_idle_timeout_ms", time.Duration(p.cfg.Upstreams.OpenAI.StreamIdleTimeoutMS) * time.Millisecond
	}
	return "proxy.upstreams.anthropic.stream_idle_timeout_ms", time.Duration(p.cfg.Upstreams.Anthropic.StreamIdleTimeoutMS) * time.Millisecond
}

// upstreamError is a one-line record of an upstream error: the status and
// the provider's message (error bodies carry no credential; headers are
// never read).
func upstreamError(d dialect, status int, body []byte) string {
	msg := strings.TrimSpace(string(body))
	if e, ok := d.ErrorMessage(body); ok {
		msg = e
	}
	if len(msg) > 300 {
		msg = msg[:300] + "…"
	}
	return fmt.Sprintf("upstream status %d: %s", status, msg)
}

// headerSafe makes s one header line (api.HeaderValue), cut at 500
// bytes.
func headerSafe(s string) string {
	s = api.HeaderValue(s)
	return s[:min(len(s), 500)]
}

// attempt is the attempt loop over the upstream for a managed request (as
// Caddy's reverse proxy retries): the request goes upstream; a refusal
// before the first byte reached the client (x.refused) is recovered once —
// an overflow by an overflow compaction (recoverOverflow), a refusal of
// the provider's compaction by falling back to the summarizer
// (recoverServerShape) — and the request sent again; when no retry could
// be built, the provider's refusal goes to the client as it came. A retry
// is never recovered again (x.retried), so there are at most two sends.
func (p *Proxy) attempt(w http.ResponseWriter, r *http.Request, x *exchange) {
	for {
		x.refused = nil
		p.forward(w, r, x)
		var retry bool
		switch {
		case x.refused == nil:
			return
		case errors.Is(x.refused, errServerRefused):
			retry = p.recoverServerShape(w, r, x)
		case x.pl.cold != nil && !p.warm(r.Context(), x):
			retry = false
		default:
			retry = p.recoverOverflow(w, r, x)
		}
		if !retry {
			h := w.Header()
			for k, v := range x.overflow.Header {
				h[k] = v
			}
			h.Set("Content-Length", strconv.Itoa(len(x.ovBody)))
			w.WriteHeader(x.overflow.StatusCode)
			_, _ = w.Write(x.ovBody)
			x.status, x.errBody = x.overflow.StatusCode, x.ovBody
			return
		}
	}
}
