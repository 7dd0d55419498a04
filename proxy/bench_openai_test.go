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

// openAIBenchAPI is one OpenAI wire API for BenchmarkProxyOpenAI: its path,
// how a request body of a conversation is written, and the upstream's
// streamed answer calling round i's tool.
type openAIBenchAPI struct {
	path   string
	body   func(items []string) []byte
	answer func(i int64) string
	// call and result are round i's tool call and its result, as the
	// client sends them back.
	call   func(i int64) string
	result func(i int64, text string) string
}

var benchResponses = openAIBenchAPI{
	path: "/v1/responses",
	body: func(items []string) []byte {
		return []byte(`{"model":"gpt-5.2-codex","instructions":"You are Codex.","input":[` + strings.Join(items, ",") +
			`],"tools":[{"type":"function","name":"exec_command","parameters":{"type":"object","properties":{"cmd":{"type":"string"}}}}],"store":false,"stream":true,"prompt_cache_key":"bench"}`)
	},
	answer: func(i int64) string {
		return responsesSSE([]string{fmt.Sprintf(`{"type":"function_call","call_id":"call_%06d","name":"exec_command","arguments":"{\"cmd\":\"step %d\"}"}`, i, i)}, 150000, 140000, 20)
	},
	call: func(i int64) string {
		return fmt.Sprintf(`{"type":"function_call","call_id":"call_%06d","name":"exec_command","arguments":"{\"cmd\":\"step %d\"}"}`, i, i)
	},
	result: func(i int64, text string) string {
		o, _ := json.Marshal(text)
		return fmt.Sprintf(`{"type":"function_call_output","call_id":"call_%06d","output":%s}`, i, o)
	},
}

var benchChat = openAIBenchAPI{
	path: "/v1/chat/completions",
	body: func(items []string) []byte {
		return []byte(`{"model":"gpt-5.2-codex","messages":[{"role":"system","content":"You are pi."},` + strings.Join(items, ",") +
			`],"tools":[{"type":"function","function":{"name":"bash","parameters":{"type":"object","properties":{"command":{"type":"string"}}}}}],"stream":true,"stream_options":{"include_usage":true}}`)
	},
	answer: func(i int64) string {
		return chatSSE("", [][3]string{{fmt.Sprintf("call_%06d", i), "bash", fmt.Sprintf(`{"command":"step %d"}`, i)}}, true)
	},
	call: func(i int64) string {
		a, _ := json.Marshal(fmt.Sprintf(`{"command":"step %d"}`, i))
		return fmt.Sprintf(`{"role":"assistant","content":null,"tool_calls":[{"id":"call_%06d","type":"function","function":{"name":"bash","arguments":%s}}]}`, i, a)
	},
	result: func(i int64, text string) string {
		o, _ := json.Marshal(text)
		return fmt.Sprintf(`{"role":"tool","content":%s,"tool_call_id":"call_%06d"}`, o, i)
	},
}

// benchOpenAITransport answers every request with round's tool call.
type benchOpenAITransport struct {
	api   openAIBenchAPI
	round atomic.Int64
}

func (t *benchOpenAITransport) RoundTrip(r *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, r.Body)
	_ = r.Body.Close()
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(strings.NewReader(t.api.answer(t.round.Load()))), Request: r, ContentLength: -1}, nil
}

// BenchmarkProxyOpenAI is BenchmarkProxy for the Responses API and Chat
// Completions: one request of a 200k-token conversation in steady state
// (one new tool round per request) through ctxd's proxy against the
// baseline of a plain httputil.ReverseProxy plus one encoding/json decode
// of the same body, paired per iteration over the same in-memory upstream;
// the same metrics (ctxd-ns/req, baseline-ns/req, ratio, the medians of
// the time to first byte and of the added time to first byte).
func BenchmarkProxyOpenAI(b *testing.B) {
	for _, api := range []openAIBenchAPI{benchResponses, benchChat} {
		b.Run(strings.TrimPrefix(api.path, "/v1/"), func(b *testing.B) { benchOpenAI(b, api) })
	}
}

func benchOpenAI(b *testing.B, api openAIBenchAPI) {
	line := "ok   github.com/example/project/internal/pkg0042  0.123s  coverage: 81.2% of statements\n"
	big := strings.Repeat(line, 100) // ~2,000 tokens
	items := []string{}
	if api.path == "/v1/responses" {
		items = append(items, `{"type":"message","role":"developer","content":[{"type":"input_text","text":"sandbox: none"}]}`,
			`{"type":"message","role":"user","content":[{"type":"input_text","text":"Find why the build fails."}]}`)
	} else {
		items = append(items, `{"role":"user","content":"Find why the build fails."}`)
	}
	for i := int64(0); i < 100; i++ {
		items = append(items, api.call(1_000_000+i), api.result(1_000_000+i, big))
	}
	small := strings.Repeat("PASS ok\n", 40)

	u, _ := url.Parse("http://upstream.invalid")
	baseTr := &benchOpenAITransport{api: api}
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) }, Transport: baseTr, FlushInterval: -1}
	baseline := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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

	cfg := config.Defaults()
	cfg.ContextEditing.Enabled = false
	cfg.Storage.DataDir = b.TempDir()
	cfg.Models["gpt-5.2-codex"] = config.Model{ContextLimit: 1000000, TokenFactor: 1}
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
	tr := &benchOpenAITransport{api: api}
	p, err := New(Options{Engine: eng, Secret: testSecret, Config: cfg.Proxy, Logger: quiet, Transport: tr})
	if err != nil {
		b.Fatal(err)
	}
	send := func(h http.Handler, body []byte) (total, ttfb time.Duration) {
		req := httptest.NewRequest("POST", "http://127.0.0.1:7420"+api.path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testKey)
		req.Header.Set("Session-Id", "bench")
		w := &firstByteWriter{ResponseWriter: httptest.NewRecorder()}
		start := time.Now()
		h.ServeHTTP(w, req)
		return time.Since(start), w.first.Sub(start)
	}
	ph := p.Handler()
	send(ph, api.body(items)) // recorded once; answered with round 0's call
	items = append(items, api.call(0), api.result(0, small))

	var ctxdT, baseT time.Duration
	var ctxdF, baseF, added []time.Duration
	size := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		tr.round.Store(int64(i + 1))
		baseTr.round.Store(int64(i + 1))
		body := api.body(items)
		size = len(body)
		b.StartTimer()
		bt, bf := send(baseline, body)
		ct, cf := send(ph, body)
		b.StopTimer()
		baseT += bt
		ctxdT += ct
		baseF, ctxdF, added = append(baseF, bf), append(ctxdF, cf), append(added, cf-bf)
		items = append(items, api.call(int64(i+1)), api.result(int64(i+1), small))
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
	b.ReportMetric(float64(size), "body-bytes")
}
