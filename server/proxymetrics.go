package server

import (
	"errors"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names of the provider proxy, served on GET /metrics beside the
// engine's (docs/operating.md). Labels are bounded: api is "anthropic",
// "responses", "chat" or "other" (an endpoint ctxd does not manage);
// outcome and class are fixed sets. No session id, model or credential is
// a label (docs/design.md §8).
const (
	// MetricProxyRequests counts proxy requests by api and outcome:
	// managed, passed_through (forwarded untouched), client_rule (the
	// client's new messages broke docs/design.md §4a; sent after ctxd's
	// context as written, not recorded), violation (ctxd's assembled
	// context broke it; the client's request went instead), refused
	// (Origin, Referer or a foreign Host; a body too large),
	// upgrade_declined (a WebSocket upgrade answered 426: the client uses
	// HTTP).
	MetricProxyRequests = "ctxd_proxy_requests_total"
	// MetricProxyUpstream counts upstream answers by api and status class:
	// 2xx, 3xx, 4xx, 5xx, or error (no answer: connection, timeout).
	MetricProxyUpstream = "ctxd_proxy_upstream_responses_total"
	// MetricProxyOverflowRetries counts overflow recoveries by api and
	// outcome: retried (compacted and sent again) or failed (the
	// provider's error went to the client); a retry refused again counts
	// both.
	MetricProxyOverflowRetries = "ctxd_proxy_overflow_retries_total"
	// MetricProxyStreamedBytes counts the bytes of streamed (SSE) answers
	// passed to clients, by api.
	MetricProxyStreamedBytes = "ctxd_proxy_streamed_bytes_total"
	// MetricProxyAddedLatency is the time ctxd adds before a request
	// leaves for the upstream (reading, matching, recording, a pre-send
	// compaction, rendering), by api, in seconds.
	MetricProxyAddedLatency = "ctxd_proxy_added_latency_seconds"
)

// ProxyMetrics implements proxy.Metrics with Prometheus collectors. Safe
// for concurrent use.
type ProxyMetrics struct {
	requests  *prometheus.CounterVec
	upstream  *prometheus.CounterVec
	overflows *prometheus.CounterVec
	streamed  *prometheus.CounterVec
	added     *prometheus.HistogramVec
}

// NewProxyMetrics makes the proxy's collectors and registers them on reg
// (nil: not registered). A collector already registered (a second proxy on
// the same registry) is shared.
func NewProxyMetrics(reg prometheus.Registerer) *ProxyMetrics {
	m := &ProxyMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricProxyRequests, Help: "Provider proxy requests by api and outcome (managed, passed_through, client_rule, violation, refused, upgrade_declined).",
		}, []string{"api", "outcome"}),
		upstream: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricProxyUpstream, Help: "Upstream provider answers by api and status class (2xx, 3xx, 4xx, 5xx, error: no answer).",
		}, []string{"api", "class"}),
		overflows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricProxyOverflowRetries, Help: "Upstream context-length refusals by api and outcome (retried after an overflow compaction, failed: the provider's error went to the client).",
		}, []string{"api", "outcome"}),
		streamed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricProxyStreamedBytes, Help: "Bytes of streamed (SSE) answers passed to clients, by api.",
		}, []string{"api"}),
		added: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricProxyAddedLatency,
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

// Request counts a proxy request by api and outcome (proxy.Metrics).
func (m *ProxyMetrics) Request(api, outcome string) { m.requests.WithLabelValues(api, outcome).Inc() }

// Upstream counts an upstream answer of status, 0 when none came
// (proxy.Metrics).
func (m *ProxyMetrics) Upstream(api string, status int) {
	class := "error"
	if status >= 100 && status < 600 {
		class = strconv.Itoa(status/100) + "xx"
	}
	m.upstream.WithLabelValues(api, class).Inc()
}

// Overflow counts an overflow recovery, retried or failed (proxy.Metrics).
func (m *ProxyMetrics) Overflow(api string, retried bool) {
	outcome := "failed"
	if retried {
		outcome = "retried"
	}
	m.overflows.WithLabelValues(api, outcome).Inc()
}

// Streamed returns the count of the bytes of api's streamed answers
// (proxy.Metrics).
func (m *ProxyMetrics) Streamed(api string) func(n int) {
	c := m.streamed.WithLabelValues(api)
	return func(n int) { c.Add(float64(n)) }
}

// AddedLatency observes the time ctxd added to a request of api
// (proxy.Metrics).
func (m *ProxyMetrics) AddedLatency(api string, d time.Duration) {
	m.added.WithLabelValues(api).Observe(d.Seconds())
}
