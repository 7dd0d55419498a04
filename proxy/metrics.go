package proxy

import (
	"errors"
	"io"
	"time"
)

// Metrics receives the proxy's measures, served on the daemon's GET
// /metrics (docs/operating.md; server.ProxyMetrics is the daemon's). api
// is a dialect's name, or "other" for an endpoint ctxd does not manage
// (apiLabel).
type Metrics interface {
	// Request counts a request by its outcome (the outcome* constants).
	Request(api, outcome string)
	// Upstream counts an upstream answer of status (0: none came).
	Upstream(api string, status int)
	// Overflow counts an overflow recovery: retried (compacted and sent
	// again), or failed (the provider's error went to the client).
	Overflow(api string, retried bool)
	// Streamed returns the count of the bytes of streamed answers passed
	// to clients.
	Streamed(api string) func(n int)
	// AddedLatency observes the time ctxd added before a request left for
	// the upstream (an overflow retry's not counted).
	AddedLatency(api string, d time.Duration)
}

// Request outcomes (Metrics.Request).
const (
	outcomeManaged       = "managed"
	outcomePassedThrough = "passed_through"
	// outcomeClientRule: the client's new messages broke docs/design.md
	// §4a; sent after ctxd's context as written, not recorded.
	outcomeClientRule = "client_rule"
	// outcomeViolation: ctxd's context broke it; the client's request
	// went instead.
	outcomeViolation = "violation"
	outcomeRefused   = "refused"
	// outcomeUpgradeDeclined: a protocol upgrade (WebSocket) declined with
	// 426 so that the client uses HTTP.
	outcomeUpgradeDeclined = "upgrade_declined"
)

// errViolation: the assembled context breaks docs/design.md §4a; it is never
// sent.
var errViolation = errors.New("the assembled context breaks docs/design.md §4a, not sent")

// errClientRule: the client's own request breaks docs/design.md §4a. It is
// forwarded as sent (the provider judges it) and is not a ctxd violation.
var errClientRule = errors.New("the client's own request breaks docs/design.md §4a; forwarded as sent for the provider to judge")

// noMetrics is the Metrics of a proxy given none.
type noMetrics struct{}

func (noMetrics) Request(string, string)             {}
func (noMetrics) Upstream(string, int)               {}
func (noMetrics) Overflow(string, bool)              {}
func (noMetrics) Streamed(string) func(int)          { return func(int) {} }
func (noMetrics) AddedLatency(string, time.Duration) {}

// apiLabel is the api label of a dialect (nil: an endpoint ctxd does not
// manage).
func apiLabel(d dialect) string {
	if d == nil {
		return "other"
	}
	return d.Name()
}

// countingBody counts the bytes read through it.
type countingBody struct {
	io.ReadCloser
	add func(n int)
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.add(n)
	}
	return n, err
}
