package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/ctxd/ctxd/artifacts"
	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/identity"
	"github.com/ctxd/ctxd/internal/store"
	"github.com/ctxd/ctxd/summarizer"
	"github.com/ctxd/ctxd/workers"
	"github.com/dgraph-io/badger/v4"
)

// The fixture the proxy benchmarks share (BenchmarkProxy,
// BenchmarkProxyOpenAI): ctxd's proxy over an in-memory store and
// upstream, the baselines it is measured against, and the paired figures.

// benchProxy returns ctxd's proxy handler over a fresh in-memory engine
// with cfg, sending upstream through tr; everything is closed when b ends.
func benchProxy(b testing.TB, cfg config.Config, tr http.RoundTripper) *Proxy {
	b.Helper()
	db, err := store.OpenInMemory()
	if err != nil {
		b.Fatal(err)
	}
	return benchProxyOn(b, cfg, tr, db)
}

// benchProxyOn is benchProxy over the store db, which it closes when b
// ends.
func benchProxyOn(b testing.TB, cfg config.Config, tr http.RoundTripper, db *badger.DB) *Proxy {
	b.Helper()
	cfg.Storage.DataDir = b.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	arts, err := artifacts.Open(db, testSecret)
	if err != nil {
		b.Fatal(err)
	}
	cps := checkpoint.Open(db, checkpoint.Options{})
	pool, err := workers.New(workers.Options{Size: 1, Queue: 4, DrainTimeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = pool.Run(ctx); close(done) }()
	b.Cleanup(func() {
		cancel()
		<-done
		_ = cps.Close()
		_ = arts.Close()
		_ = db.Close()
	})
	eng, err := engine.New(engine.Options{Config: cfg, Log: cps, Artifacts: arts, Pool: pool, Logger: quiet,
		Summarizer: summarizer.New(summarizer.Options{Logger: quiet}), OffloadDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	p, err := New(Options{Engine: eng, Secret: testSecret, Config: cfg.Proxy, Logger: quiet, Transport: tr})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.WaitRecords(context.Background()) })
	// The agent's credential was accepted by an earlier request (its
	// X-Ctxd-Context-Limit is taken from the first request on).
	p.creds.Accept(identity.Fingerprint(testSecret, http.Header{"X-Api-Key": {testKey}}))
	return p
}

var benchUpstreamURL, _ = url.Parse("http://upstream.invalid")

// benchBaseline is the baseline of the proxy's goals: a plain
// httputil.ReverseProxy plus one encoding/json decode of the body.
func benchBaseline(tr http.RoundTripper) http.Handler {
	rp := benchPlain(tr)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var v struct {
			Messages []json.RawMessage `json:"messages"`
			Input    []json.RawMessage `json:"input"`
			Model    string            `json:"model"`
		}
		_ = json.Unmarshal(body, &v)
		r.Body = io.NopCloser(bytes.NewReader(body))
		rp.ServeHTTP(w, r)
	})
}

// benchPlain is a reverse proxy that decodes nothing: what "added by ctxd"
// is measured from for the time to first byte.
func benchPlain(tr http.RoundTripper) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(benchUpstreamURL) }, Transport: tr, FlushInterval: -1}
}

// benchSend serves one POST of body to path with the headers hdr through
// h, and returns its total time and the time to the first byte of the
// answer.
func benchSend(h http.Handler, path string, body []byte, hdr map[string]string) (total, ttfb time.Duration) {
	req := httptest.NewRequest("POST", "http://127.0.0.1:7420"+path, bytes.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	w := &firstByteWriter{ResponseWriter: httptest.NewRecorder()}
	start := time.Now()
	h.ServeHTTP(w, req)
	return time.Since(start), w.first.Sub(start)
}

// firstByteWriter records when the first byte of the answer was written.
type firstByteWriter struct {
	http.ResponseWriter
	first time.Time
}

func (w *firstByteWriter) Write(p []byte) (int, error) {
	if w.first.IsZero() {
		w.first = time.Now()
	}
	return w.ResponseWriter.Write(p)
}

func (w *firstByteWriter) Flush() {}

// benchFigures accumulates the paired measurements of a proxy benchmark.
type benchFigures struct {
	ctxdT, baseT               time.Duration
	ctxdF, baseF, added, plain []time.Duration
	size                       int
}

// add records one iteration: ctxd's and the baseline's total time and
// time to first byte.
func (f *benchFigures) add(ct, cf, bt, bf time.Duration) {
	f.ctxdT += ct
	f.baseT += bt
	f.ctxdF, f.baseF, f.added = append(f.ctxdF, cf), append(f.baseF, bf), append(f.added, cf-bf)
}

// report reports per request the time of each (ctxd-ns/req,
// baseline-ns/req), their ratio, the medians of the time to first byte
// (ctxd-ttfb-p50-ns, baseline-ttfb-p50-ns), the median of the paired
// differences (added-ttfb-p50-ns), against the plain reverse proxy when
// measured (added-vs-plain-ttfb-p50-ns), and the body size.
func (f *benchFigures) report(b *testing.B, p *Proxy) {
	b.StopTimer()
	if s := p.Stats(); s.Branches != 0 || s.PassedThrough != 0 {
		b.Fatalf("not steady state: %+v", s)
	}
	median := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Nanoseconds())
	}
	b.ReportMetric(float64(f.ctxdT.Nanoseconds())/float64(b.N), "ctxd-ns/req")
	b.ReportMetric(float64(f.baseT.Nanoseconds())/float64(b.N), "baseline-ns/req")
	b.ReportMetric(float64(f.ctxdT)/float64(f.baseT), "ratio")
	b.ReportMetric(median(f.ctxdF), "ctxd-ttfb-p50-ns")
	b.ReportMetric(median(f.baseF), "baseline-ttfb-p50-ns")
	b.ReportMetric(median(f.added), "added-ttfb-p50-ns")
	if len(f.plain) > 0 {
		b.ReportMetric(median(f.plain), "added-vs-plain-ttfb-p50-ns")
	}
	b.ReportMetric(float64(f.size), "body-bytes")
}
