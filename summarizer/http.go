package summarizer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-retryablehttp"
)

// maxResponseBytes bounds what is read of a provider's response. A summary
// is at most 2 MiB (max_summary_bytes ≤ 2097152) and JSON escaping can
// double it; anything larger is not a summary we could commit.
const maxResponseBytes = 8 << 20

// slogAdapter makes a *slog.Logger a retryablehttp.LeveledLogger. The
// library logs "request failed" at error level for every failed try,
// including ones it is about to retry; those are warnings here, because the
// summarizer reports the binding's final outcome itself. retryablehttp logs
// only the method and the URL (with its password redacted); no header, so
// never the API key.
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Error(msg string, kv ...any) { a.l.Warn(msg, kv...) }
func (a slogAdapter) Info(msg string, kv ...any)  { a.l.Info(msg, kv...) }
func (a slogAdapter) Debug(msg string, kv ...any) { a.l.Debug(msg, kv...) }
func (a slogAdapter) Warn(msg string, kv ...any)  { a.l.Warn(msg, kv...) }

// triesKey is the context key of the per-call HTTP try counter.
type triesKey struct{}

// newRetryClient builds the go-retryablehttp client of a Summarizer
// (STYLE.md habit 7): slog logger, PassthroughErrorHandler so the last
// response reaches us with its body (we classify it), a retry policy on the
// error classes, and a backoff that honors Retry-After.
func newRetryClient(o Options, logger *slog.Logger) *retryablehttp.Client {
	hc := o.HTTPClient
	if hc == nil {
		hc = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	own := *hc
	own.CheckRedirect = sameHostRedirect(hc.CheckRedirect)
	hc = &own
	c := &retryablehttp.Client{
		HTTPClient:   hc,
		Logger:       slogAdapter{logger},
		RetryWaitMin: o.RetryWaitMin,
		RetryWaitMax: o.RetryWaitMax,
		RetryMax:     o.RetryMax,
		CheckRetry:   checkRetry,
		Backoff:      backoff,
		ErrorHandler: retryablehttp.PassthroughErrorHandler,
	}
	c.RequestLogHook = func(_ retryablehttp.Logger, r *http.Request, _ int) {
		if n, ok := r.Context().Value(triesKey{}).(*atomic.Int32); ok {
			n.Add(1)
		}
	}
	return c
}

// checkRetry retries what Classify calls transient — connection errors,
// 408, 429, 5xx, 529 — and nothing else: a context-length or permanent
// failure is answered at once. It never retries once the call's context is
// done, nor when the server's Retry-After asks for a wait beyond the
// deadline (the last response, with its body, is then the answer rather
// than a bare deadline error).
func checkRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return false, ctxErr
	}
	if err != nil {
		// Connection refused, reset, EOF, TLS handshake timeout: transient.
		// A malformed URL or an unsupported scheme is not.
		if strings.Contains(err.Error(), "unsupported protocol scheme") ||
			strings.Contains(err.Error(), "invalid header") || strings.Contains(err.Error(), "another host: not followed") {
			return false, err
		}
		return true, nil
	}
	if resp.StatusCode < 400 {
		return false, nil
	}
	body := peekBody(resp)
	if Classify(resp.StatusCode, body) != ClassTransient {
		return false, nil
	}
	if wait, ok := retryAfter(resp); ok {
		if dl, has := ctx.Deadline(); has && time.Until(dl) < wait {
			return false, nil
		}
	}
	return true, nil
}

// peekBody reads up to maxResponseBytes of resp's body and puts the bytes
// back, so both the retry policy and the caller can read it.
func peekBody(resp *http.Response) []byte {
	if resp.Body == nil {
		return nil
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return b
}

// backoff waits what the server's Retry-After asks for — including
// Retry-After: 0, an immediate retry — and otherwise min·2^attempt, capped
// at max.
func backoff(min, max time.Duration, attempt int, resp *http.Response) time.Duration {
	if wait, ok := retryAfter(resp); ok {
		return wait
	}
	wait := min
	for i := 0; i < attempt && wait < max; i++ {
		wait *= 2
	}
	if wait > max {
		wait = max
	}
	return wait
}

// retryAfter parses the Retry-After header of resp: delay-seconds (0
// included) or an HTTP date. A date in the past means no wait.
func retryAfter(resp *http.Response) (time.Duration, bool) {
	if resp == nil {
		return 0, false
	}
	v := strings.TrimSpace(resp.Header.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		return time.Duration(secs) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		d := time.Until(t)
		if d < 0 {
			d = 0
		}
		return d, true
	}
	return 0, false
}

// httpResult is the outcome of one provider call over HTTP: the final
// response's status and body, or an error when no response arrived.
type httpResult struct {
	status int
	body   []byte
	tries  int
}

// post sends body as JSON to url with headers, retrying transient failures,
// all within ctx (which carries the call's deadline). It returns the final
// response whatever its status; an error only when no response arrived
// (connection failure, deadline) — the caller classifies both.
func (s *Summarizer) post(ctx context.Context, url string, headers http.Header, body []byte) (httpResult, error) {
	var tries atomic.Int32
	ctx = context.WithValue(ctx, triesKey{}, &tries)
	req, err := retryablehttp.NewRequestWithContext(ctx, http.MethodPost, url, body)
	if err != nil {
		return httpResult{}, err
	}
	for k, vs := range headers {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	res := httpResult{tries: int(tries.Load())}
	if err != nil {
		if resp != nil && resp.Body != nil {
			_ = resp.Body.Close()
		}
		// Prefer the context's own error: it says deadline or cancel.
		if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
			err = errors.Join(ctxErr, err)
		}
		return res, err
	}
	defer resp.Body.Close()
	res.status = resp.StatusCode
	res.body, err = io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return res, err
	}
	return res, nil
}

// sameHostRedirect follows a redirect only to the host (and scheme) of the
// original request: a summarizer request carries a key (x-api-key, which
// net/http does not drop on a host change) and the conversation, and a
// 307 would send both to wherever the upstream points. Then next (the
// caller's policy, or net/http's 10-redirect limit) decides.
func sameHostRedirect(next func(*http.Request, []*http.Request) error) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		first := via[0].URL
		if req.URL.Host != first.Host || req.URL.Scheme != first.Scheme {
			return fmt.Errorf("the summarizer endpoint %s redirected to %s://%s, another host: not followed (it would receive the key and the conversation)", first.Host, req.URL.Scheme, req.URL.Host)
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
}
