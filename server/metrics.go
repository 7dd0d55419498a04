package server

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ctxd/ctxd/ledger"
)

// Metric names served on GET /metrics (docs/design.md §7). Labels are bounded:
// outcome, binding (configured names), route (the api.Route* pattern, never
// a path with an id) and status code. Session and artifact ids never appear
// in a label (docs/design.md §8).
const (
	MetricAppends        = "ctxd_appended_messages_total"
	MetricCompactions    = "ctxd_compactions_total"
	MetricSummarizer     = "ctxd_summarizer_call_duration_seconds"
	MetricCircuitOpen    = "ctxd_circuit_opened_total"
	MetricProviderRule   = "ctxd_provider_rule_violations_total"
	MetricSessions       = "ctxd_sessions"
	MetricQueueDepth     = "ctxd_compaction_queue_depth"
	MetricQueueCapacity  = "ctxd_compaction_queue_capacity"
	MetricWorkersBusy    = "ctxd_compaction_workers_busy"
	MetricRequests       = "ctxd_http_requests_total"
	MetricRequestSeconds = "ctxd_http_request_duration_seconds"
	MetricBuildInfo      = "ctxd_build_info"
	// MetricOffloadFailed counts tool results kept whole because their
	// offload could not be written (docs/design.md §6).
	MetricOffloadFailed = "ctxd_offload_failed_total"
	// MetricDiskLow is 1 while the file system of a guarded directory
	// (label dir: "data" or "offload") has less free space than
	// storage.min_free_bytes, else 0; MetricDiskFree is its free space in
	// bytes. Read with statfs on each scrape.
	MetricDiskLow  = "ctxd_disk_low"
	MetricDiskFree = "ctxd_disk_free_bytes"

	// The savings ledger's figures (docs/design.md §10), in tokens and US
	// dollars. MetricLedgerRequests counts proxied requests by mode
	// ("enforce", "observe"); MetricTokensSaved the tokens ctxd kept out
	// of enforce-mode requests; MetricCostWithout what those requests
	// would have cost without ctxd and MetricCostPaid what the requests
	// sent cost, by mode (in observe mode the client's own);
	// MetricCostProjected what ctxd's requests would have cost in observe
	// mode; MetricSummarizerCost ctxd's summarizer calls by credential
	// ("client", "daemon"); MetricCostSaved and MetricCostAdded the net
	// saving of each enforce-mode request and summarizer call, split by
	// sign so both stay counters (net = saved − added);
	// MetricCacheWrites the cache writes of ctxd's requests by cause.
	MetricLedgerRequests = "ctxd_ledger_requests_total"
	MetricTokensSaved    = "ctxd_tokens_saved_total"
	MetricCostWithout    = "ctxd_cost_without_ctxd_total"
	MetricCostPaid       = "ctxd_cost_paid_total"
	MetricCostProjected  = "ctxd_cost_projected_total"
	MetricSummarizerCost = "ctxd_summarizer_cost_total"
	MetricCostSaved      = "ctxd_cost_saved_total"
	MetricCostAdded      = "ctxd_cost_added_total"
	MetricCacheWrites    = "ctxd_cache_write_tokens_total"
)

// sessionsScrapeTimeout bounds the session count read on each scrape.
const sessionsScrapeTimeout = 5 * time.Second

// Metrics implements engine.Metrics with Prometheus collectors on a private
// registry (docs/design.md §7 GET /metrics). Create it with NewMetrics before the
// engine, pass it as engine.Options.Metrics and as Options.Metrics. It is
// safe for concurrent use.
type Metrics struct {
	appends     prometheus.Counter
	compactions *prometheus.CounterVec
	summarizer  *prometheus.HistogramVec
	circuit     prometheus.Counter
	rules       *prometheus.CounterVec
	offloadFail prometheus.Counter
	requests    *prometheus.CounterVec
	reqSeconds  *prometheus.HistogramVec

	ledgerRequests *prometheus.CounterVec
	tokensSaved    prometheus.Counter
	costWithout    prometheus.Counter
	costPaid       *prometheus.CounterVec
	costProjected  prometheus.Counter
	summarizerCost *prometheus.CounterVec
	costSaved      prometheus.Counter
	costAdded      prometheus.Counter
	cacheWrites    *prometheus.CounterVec
}

// NewMetrics registers the engine's collectors on reg and returns them:
// appended messages (counter), compactions by outcome ("ok", "stalled",
// "failed"; counter), summarizer call latency by binding and outcome
// ("ok", "error"; histogram in seconds, 50 ms to ~3 min), sessions whose
// circuit opened (counter), contexts withheld for a provider rule by rule
// (counter), and HTTP requests by route and status. A nil reg
// makes the collectors without registering them.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		appends: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricAppends, Help: "Messages appended to sessions.",
		}),
		compactions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricCompactions, Help: "Finished compactions by outcome (ok, stalled, failed).",
		}, []string{"outcome"}),
		summarizer: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricSummarizer,
			Help:    "Latency of summarizer calls, by binding and outcome (ok, error).",
			Buckets: prometheus.ExponentialBuckets(0.05, 2.5, 10), // 50 ms … 190 s (the 180 s timeout)
		}, []string{"binding", "outcome"}),
		circuit: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricCircuitOpen, Help: "Sessions whose failure circuit opened (three consecutive failed compactions in a run).",
		}),
		rules: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricProviderRule, Help: "Assembled contexts withheld because they broke a provider rule (docs/design.md §4a), by rule: always 0 unless ctxd has a bug.",
		}, []string{"rule"}),
		offloadFail: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricOffloadFailed, Help: "Tool results kept whole because their offload could not be written (full or unwritable offload directory).",
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricRequests, Help: "HTTP requests by route pattern and status code.",
		}, []string{"route", "code"}),
		reqSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricRequestSeconds,
			Help:    "HTTP request latency by route pattern (event streams last as long as the client stays).",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 30, 180},
		}, []string{"route"}),
	}
	m.ledgerRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricLedgerRequests, Help: "Proxied requests entered in the savings ledger, by mode (enforce, observe)."}, []string{"mode"})
	m.tokensSaved = prometheus.NewCounter(prometheus.CounterOpts{Name: MetricTokensSaved, Help: "Tokens ctxd kept out of enforce-mode requests (what the client sent minus what went upstream)."})
	m.costWithout = prometheus.NewCounter(prometheus.CounterOpts{Name: MetricCostWithout, Help: "US dollars the enforce-mode requests would have cost without ctxd (the ledger's cache model of the client's own requests)."})
	m.costPaid = prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricCostPaid, Help: "US dollars the requests sent upstream cost (the provider's usage at the price table), by mode."}, []string{"mode"})
	m.costProjected = prometheus.NewCounter(prometheus.CounterOpts{Name: MetricCostProjected, Help: "US dollars ctxd's requests would have cost in observe mode (the ledger's cache model)."})
	m.summarizerCost = prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricSummarizerCost, Help: "US dollars of ctxd's summarizer calls, by whose credential paid (client, daemon)."}, []string{"credential"})
	m.costSaved = prometheus.NewCounter(prometheus.CounterOpts{Name: MetricCostSaved, Help: "US dollars saved, net: the sum of the positive net savings of enforce-mode requests (without ctxd minus paid); net savings = this minus ctxd_cost_added_total."})
	m.costAdded = prometheus.NewCounter(prometheus.CounterOpts{Name: MetricCostAdded, Help: "US dollars ctxd added: the negative net savings of enforce-mode requests and every summarizer call of an enforce-mode session."})
	m.cacheWrites = prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricCacheWrites, Help: "Prompt-cache write tokens of ctxd's requests by cause (growth, compaction, pass, offload, client_change, ttl_expiry, other); observe mode's projected writes are not counted."}, []string{"cause"})
	if reg != nil {
		reg.MustRegister(m.appends, m.compactions, m.summarizer, m.circuit, m.rules, m.offloadFail, m.requests, m.reqSeconds,
			m.ledgerRequests, m.tokensSaved, m.costWithout, m.costPaid, m.costProjected, m.summarizerCost, m.costSaved, m.costAdded, m.cacheWrites)
	}
	return m
}

// Appended counts n appended messages (engine.Metrics).
func (m *Metrics) Appended(n int) { m.appends.Add(float64(n)) }

// Compaction counts a finished compaction by outcome (engine.Metrics).
func (m *Metrics) Compaction(outcome string) { m.compactions.WithLabelValues(outcome).Inc() }

// SummarizerCall observes one summarizer call of a binding that took d
// (engine.Metrics).
func (m *Metrics) SummarizerCall(binding string, d time.Duration, err error) {
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	m.summarizer.WithLabelValues(binding, outcome).Observe(d.Seconds())
}

// CircuitOpened counts a session whose circuit opened (engine.Metrics).
func (m *Metrics) CircuitOpened() { m.circuit.Inc() }

// ProviderRuleViolation counts a context withheld for breaking a provider
// rule (engine.Metrics); rule is one of the history.Rule* names.
func (m *Metrics) ProviderRuleViolation(rule string) { m.rules.WithLabelValues(rule).Inc() }

// OffloadFailed counts a tool result kept whole because its offload could
// not be written (engine.Metrics).
func (m *Metrics) OffloadFailed() { m.offloadFail.Inc() }

// Ledger counts one savings-ledger entry (engine.Metrics).
func (m *Metrics) Ledger(en ledger.Entry) {
	switch en.Kind {
	case ledger.KindSummarizer:
		m.summarizerCost.WithLabelValues(en.Credential).Add(en.Cost)
		if en.Mode != ledger.ModeObserve {
			m.costAdded.Add(en.Cost)
		}
	case ledger.KindRequest:
		m.ledgerRequests.WithLabelValues(en.Mode).Inc()
		m.costPaid.WithLabelValues(en.Mode).Add(en.Cost)
		if en.Mode == ledger.ModeObserve {
			m.costProjected.Add(en.CounterfactualCost)
			return
		}
		if en.ClientTokens > en.SentTokens {
			m.tokensSaved.Add(float64(en.ClientTokens - en.SentTokens))
		}
		m.costWithout.Add(en.CounterfactualCost)
		if d := en.CounterfactualCost - en.Cost; d >= 0 {
			m.costSaved.Add(d)
		} else {
			m.costAdded.Add(-d)
		}
		for c, n := range en.Causes {
			m.cacheWrites.WithLabelValues(c).Add(float64(n))
		}
	}
}

func (m *Metrics) request(route string, code int, d time.Duration) {
	m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	m.reqSeconds.WithLabelValues(route).Observe(d.Seconds())
}

// registerState registers the gauges read from the daemon's state on each
// scrape: sessions stored, queue depth and capacity, busy workers, and the
// build info.
func (m *Metrics) registerState(reg *prometheus.Registry, s *Server) {
	collectors := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: MetricSessions, Help: "Sessions stored.",
		}, func() float64 {
			ctx, cancel := context.WithTimeout(context.Background(), sessionsScrapeTimeout)
			defer cancel()
			n, err := s.eng.CountSessions(ctx)
			if err != nil {
				return -1
			}
			return float64(n)
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: MetricQueueDepth, Help: "Compactions waiting in the queue.",
		}, func() float64 { return float64(s.poolStats().Queued) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: MetricQueueCapacity, Help: "Bound of the compaction queue (workers.queue).",
		}, func() float64 { return float64(s.pool.Capacity) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: MetricWorkersBusy, Help: "Compaction workers running a compaction.",
		}, func() float64 { return float64(s.poolStats().Running) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: MetricBuildInfo, Help: "Always 1; the version label is the daemon's.", ConstLabels: prometheus.Labels{"version": s.version},
		}, func() float64 { return 1 }),
	}
	for _, g := range s.spaces {
		label := prometheus.Labels{"dir": g.Name}
		collectors = append(collectors,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: MetricDiskLow, Help: "1 while the file system of the directory has less free space than storage.min_free_bytes (writes are refused), else 0.", ConstLabels: label,
			}, func() float64 {
				_, low, err := g.Space.State()
				if err != nil || low {
					return 1
				}
				return 0
			}),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: MetricDiskFree, Help: "Free space of the directory's file system, in bytes (-1 when it cannot be read).", ConstLabels: label,
			}, func() float64 {
				free, _, err := g.Space.State()
				if err != nil {
					return -1
				}
				return float64(free)
			}))
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			s.log.Warn("metrics: register collector", attrErr, err)
		}
	}
}

// metricsHandler serves the private registry in the text exposition format.
func (s *Server) metricsHandler() http.HandlerFunc {
	h := promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{ErrorLog: nil, ErrorHandling: promhttp.ContinueOnError})
	return h.ServeHTTP
}
