package proxy

import (
	"errors"
	"io"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names of the proxy, served on the daemon's GET /metrics beside the
// engine's (docs/operating.md). Labels are bounded: api is "anthropic",
// "responses", "chat" or "other" (an endpoint ctxd does not manage);
// outcome and class are fixed sets. No session id, model or credential is
// a label (docs/design.md §8).
const (
	// MetricRequests counts proxy requests by api and outcome: managed,
	// passed_through (forwarded untouched), client_rule (the client's new
	// messages broke docs/design.md §4a; sent after ctxd's context as
	// written, not recorded), violation (ctxd's
	// assembled context broke it; the client's request went instead),
	// refused (Origin, Referer or a foreign Host; a body too large),
	// upgrade_declined (a WebSocket upgrade answered 426: the client
	// uses HTTP).
	MetricRequests = "ctxd_proxy_requests_total"
	// MetricUpstream counts upstream answers by api and status class: 2xx,
	// 3xx, 4xx, 5xx, or error (no answer: connection, timeout).
	MetricUpstream = "ctxd_proxy_upstream_responses_total"
	// MetricOverflowRetries counts overflow recoveries by api and outcome:
	// retried (compacted and sent again) or failed (the provider's error
	// went to the client); a retry refused again counts both.
	MetricOverflowRetries = "ctxd_proxy_overflow_retries_total"
	// MetricStreamedBytes counts the bytes of streamed (SSE) answers passed
	// to clients, by api.
	MetricStreamedBytes = "ctxd_proxy_streamed_bytes_total"
	// MetricAddedLatency is the time ctxd adds before a request leaves for
	// the upstream (reading, matching, recording, a pre-send compaction,
	// rendering), by api, in seconds.
	MetricAddedLatency = "ctxd_proxy_added_latency_seconds"
)

// Request outcomes (MetricRequests).
const (
	outcomeManaged       = "managed"
	outcomePassedThrough = "passed_through"
	outcomeClientRule    = "client_rule"
	outcomeViolation     = "violation"
	outcomeRefused       = "refused"
	// outcomeUpgradeDeclined: a protocol upgrade (WebSocket) declined with
	// 426 so that the client uses HTTP.
	outcomeUpgradeDeclined = "upgrade_declined"
)

// metrics are the proxy's collectors.
type metrics struct {
	requests  *prometheus.CounterVec
	upstream  *prometheus.CounterVec
	overflows *prometheus.CounterVec
	streamed  *prometheus.CounterVec
	added     *prometheus.HistogramVec
}

// newMetrics makes the collectors and registers them on reg (nil: not
// registered). A collector already registered (a second proxy on the same
// registry) is shared.
func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricRequests, Help: "Provider proxy requests by api and outcome (managed, passed_through, client_rule, violation, refused, upgrade_declined).",
		}, []string{"api", "outcome"}),
		upstream: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricUpstream, Help: "Upstream provider answers by api and status class (2xx, 3xx, 4xx, 5xx, error: no answer).",
		}, []string{"api", "class"}),
		overflows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricOverflowRetries, Help: "Upstream context-length refusals by api and outcome (retried after an overflow compaction, failed: the provider's error went to the client).",
		}, []string{"api", "outcome"}),
		streamed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricStreamedBytes, Help: "Bytes of streamed (SSE) answers passed to clients, by api.",
		}, []string{"api"}),
		added: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricAddedLatency,
			Help:    "Time ctxd adds before a request leaves for the upstream (matching, recording, pre-send compaction, rendering), by api, in seconds.",
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 30, 180},
		}, []string{"api"}),
	}
	if reg == nil {
		return m
	}
	register := func(c prometheus.Collector) prometheus.Collector {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return are.ExistingCollector
			}
		}
		return c
	}
	m.requests = register(m.requests).(*prometheus.CounterVec)
	m.upstream = register(m.upstream).(*prometheus.CounterVec)
	m.overflows = register(m.overflows).(*prometheus.CounterVec)
	m.streamed = register(m.streamed).(*prometheus.CounterVec)
	m.added = register(m.added).(*prometheus.HistogramVec)
	return m
}

// apiLabel is the api label of a dialect (nil: an endpoint ctxd does not
// manage).
func apiLabel(d dialect) string {
	if d == nil {
		return "other"
	}
	return d.Name()
}

func (m *metrics) request(d dialect, outcome string) {
	m.requests.WithLabelValues(apiLabel(d), outcome).Inc()
}

// upstreamStatus counts an upstream answer of status (0: none came).
func (m *metrics) upstreamStatus(d dialect, status int) {
	class := "error"
	if status >= 100 && status < 600 {
		class = strconv.Itoa(status/100) + "xx"
	}
	m.upstream.WithLabelValues(apiLabel(d), class).Inc()
}

func (m *metrics) overflow(d dialect, retried bool) {
	outcome := "failed"
	if retried {
		outcome = "retried"
	}
	m.overflows.WithLabelValues(apiLabel(d), outcome).Inc()
}

func (m *metrics) addedLatency(d dialect, since time.Time) {
	m.added.WithLabelValues(apiLabel(d)).Observe(time.Since(since).Seconds())
}

// countingBody counts the bytes read through it on c.
type countingBody struct {
	io.ReadCloser
	c prometheus.Counter
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.c.Add(float64(n))
	}
	return n, err
}
