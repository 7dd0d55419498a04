package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The daemon starts the provider proxy with its listeners, reports it in
// status, records proxied sessions for the daemon API, and drains it at
// SIGTERM; a taken port does not stop the daemon.
func TestProxyListener(t *testing.T) {
	var upstreamHits atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamHits.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"claude-opus-4-8\",\"usage\":{\"input_tokens\":50,\"output_tokens\":1}}}\n\n"+
			"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"+
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hello\"}}\n\n"+
			"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"+
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":3}}\n\n"+
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	}))
	defer up.Close()
	e := newEnv(t, "[proxy]\nlisten = \"127.0.0.1:0\"\n[proxy.upstreams.anthropic]\nbase_url = \""+up.URL+"\"\n"+
		"[proxy.upstreams.openai]\nbase_url = \"http://127.0.0.1:9\"\n")
	p := e.start(t)
	ctx := context.Background()
	st, err := e.client().Status(ctx)
	if err != nil || st.Proxy == nil || st.Proxy.Listen == "" || st.Proxy.Upstream != up.URL {
		t.Fatalf("status proxy %+v, %v", st.Proxy, err)
	}
	// Every upstream, with its base URL and endpoints.
	if u := st.Proxy.Upstreams; len(u) != 2 || u[0].Name != "anthropic" || u[0].BaseURL != up.URL ||
		u[1].Name != "openai" || u[1].BaseURL != "http://127.0.0.1:9" || strings.Join(u[1].Endpoints, " ") != "/v1/responses /v1/chat/completions" {
		t.Fatalf("status upstreams %+v", st.Proxy.Upstreams)
	}
	body := `{"model":"claude-opus-4-8","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	req, _ := http.NewRequest("POST", "http://"+st.Proxy.Listen+"/v1/messages", strings.NewReader(body))
	req.Header.Set("X-Api-Key", "sk-ant-daemon-test-KEY")
	req.Header.Set(proxyHeaderSession, "agent-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(got), "hello") || upstreamHits.Load() != 1 {
		t.Fatalf("through the proxy: %d %s", resp.StatusCode, got)
	}
	id := resp.Header.Get("Ctxd-Session")
	// The answer is recorded once the proxy's handler returns, which may
	// be just after the client read its last byte: poll.
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := e.client().GetSession(ctx, id)
		if err == nil && info.Messages == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the proxied session via the daemon API: %+v, %v", info, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	st, _ = e.client().Status(ctx)
	if st.Proxy.Managed != 1 || st.Proxy.ClientRuleBreaks != 0 {
		t.Errorf("status %+v", st.Proxy)
	}
	// A client request that itself breaks §4a (thinking on, its tool
	// loop's assistant message without thinking) is forwarded as sent and
	// counted in status.
	broken := `{"model":"claude-opus-4-8","max_tokens":100,"stream":true,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[` +
		`{"role":"user","content":"go"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"ls"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"a.go"}]}]}`
	req, _ = http.NewRequest("POST", "http://"+st.Proxy.Listen+"/v1/messages", strings.NewReader(broken))
	req.Header.Set("X-Api-Key", "sk-ant-daemon-test-KEY")
	req.Header.Set(proxyHeaderSession, "agent-2")
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if st, _ = e.client().Status(ctx); st.Proxy.ClientRuleBreaks != 1 || upstreamHits.Load() != 2 {
		t.Errorf("after a client rule break: status %+v, upstream hits %d", st.Proxy, upstreamHits.Load())
	}
	if code := p.signalAndWait(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if strings.Contains(p.stderr.String(), "KEY") {
		t.Error("the key was logged")
	}

	// A taken port: the daemon serves its API and says why the proxy is off.
	e2 := newEnv(t, "[proxy]\nlisten = \""+strings.TrimPrefix(up.URL, "http://")+"\"\n")
	e2.start(t)
	st, err = e2.client().Status(ctx)
	if err != nil || st.Proxy == nil || st.Proxy.Listen != "" || !strings.Contains(st.Proxy.Error, "listen") {
		t.Fatalf("taken port: %+v, %v", st.Proxy, err)
	}
}

const proxyHeaderSession = "X-Ctxd-Session"

// TestProxyCrashCostsOnlyAReRecord: a request's record is durable once the
// daemon has recorded its answer, across a kill -9; a kill -9 right after
// the client read the whole answer (the records may still be trailing)
// costs only their re-record from the client's next request. After every
// restart and the next request, the session holds exactly the client's
// history, in order: nothing lost, nothing twice.
func TestProxyCrashCostsOnlyAReRecord(t *testing.T) {
	var n atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		text := fmt.Sprintf("answer %d", n.Add(1))
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"claude-opus-4-8\",\"usage\":{\"input_tokens\":50,\"output_tokens\":1}}}\n\n"+
			"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"+
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\""+text+"\"}}\n\n"+
			"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"+
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":3}}\n\n"+
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	}))
	defer up.Close()
	e := newEnv(t, "[proxy]\nlisten = \"127.0.0.1:0\"\n[proxy.upstreams.anthropic]\nbase_url = \""+up.URL+"\"\n")
	ctx := context.Background()
	var history []string // the client's messages, as JSON
	var texts []string   // their texts
	id := ""
	// stored waits until the session holds want, or fails after a
	// generous bound.
	stored := func(round int, want []string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			var got []string
			if id != "" {
				got = messageTexts(t, e.client(), id)
			}
			if strings.Join(got, "\n") == strings.Join(want, "\n") {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: session %s holds\n%q\nwant\n%q", round, id, got, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	rounds := 8
	if testing.Short() {
		rounds = 4
	}
	for round := range rounds {
		p := e.start(t)
		st, err := e.client().Status(ctx)
		if err != nil || st.Proxy == nil {
			t.Fatalf("status %+v %v", st, err)
		}
		if round > 0 && round%2 == 0 {
			// The previous round waited for its records before the kill:
			// they survived it, before any request of this run.
			stored(round, texts)
		}
		q := fmt.Sprintf("question %d", round)
		history = append(history, fmt.Sprintf(`{"role":"user","content":%q}`, q))
		texts = append(texts, q)
		body := `{"model":"claude-opus-4-8","max_tokens":100,"stream":true,"messages":[` + strings.Join(history, ",") + `]}`
		req, _ := http.NewRequest("POST", "http://"+st.Proxy.Listen+"/v1/messages", strings.NewReader(body))
		req.Header.Set("X-Api-Key", "sk-ant-daemon-test-KEY")
		req.Header.Set(proxyHeaderSession, "agent-crash")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		i := strings.Index(string(got), `"text":"answer `)
		if resp.StatusCode != 200 || i < 0 {
			t.Fatalf("round %d: %d %s", round, resp.StatusCode, got)
		}
		answer := string(got[i+len(`"text":"`):])
		answer = answer[:strings.IndexByte(answer, '"')]
		if id == "" {
			id = resp.Header.Get("Ctxd-Session")
		} else if h := resp.Header.Get("Ctxd-Session"); h != id {
			t.Fatalf("round %d: session %s, was %s", round, h, id)
		}
		history = append(history, fmt.Sprintf(`{"role":"assistant","content":[{"type":"text","text":%q}]}`, answer))
		texts = append(texts, answer)
		if round%2 == 1 {
			// Kill -9 once the records are written.
			stored(round, texts)
		}
		p.kill9(t)
	}
	p := e.start(t)
	defer p.signalAndWait(t, syscall.SIGTERM)
	if rounds%2 == 0 {
		stored(rounds, texts)
	}
}
