package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ctxd/ctxd/config"
)

// benchTransport is an upstream in memory: it answers every request with
// a tool call whose id the next round of the benchmark's conversation
// carries (so the proxy's recorded answer is matched), streamed, or as
// one JSON answer when json is set.
type benchTransport struct {
	round atomic.Int64
	json  bool
}

func (t *benchTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, r.Body)
	_ = r.Body.Close()
	i := t.round.Load()
	id, input := fmt.Sprintf("toolu_%06d", i), fmt.Sprintf(`{"command":"step %d"}`, i)
	if t.json {
		body := fmt.Sprintf(`{"id":"msg_%06d","type":"message","role":"assistant","model":"claude-opus-4-8","content":[{"type":"tool_use","id":%q,"name":"Bash","input":%s}],"stop_reason":"tool_use","usage":{"input_tokens":150000,"output_tokens":20}}`, i, id, input)
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(body)), Request: r, ContentLength: int64(len(body))}, nil
	}
	body := sse("", "", [][3]string{{id, "Bash", input}}, 150000, 20)
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(strings.NewReader(body)), Request: r, ContentLength: -1}, nil
}

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
// match, append, assemble, render, forward, read the answer, record it)
// against the baseline of a plain httputil.ReverseProxy plus one
// encoding/json decode of the same body, over the same in-memory upstream
// (bench_fixture_test.go). Each iteration sends the same request through
// both, one after the other, so both see the same machine load; it reports
// per request the time of each, their ratio, and the medians of the time
// to the first byte of the answer (benchFigures.report), the added time
// also against a reverse proxy that decodes nothing. Sub-benchmarks:
// stream (an SSE answer, "stream":true) and json (a non-streamed answer).
// Context editing is off and the window large: the steady state between
// recorded rewrites, which are rare by design.
func BenchmarkProxy(b *testing.B) {
	b.Run("stream", func(b *testing.B) { benchProxyMessages(b, false) })
	b.Run("json", func(b *testing.B) { benchProxyMessages(b, true) })
}

func benchProxyMessages(b *testing.B, nonStreamed bool) {
	verifyEncoding = false
	defer func() { verifyEncoding = true }()
	c := newConversation()
	c.msgs = slices.Clone(benchConversation(200000))
	c.user("next")
	if nonStreamed {
		c.extra = strings.Replace(c.extra, `"stream":true`, `"stream":false`, 1)
	}
	result := strings.Repeat("PASS ok\n", 40)
	// next appends round i: the answer the upstream gave, and its result.
	next := func(i int64) {
		c.assistant(assistantCall(fmt.Sprintf("toolu_%06d", i), "Bash", fmt.Sprintf(`{"command":"step %d"}`, i)))
		c.results([2]string{fmt.Sprintf("toolu_%06d", i), result})
	}
	baseline := benchBaseline(&benchTransport{json: nonStreamed})
	plain := benchPlain(&benchTransport{json: nonStreamed})
	cfg := config.Defaults()
	cfg.ContextEditing.Enabled = false
	tr := &benchTransport{json: nonStreamed}
	p := benchProxy(b, cfg, tr)
	ph := p.Handler()
	hdr := map[string]string{"X-Api-Key": testKey, HeaderContextLimit: "1000000"}
	benchSend(ph, "/v1/messages", benchBody(c), hdr) // the conversation so far, recorded once; answered with round 0's call
	next(0)

	var f benchFigures
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		tr.round.Store(int64(i + 1))
		body := benchBody(c)
		f.size = len(body)
		b.StartTimer()
		bt, bf := benchSend(baseline, "/v1/messages", body, hdr)
		ct, cf := benchSend(ph, "/v1/messages", body, hdr)
		b.StopTimer()
		_, pf := benchSend(plain, "/v1/messages", body, hdr)
		f.add(ct, cf, bt, bf)
		f.plain = append(f.plain, cf-pf)
		next(int64(i + 1))
		b.StartTimer()
	}
	f.report(b, p)
}
