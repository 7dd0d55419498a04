package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctxd/ctxd/artifacts"
	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/store"
	"github.com/ctxd/ctxd/internal/strict"
	"github.com/ctxd/ctxd/internal/syncbuf"
	"github.com/ctxd/ctxd/server"
	"github.com/ctxd/ctxd/summarizer"
	"github.com/ctxd/ctxd/workers"
)

func init() { verifyEncoding = true }

var testSecret = []byte(strings.Repeat("s", artifacts.SecretSize))

// upstream is a scripted Anthropic provider: it records every request
// (headers and body) and answers each with the next reply, by default a
// streamed text answer.
type upstream struct {
	t   *testing.T
	srv *httptest.Server

	mu      sync.Mutex
	reqs    []seen
	replies []reply
	// refused lists the requests the upstream refused for breaking a
	// provider rule (docs/design.md §4a), as the real provider would with a 400.
	refused []string
	// allowRefusals: a test that sends a broken request on purpose.
	allowRefusals bool
	// sized: a streamed reply reports input_tokens as the request's size
	// (a token per 4 bytes of its body) instead of its scripted figure.
	sized bool
}

type seen struct {
	path   string
	header http.Header
	body   []byte
	// summary: a summarizer request (it ends with the compaction prompt),
	// answered with summaryAnswer, not from the script.
	summary bool
}

// summaryAnswer is the upstream's answer to a summarizer request.
const summaryAnswer = `{"id":"msg_s","type":"message","role":"assistant","model":"claude-opus-4-8","content":[{"type":"text","text":"## Goal\nFix the build.\n## State\nSteps 0-7 ran; each printed its output, which the history holds. The build still fails in the step after them.\n## Next\nRead the failing step's output and fix its cause."}],"stop_reason":"end_turn","usage":{"input_tokens":900,"cache_read_input_tokens":4000,"output_tokens":40}}`

// reply is one scripted answer: status and body; stream sends body as SSE.
type reply struct {
	status int
	body   string
	stream bool
	// hold, when set, runs after a streamed reply's status is sent (the
	// upstream has accepted the request) and before its body.
	hold  func()
	after func(r *http.Request)
}

// inputTokensRE finds the input figure of a scripted answer's usage.
var inputTokensRE = regexp.MustCompile(`"input_tokens":\d+`)

func newUpstream(t *testing.T) *upstream {
	u := &upstream{t: t}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		sum := bytes.Contains(body, []byte("write a checkpoint summary of the conversation above"))
		u.reqs = append(u.reqs, seen{path: r.URL.RequestURI(), header: r.Header.Clone(), body: body, summary: sum})
		var rp reply
		if v := strictCheck(r.URL.Path, body); v != "" {
			u.refused = append(u.refused, v)
			u.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(400)
			b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": "invalid_request_error", "message": v}})
			_, _ = w.Write(b)
			return
		}
		if sum {
			rp = reply{status: 200, body: summaryAnswer}
		} else if len(u.replies) > 0 {
			rp, u.replies = u.replies[0], u.replies[1:]
		} else {
			rp = textAnswer("ok")
		}
		sized := u.sized
		u.mu.Unlock()
		if rp.stream && sized {
			rp.body = inputTokensRE.ReplaceAllString(rp.body, fmt.Sprintf(`"input_tokens":%d`, len(body)/4))
		}
		if rp.stream {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(200)
			if rp.hold != nil {
				w.(http.Flusher).Flush()
				rp.hold()
			}
			for _, ev := range strings.SplitAfter(rp.body, "\n\n") {
				_, _ = io.WriteString(w, ev)
				w.(http.Flusher).Flush()
			}
			if rp.after != nil {
				rp.after(r)
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rp.status)
		_, _ = io.WriteString(w, rp.body)
	}))
	t.Cleanup(func() {
		u.srv.Close()
		u.mu.Lock()
		defer u.mu.Unlock()
		if len(u.refused) > 0 && !u.allowRefusals {
			t.Errorf("the strict upstream refused %d requests, first: %s", len(u.refused), u.refused[0])
		}
	})
	return u
}

// strictCheck applies the provider rules to a Messages request the way the
// real provider does (internal/strict), for the thinking setting it sends;
// "" when the request passes or is not a Messages request.
func strictCheck(path string, body []byte) string {
	if path != "/v1/messages" {
		return ""
	}
	var probe struct {
		Thinking struct {
			Type string `json:"type"`
		} `json:"thinking"`
	}
	if json.Unmarshal(body, &probe) != nil {
		return ""
	}
	th := history.ThinkingOff
	switch probe.Thinking.Type {
	case "enabled":
		th = history.ThinkingOn
	case "adaptive":
		th = history.ThinkingAdaptive
	}
	vs, err := strict.Anthropic(body, th, false)
	if err != nil {
		return ""
	}
	if err := vs.Err(); err != nil {
		return err.Error()
	}
	return ""
}

func (u *upstream) script(r ...reply) {
	u.mu.Lock()
	u.replies = append(u.replies, r...)
	u.mu.Unlock()
}

// requests returns the agent's requests (summarizer requests left out).
func (u *upstream) requests() []seen {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []seen
	for _, r := range u.reqs {
		if !r.summary {
			out = append(out, r)
		}
	}
	return out
}

// summaries returns the summarizer requests.
func (u *upstream) summaries() []seen {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []seen
	for _, r := range u.reqs {
		if r.summary {
			out = append(out, r)
		}
	}
	return out
}

// sse renders a streamed answer: optional thinking, text, tool calls, usage.
func sse(thinking, text string, calls [][3]string, input, output int) string {
	var b strings.Builder
	ev := func(typ string, v any) {
		d, _ := json.Marshal(v)
		fmt.Fprintf(&b, "event: %s\ndata: %s\n\n", typ, d)
	}
	ev("message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": "msg_x", "type": "message", "role": "assistant", "model": "claude-opus-4-8", "content": []any{},
		"usage": map[string]any{"input_tokens": input, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 1}}})
	i := 0
	if thinking != "" {
		ev("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "thinking", "thinking": "", "signature": ""}})
		ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "thinking_delta", "thinking": thinking}})
		ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "signature_delta", "signature": "sig-" + thinking}})
		ev("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
		i++
	}
	if text != "" {
		ev("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "text", "text": ""}})
		ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "text_delta", "text": text}})
		ev("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
		i++
	}
	stop := "end_turn"
	for _, c := range calls {
		stop = "tool_use"
		ev("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "tool_use", "id": c[0], "name": c[1], "input": map[string]any{}}})
		half := len(c[2]) / 2
		ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": c[2][:half]}})
		ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": c[2][half:]}})
		ev("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
		i++
	}
	ev("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop}, "usage": map[string]any{"output_tokens": output}})
	ev("message_stop", map[string]any{"type": "message_stop"})
	return b.String()
}

func textAnswer(text string) reply { return reply{stream: true, body: sse("", text, nil, 100, 5)} }

// fixture is a proxy in front of an upstream, on a real loopback listener.
type fixture struct {
	t      *testing.T
	up     *upstream
	cfg    config.Config
	eng    *engine.Engine
	p      *Proxy
	url    string
	logs   *syncbuf.Buffer
	logger *slog.Logger
	db     *badger.DB
	arts   *artifacts.Store
	cps    *checkpoint.Store
	pool   *workers.Pool
	hs     *http.Server
	// reg holds the proxy's metrics, kept across restarts.
	reg *prometheus.Registry
	// wrap, when set, wraps the store's log for the engine start makes.
	wrap func(checkpoint.Log) checkpoint.Log
}

func newFixture(t *testing.T, cfg config.Config) *fixture {
	t.Helper()
	f := &fixture{t: t, up: newUpstream(t), logs: &syncbuf.Buffer{}, reg: prometheus.NewRegistry()}
	f.logger = slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var err error
	if f.db, err = store.OpenInMemory(); err != nil {
		t.Fatal(err)
	}
	if f.arts, err = artifacts.Open(f.db, testSecret); err != nil {
		t.Fatal(err)
	}
	f.cps = checkpoint.Open(f.db, checkpoint.Options{})
	if f.pool, err = workers.New(workers.Options{Size: 2, Queue: 8, DrainTimeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = f.pool.Run(ctx); close(done) }()
	if cfg.Storage.DataDir == "" {
		cfg.Storage.DataDir = t.TempDir()
	}
	cfg.Proxy.Upstreams.Anthropic.BaseURL = f.up.srv.URL
	f.cfg = cfg
	f.start()
	t.Cleanup(func() {
		_ = f.hs.Close()
		_ = f.p.WaitRecords(context.Background())
		cancel()
		<-done
		_ = f.cps.Close()
		_ = f.arts.Close()
		_ = f.db.Close()
	})
	return f
}

// start builds an engine and a proxy over the fixture's store and serves
// it on a new loopback port: a daemon (re)start.
func (f *fixture) start() {
	t := f.t
	var err error
	var log checkpoint.Log = f.cps
	if f.wrap != nil {
		log = f.wrap(log)
	}
	f.eng, err = engine.New(engine.Options{Config: f.cfg, Log: log, Artifacts: f.arts, Pool: f.pool, Logger: f.logger,
		Summarizer: summarizer.New(summarizer.Options{Logger: f.logger, RetryMax: -1}), OffloadDir: f.cfg.Storage.DataDir})
	if err != nil {
		t.Fatal(err)
	}
	f.p, err = New(Options{Engine: f.eng, Secret: testSecret, Config: f.cfg.Proxy, Logger: f.logger, Metrics: server.NewProxyMetrics(f.reg)})
	if err != nil {
		t.Fatal(err)
	}
	f.serve()
}

// serve starts serving f.p on a loopback port and sets f.hs and f.url.
func (f *fixture) serve() {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.t.Fatal(err)
	}
	// As the daemon serves it (cmd/ctxd).
	hs := &http.Server{Handler: f.p.Handler(), ConnContext: f.p.ConnContext, MaxHeaderBytes: int(f.p.Limits().HeaderBytes)}
	f.hs = hs
	go func() { _ = hs.Serve(l) }()
	f.url = "http://" + l.Addr().String()
}

// restart drops the engine and the proxy (all their memory) and starts new
// ones over the same store.
func (f *fixture) restart() {
	f.settle()
	_ = f.hs.Close()
	f.start()
}

const testKey = "sk-ant-test-SECRET-0123456789"

// post sends a Messages request as an agent would.
func (f *fixture) post(body string, hdr map[string]string) (*http.Response, []byte) {
	f.t.Helper()
	req, _ := http.NewRequest("POST", f.url+"/v1/messages?beta=true", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", testKey)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return resp, b
}

// conversation builds Claude-Code-like request bodies: the whole history
// each time, the moving cache marker on the newest message.
type conversation struct {
	model    string
	system   string
	tools    string
	thinking string
	extra    string
	msgs     []string
}

func newConversation() *conversation {
	return &conversation{
		model:  "claude-opus-4-8",
		system: `[{"type":"text","text":"x-billing: 1"},{"type":"text","text":"You are a coding agent.","cache_control":{"type":"ephemeral"}}]`,
		tools:  `[{"name":"Bash","description":"run a command","input_schema":{"type":"object","properties":{"command":{"type":"string"}}}},{"name":"Read","description":"read a file","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral"}}]`,
		extra:  `"metadata":{"user_id":"{\"device_id\":\"d1\",\"session_id\":\"11111111-2222-3333-4444-555555555555\"}"},"stream":true,"temperature":1,"unknown_field":{"a":[1,2,3]}`,
	}
}

func (c *conversation) user(text string) *conversation {
	c.msgs = append(c.msgs, fmt.Sprintf(`{"role":"user","content":[{"type":"text","text":%q}]}`, text))
	return c
}

func (c *conversation) assistant(raw string) *conversation {
	c.msgs = append(c.msgs, raw)
	return c
}

func (c *conversation) results(pairs ...[2]string) *conversation {
	var blocks []string
	for _, p := range pairs {
		content, _ := json.Marshal(p[1])
		blocks = append(blocks, fmt.Sprintf(`{"type":"tool_result","tool_use_id":%q,"content":%s}`, p[0], content))
	}
	c.msgs = append(c.msgs, `{"role":"user","content":[`+strings.Join(blocks, ",")+`]}`)
	return c
}

// body renders the request with the moving marker on the newest message's
// last block.
func (c *conversation) body() string {
	msgs := append([]string(nil), c.msgs...)
	last := msgs[len(msgs)-1]
	i := strings.LastIndex(last, "}]}")
	msgs[len(msgs)-1] = last[:i] + `,"cache_control":{"type":"ephemeral"}` + last[i:]
	th := ""
	if c.thinking != "" {
		th = `"thinking":` + c.thinking + `,`
	}
	return fmt.Sprintf(`{"model":%q,"max_tokens":32000,"system":%s,"tools":%s,%s"messages":[%s],%s}`, c.model, c.system, c.tools, th, strings.Join(msgs, ","), c.extra)
}

func assistantText(text string) string {
	return fmt.Sprintf(`{"role":"assistant","content":[{"type":"text","text":%q}]}`, text)
}

func assistantCall(id, name, input string) string {
	return fmt.Sprintf(`{"role":"assistant","content":[{"type":"tool_use","id":%q,"name":%q,"input":%s}]}`, id, name, input)
}

func testConfig() config.Config {
	cfg := config.Defaults()
	cfg.ContextEditing.Enabled = false
	// The tests of the proxy's compactions compact at the threshold; the
	// weighing is the engine's (TestCompactionFiresOnlyWhenItPaysBack) and
	// the wire replay's, with the defaults.
	cfg.ContextCompaction.WeighCompactions = false
	return cfg
}

// outgoingMessages decodes the messages of an upstream request.
func outgoingMessages(t *testing.T, body []byte) []map[string]any {
	t.Helper()
	var r struct {
		Messages []map[string]any `json:"messages"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	return r.Messages
}

// otherFields returns every top-level field but messages, raw.
func otherFields(t *testing.T, body []byte) map[string]string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for k, v := range m {
		if k != "messages" {
			out[k] = string(v)
		}
	}
	return out
}

func engineContextNoPreSend() engine.ContextOptions { return engine.ContextOptions{NoPreSend: true} }

// settle waits until the proxy has finished recording the answers it sent:
// the client may read the last byte before the proxy's handler returns.
// It takes every lane's lock once (a request holds its lane's lock until
// its answer is recorded).
func (f *fixture) settle() {
	f.t.Helper()
	f.p.mu.Lock()
	lanes := make([]*lane, 0, len(f.p.lanes))
	for _, l := range f.p.lanes {
		lanes = append(lanes, l)
	}
	f.p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, l := range lanes {
		if err := l.lock(ctx); err != nil {
			f.t.Fatal("a request did not finish recording its answer")
		}
		l.unlock()
	}
}
