package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ctxd/ctxd/config"
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

	baseline := benchBaseline(&benchOpenAITransport{api: api})
	cfg := config.Defaults()
	cfg.ContextEditing.Enabled = false
	cfg.Models["gpt-5.2-codex"] = config.Model{ContextLimit: 1000000, TokenFactor: 1}
	tr := &benchOpenAITransport{api: api}
	p := benchProxy(b, cfg, tr)
	hdr := map[string]string{"Authorization": "Bearer " + testKey, "Session-Id": "bench"}
	ph := p.Handler()
	benchSend(ph, api.path, api.body(items), hdr) // recorded once; answered with round 0's call
	items = append(items, api.call(0), api.result(0, small))

	var f benchFigures
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		tr.round.Store(int64(i + 1))
		body := api.body(items)
		f.size = len(body)
		b.StartTimer()
		bt, bf := benchSend(baseline, api.path, body, hdr)
		ct, cf := benchSend(ph, api.path, body, hdr)
		b.StopTimer()
		f.add(ct, cf, bt, bf)
		items = append(items, api.call(int64(i+1)), api.result(int64(i+1), small))
		b.StartTimer()
	}
	f.report(b, p)
}
