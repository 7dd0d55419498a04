package main

// Hostile clients against the real daemon: a client's credential echoed by
// the upstream is found nowhere afterwards, and a listener full of idle
// connections and streams leaves the owner's socket answering.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxd/ctxd/api"
)

// The client credentials of the echo run: no known key shape, so only the
// credentials held on the redactor can mask them.
const (
	echoClientKey   = "hunter2-plain-client-credential-7f3a9c51"
	echoClientToken = "oauth-plain-token-5c2e8d17b9a4f0e3"
)

// streamAnswer is a streamed text answer with usage.
func streamAnswer(text string, input int) string {
	return fmt.Sprintf("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"tiny-model\",\"usage\":{\"input_tokens\":%d,\"output_tokens\":1}}}\n\n", input) +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" + text + "\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":3}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
}

// TestEchoedClientKeyFoundNowhere: an upstream that echoes the client's
// credential in its errors — to the summarizer calls made with it, and to
// every other managed request — and a full grep afterwards: every file in
// the data directory, every log line, and the daemon API's answers
// (status, sessions, events, metrics) hold no part of either credential.
func TestEchoedClientKeyFoundNowhere(t *testing.T) {
	var n atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		cred := r.Header.Get("X-Api-Key")
		if cred == "" {
			cred = r.Header.Get("Authorization")
		}
		w.Header().Set("Content-Type", "application/json")
		if bytes.Contains(body, []byte("checkpoint summary")) {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, `{"type":"error","error":{"type":"authentication_error","message":"invalid credential: %s"}}`, cred)
			return
		}
		if n.Add(1)%2 == 0 {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"type":"error","error":{"type":"invalid_request_error","message":"request refused for %s (reversed %s)"}}`, cred, reverse(cred))
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, streamAnswer("ok", 5000))
	}))
	defer up.Close()
	e := newEnv(t, baseConfig+fmt.Sprintf(`
[proxy.upstreams.anthropic]
base_url = %q
[models."tiny-model"]
context_limit = 6000
`, up.URL))
	p := e.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := e.client().Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	post := func(hdr http.Header, msgs []string) {
		body := `{"model":"tiny-model","max_tokens":100,"stream":true,"messages":[` + strings.Join(msgs, ",") + `]}`
		req, _ := http.NewRequest("POST", "http://"+st.Proxy.Listen+"/v1/messages", strings.NewReader(body))
		req.Header = hdr.Clone()
		req.Header.Set("Anthropic-Version", "2023-06-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	for _, hdr := range []http.Header{{"X-Api-Key": {echoClientKey}}, {"Authorization": {"Bearer " + echoClientToken}}} {
		msgs := []string{`{"role":"user","content":"investigate the failing build"}`}
		for i := 0; i < 6; i++ {
			post(hdr, msgs)
			id := fmt.Sprintf("toolu_%d", i)
			msgs = append(msgs, `{"role":"assistant","content":"ok"}`, `{"role":"user","content":"step `+id+` `+strings.Repeat("output line ", 300)+`"}`)
		}
	}
	time.Sleep(500 * time.Millisecond) // background compactions finish
	c := e.client()
	var texts []string
	add := func(what string, v any) {
		b, _ := json.Marshal(v)
		texts = append(texts, what+": "+string(b))
	}
	st, _ = c.Status(ctx)
	add("status", st)
	list, err := c.ListSessions(ctx)
	if err != nil || len(list) == 0 {
		t.Fatalf("sessions %+v %v", list, err)
	}
	add("sessions", list)
	sawError := false
	for _, s := range list {
		info, _ := c.GetSession(ctx, s.ID)
		add("session", info)
		_ = c.StreamEvents(ctx, s.ID, api.EventsOptions{}, func(ev api.Event) error {
			add("event", ev)
			sawError = sawError || strings.Contains(string(ev.Data), "request refused for")
			return nil
		})
	}
	m, _ := c.Metrics(ctx)
	texts = append(texts, "metrics: "+string(m))
	if code := p.signalAndWait(t, os.Interrupt); code != 0 {
		t.Fatalf("exit %d", code)
	}
	texts = append(texts, "log: "+p.stderr.String())
	if !sawError || !strings.Contains(p.stderr.String(), "invalid credential: ") {
		t.Fatalf("the run did not carry the echoes where they are looked for (events with the upstream's error: %v; the summarizer's failure in the log)", sawError)
	}
	// Every file of the data directory, after the daemon stopped.
	err = filepath.WalkDir(e.dataDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		texts = append(texts, "file "+path+": "+string(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, txt := range texts {
		for _, secret := range []string{echoClientKey, echoClientToken} {
			for _, part := range []string{secret, secret[8:20], reverse(secret)[4:16]} {
				if strings.Contains(txt, part) {
					t.Errorf("%q (of a client credential) found in %.200s", part, txt)
				}
			}
		}
	}
}

func reverse(s string) string {
	b := []byte(s)
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	return string(b)
}

// TestOwnerSocketAnswersUnderLoad: 1,000 idle connections and 300 open
// streams on the proxy, and the owner's unix socket still answers status
// within a second. (A connection over the cap is refused 503:
// internal/netlimit's TestListenerCapAndOwnerShare; an idle connection that
// sends nothing is closed after the 10 s header timeout.)
func TestOwnerSocketAnswersUnderLoad(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	stop := func() { once.Do(func() { close(release) }) }
	var streams atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		_, _ = io.WriteString(w, "event: ping\ndata: {\"type\":\"ping\"}\n\n")
		w.(http.Flusher).Flush()
		streams.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer up.Close()
	defer stop()
	e := newEnv(t, baseConfig+fmt.Sprintf(`
[proxy.upstreams.anthropic]
base_url = %q
[proxy.limits]
connections = 1300
`, up.URL))
	e.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := e.client().Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for i := 0; i < 1000; i++ {
		c, err := net.Dial("tcp", st.Proxy.Listen)
		if err != nil {
			t.Fatalf("idle connection %d: %v", i, err)
		}
		conns = append(conns, c)
	}
	var wg sync.WaitGroup
	var refused atomic.Int32
	for i := 0; i < 300; i++ {
		wg.Go(func() {
			body := fmt.Sprintf(`{"model":"claude-opus-4-8","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"stream %d"}]}`, i)
			req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+st.Proxy.Listen+"/v1/messages", strings.NewReader(body))
			req.Header.Set("X-Api-Key", "sk-ant-load-test-key")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			if resp.StatusCode == http.StatusServiceUnavailable {
				refused.Add(1)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		})
	}
	deadline := time.Now().Add(20 * time.Second)
	for streams.Load()+refused.Load() < 300 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	for i := 0; i < 5; i++ {
		start := time.Now()
		sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := e.client().Status(sctx)
		scancel()
		if err != nil || time.Since(start) > time.Second {
			t.Fatalf("the owner's socket under load: %v after %s", err, time.Since(start))
		}
	}
	if streams.Load() != 300 || refused.Load() != 0 {
		t.Fatalf("%d streams open and %d refused of 300", streams.Load(), refused.Load())
	}
	stop()
	cancel()
	wg.Wait()
}

// TestDaemonAPISlowBodyAndIdle: on the daemon's unix socket a body that
// stops arriving is answered 408 request_timeout naming the limits, and an
// idle keep-alive connection is closed after daemon.limits.idle_timeout_ms.
func TestDaemonAPISlowBodyAndIdle(t *testing.T) {
	e := newEnv(t, baseConfig+`
[daemon.limits]
body_timeout_ms = 300
body_min_rate = 1000
idle_timeout_ms = 500
`)
	e.start(t)
	c, err := net.Dial("unix", e.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(c, "POST /v1/sessions HTTP/1.1\r\nHost: ctxd\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"id\":")
	b, _ := io.ReadAll(c)
	if !strings.HasPrefix(string(b), "HTTP/1.1 408") || !strings.Contains(string(b), `"request_timeout"`) || !strings.Contains(string(b), "daemon.limits.body_timeout_ms") {
		t.Fatalf("a stalled body: %q", b)
	}
	idle, err := net.Dial("unix", e.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	_ = idle.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(idle, "GET /v1/status HTTP/1.1\r\nHost: ctxd\r\n\r\n")
	start := time.Now()
	b, _ = io.ReadAll(idle) // the answer, then EOF when the idle connection is closed
	if !strings.HasPrefix(string(b), "HTTP/1.1 200") || time.Since(start) > 5*time.Second {
		t.Fatalf("idle keep-alive connection: %q after %s", b[:min(len(b), 40)], time.Since(start))
	}
}
