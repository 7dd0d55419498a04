package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxd/ctxd/artifacts"
	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/internal/store"
	"github.com/ctxd/ctxd/summarizer"
	"github.com/ctxd/ctxd/workers"
)

// benchTransport is an upstream in memory: it answers every request with
// a streamed tool call whose id the next round of the benchmark's
// conversation carries (so the proxy's recorded answer is matched).
type benchTransport struct{ round atomic.Int64 }

func (t *benchTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, r.Body)
	_ = r.Body.Close()
	i := t.round.Load()
	body := sse("", "", [][3]string{{fmt.Sprintf("toolu_%06d", i), "Bash", fmt.Sprintf(`{"command":"step %d"}`, i)}}, 150000, 20)
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(strings.NewReader(body)), Request: r, ContentLength: -1}, nil
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

// benchConversation is a conversation of about tokens o200k tokens in tool
// rounds of ~2,000 tokens, as request message JSON.
func benchConversation(tokens int) []string {
	msgs := []string{`{"role":"user","content":[{"type":"text","text":"Find why the build fails."}]}`}
	line := "ok   github.com/example/project/internal/pkg0042  0.123s  coverage: 81.2% of statements\n"
	result := strings.Repeat(line, 100) // ~2,000 tokens
	for i := 0; i < tokens/2000; i++ {
		msgs = append(msgs, assistantCall(fmt.Sprintf("toolu_h%05d", i), "Bash", fmt.Sprintf(`{"command":"go test ./pkg%d"}`, i)))
		content, _ := json.Marshal(result)
		msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_h%05d","content":%s}]}`, i, content))
	}
	return msgs
}

func benchBody(c *conversation) []byte { return []byte(c.body()) }

// BenchmarkProxy measures one request of a 200k-token conversation in
// steady state (one new tool round per request): ctxd's proxy (parse,
// match, append, assemble, render, forward, read the stream, record the
// answer) against the baseline of a plain httputil.ReverseProxy plus one
// encoding/json decode of the same body, over the same in-memory upstream.
// Each iteration sends the same request through both, one after the other,
// so both see the same machine load; it reports per request the time of
// each (ctxd-ns/req, baseline-ns/req), their ratio, and the medians of the
// time to the first byte of the answer (ctxd-ttfb-p50-ns,
// baseline-ttfb-p50-ns, added-ttfb-p50-ns: the median of the paired
// differences; added-vs-plain-ttfb-p50-ns the same against a reverse proxy
// that decodes nothing). Context editing is off and the window large: the steady
// state between recorded rewrites, which are rare by design.
func BenchmarkProxy(b *testing.B) {
	verifyEncoding = false
	defer func() { verifyEncoding = true }()
	history := benchConversation(200000)
	c := newConversation()
	c.msgs = slices.Clone(history)
	c.user("next")
	result := strings.Repeat("PASS ok\n", 40)
	// next appends round i: the answer the upstream gave, and its result.
	next := func(i int64) {
		c.assistant(assistantCall(fmt.Sprintf("toolu_%06d", i), "Bash", fmt.Sprintf(`{"command":"step %d"}`, i)))
		c.results([2]string{fmt.Sprintf("toolu_%06d", i), result})
	}

	// The baseline: a reverse proxy and one decode.
	baseTr := &benchTransport{}
	u, _ := url.Parse("http://upstream.invalid")
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) }, Transport: baseTr, FlushInterval: -1}
	baseline := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var v struct {
			Messages []json.RawMessage `json:"messages"`
			Model    string            `json:"model"`
		}
		_ = json.Unmarshal(body, &v)
		r.Body = io.NopCloser(bytes.NewReader(body))
		rp.ServeHTTP(w, r)
	})

	// A plain reverse proxy, no decode: what "added by ctxd" is measured
	// from for the time to first byte.
	plainTr := &benchTransport{}
	plain := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) }, Transport: plainTr, FlushInterval: -1}

	// ctxd.
	cfg := config.Defaults()
	cfg.ContextEditing.Enabled = false
	cfg.Storage.DataDir = b.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, err := store.OpenInMemory()
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	arts, _ := artifacts.Open(db, testSecret)
	defer arts.Close()
	cps := checkpoint.Open(db, checkpoint.Options{})
	defer cps.Close()
	pool, _ := workers.New(workers.Options{Size: 1, Queue: 4, DrainTimeout: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = pool.Run(ctx) }()
	eng, err := engine.New(engine.Options{Config: cfg, Log: cps, Artifacts: arts, Pool: pool, Logger: quiet,
		Summarizer: summarizer.New(summarizer.Options{Logger: quiet}), OffloadDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	tr := &benchTransport{}
	p, err := New(Options{Engine: eng, Secret: testSecret, Config: cfg.Proxy, Logger: quiet, Transport: tr})
	if err != nil {
		b.Fatal(err)
	}
	send := func(h http.Handler, body []byte) (total, ttfb time.Duration) {
		req := httptest.NewRequest("POST", "http://127.0.0.1:7420/v1/messages", bytes.NewReader(body))
		req.Header.Set("X-Api-Key", testKey)
		req.Header.Set(HeaderContextLimit, "1000000")
		w := &firstByteWriter{ResponseWriter: httptest.NewRecorder()}
		start := time.Now()
		h.ServeHTTP(w, req)
		return time.Since(start), w.first.Sub(start)
	}
	ph := p.Handler()
	send(ph, benchBody(c)) // the conversation so far, recorded once; answered with round 0's call
	next(0)

	var ctxdT, baseT time.Duration
	var ctxdF, baseF, added, addedPlain []time.Duration
	size := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		tr.round.Store(int64(i + 1))
		body := benchBody(c)
		size = len(body)
		b.StartTimer()
		bt, bf := send(baseline, body)
		ct, cf := send(ph, body)
		b.StopTimer()
		_, pf := send(plain, body)
		addedPlain = append(addedPlain, cf-pf)
		baseT += bt
		ctxdT += ct
		baseF, ctxdF, added = append(baseF, bf), append(ctxdF, cf), append(added, cf-bf)
		next(int64(i + 1))
		b.StartTimer()
	}
	b.StopTimer()
	if s := p.Stats(); s.Branches != 0 || s.PassedThrough != 0 {
		b.Fatalf("not steady state: %+v", s)
	}
	median := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Nanoseconds())
	}
	b.ReportMetric(float64(ctxdT.Nanoseconds())/float64(b.N), "ctxd-ns/req")
	b.ReportMetric(float64(baseT.Nanoseconds())/float64(b.N), "baseline-ns/req")
	b.ReportMetric(float64(ctxdT)/float64(baseT), "ratio")
	b.ReportMetric(median(ctxdF), "ctxd-ttfb-p50-ns")
	b.ReportMetric(median(baseF), "baseline-ttfb-p50-ns")
	b.ReportMetric(median(added), "added-ttfb-p50-ns")
	b.ReportMetric(median(addedPlain), "added-vs-plain-ttfb-p50-ns")
	b.ReportMetric(float64(size), "body-bytes")
}
