package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/internal/bodybuf"
)

// rawRequest writes head (and body) on a new connection to the fixture's
// listener and reads the answer, failing after wait.
func rawRequest(t *testing.T, f *fixture, head, body string, wait time.Duration) (*http.Response, string) {
	t.Helper()
	host := strings.TrimPrefix(f.url, "http://")
	conn, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(wait))
	if _, err := io.WriteString(conn, strings.ReplaceAll(head, "HOST", host)+body); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer within %s: %v", wait, err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return resp, string(b)
}

// TestMessageAndBlockLimits: a request over proxy.limits.messages or
// proxy.limits.content_blocks is answered 413 naming the key, before
// anything is parsed or recorded; nothing reaches the upstream.
func TestMessageAndBlockLimits(t *testing.T) {
	cfg := testConfig()
	cfg.Proxy.Limits.Messages = 5
	cfg.Proxy.Limits.ContentBlocks = 8
	f := newFixture(t, cfg)
	c := newConversation().user("a").assistant(assistantText("b")).user("c").assistant(assistantText("d")).user("e").assistant(assistantText("f")).user("g")
	resp, b := f.post(c.body(), nil)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "proxy.limits.messages") || !strings.Contains(string(b), `"request_too_large"`) {
		t.Fatalf("7 messages: %d %s", resp.StatusCode, b)
	}
	blocks := strings.Repeat(`{"type":"text","text":"x"},`, 9)
	body := `{"model":"claude-opus-4-8","max_tokens":10,"messages":[{"role":"user","content":[` + strings.TrimSuffix(blocks, ",") + `]}]}`
	resp, b = f.post(body, nil)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "proxy.limits.content_blocks") {
		t.Fatalf("9 blocks: %d %s", resp.StatusCode, b)
	}
	if n := len(f.up.requests()); n != 0 {
		t.Errorf("%d requests reached the upstream", n)
	}
	if ids, _ := f.eng.ListSessions(context.Background()); len(ids) != 0 {
		t.Errorf("refused requests left sessions %v", ids)
	}
	// Within the limits: served.
	resp, b = f.post(newConversation().user("a").body(), nil)
	if resp.StatusCode != 200 {
		t.Fatalf("within the limits: %d %s", resp.StatusCode, b)
	}
}

// TestSlowBodyRefused: a body that stops arriving is answered 408 naming
// proxy.limits.body_timeout_ms once the wait passed, not held open; a body
// that trickles under body_min_rate likewise.
func TestSlowBodyRefused(t *testing.T) {
	cfg := testConfig()
	cfg.Proxy.Limits.BodyTimeoutMS = 300
	cfg.Proxy.Limits.BodyMinRate = 1000
	f := newFixture(t, cfg)
	head := "POST /v1/messages HTTP/1.1\r\nHost: HOST\r\nX-Api-Key: " + testKey + "\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
	resp, b := rawRequest(t, f, head, `{"model":"claude-opus-4-8","messages":[`, 5*time.Second)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(b, "proxy.limits.body_timeout_ms") || !strings.Contains(b, "proxy.limits.body_min_rate") || !resp.Close {
		t.Fatalf("stalled body: %d close=%v %s", resp.StatusCode, resp.Close, b)
	}
	// A trickle: 50 bytes every 100 ms (500 bytes/s, under 1000).
	host := strings.TrimPrefix(f.url, "http://")
	conn, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(conn, strings.ReplaceAll(head, "HOST", host))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 80; i++ {
			if _, err := io.WriteString(conn, strings.Repeat(" ", 50)); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	resp, err = http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("trickled body: no answer: %v", err)
	}
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("trickled body: %d", resp.StatusCode)
	}
	_ = conn.Close()
	<-done
	if n := len(f.up.requests()); n != 0 {
		t.Errorf("%d requests reached the upstream", n)
	}
}

// TestAnnouncedLengthNotAllocated: a client that announces a 64 MiB body
// and sends a few bytes makes the proxy hold about what it sent, not what
// it announced (bodybuf.Read grows its buffer with the bytes that arrive).
func TestAnnouncedLengthNotAllocated(t *testing.T) {
	r := httptest.NewRequest("POST", "/v1/messages", io.MultiReader(strings.NewReader(strings.Repeat("x", 1000)), errReader{}))
	r.ContentLength = 64 << 20
	w := httptest.NewRecorder()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, _, err := bodybuf.Read(w, r, 64<<20)
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Fatal("a cut body read without error")
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 4<<20 {
		t.Errorf("1000 bytes sent of 64 MiB announced: %d bytes allocated", got)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }

// TestTunnelsAndUncleanPathsRefused: CONNECT and a path with dot segments
// (which the upstream would resolve to a managed endpoint) are refused 403
// with a message naming why, an Upgrade is declined 426
// (TestWebSocketUpgradeDeclined); nothing is forwarded.
func TestTunnelsAndUncleanPathsRefused(t *testing.T) {
	f := newFixture(t, testConfig())
	for _, c := range []struct {
		head, want string
		status     int
	}{
		{"CONNECT example.com:443 HTTP/1.1\r\nHost: HOST\r\n\r\n", "CONNECT", http.StatusForbidden},
		{"GET /v1/models HTTP/1.1\r\nHost: HOST\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", "upgrade", http.StatusUpgradeRequired},
		{"POST /v1/x/../messages HTTP/1.1\r\nHost: HOST\r\nContent-Length: 2\r\n\r\n{}", "unclean path", http.StatusForbidden},
		{"POST /v1/x/%2e%2e/messages HTTP/1.1\r\nHost: HOST\r\nContent-Length: 2\r\n\r\n{}", "unclean path", http.StatusForbidden},
		// A web page's upgrade is refused like any request of a web page.
		{"GET /v1/responses HTTP/1.1\r\nHost: HOST\r\nOrigin: http://evil.example\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", "web pages", http.StatusForbidden},
	} {
		resp, b := rawRequest(t, f, c.head, "", 5*time.Second)
		if resp.StatusCode != c.status || !strings.Contains(b, c.want) {
			t.Errorf("%q: %d %s", strings.SplitN(c.head, "\r\n", 2)[0], resp.StatusCode, b)
		}
	}
	if n := len(f.up.requests()); n != 0 {
		t.Errorf("%d requests reached the upstream", n)
	}
}

// TestStreamIdleTimeout: an upstream that starts a stream and then sends
// nothing is cut after proxy.upstreams.anthropic.stream_idle_timeout_ms;
// the client's connection does not hang.
func TestStreamIdleTimeout(t *testing.T) {
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		_, _ = io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"claude-opus-4-8\",\"usage\":{\"input_tokens\":1}}}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hang.Close()
	defer close(release)
	cfg := testConfig()
	cfg.Proxy.Upstreams.Anthropic.StreamIdleTimeoutMS = 300
	f := newFixture(t, cfg)
	f.cfg.Proxy.Upstreams.Anthropic.BaseURL = hang.URL
	_ = f.hs.Close()
	f.start()
	req, _ := http.NewRequest("POST", f.url+"/v1/messages", strings.NewReader(newConversation().user("hi").body()))
	req.Header.Set("X-Api-Key", testKey)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	cl := &http.Client{Timeout: 10 * time.Second}
	start := time.Now()
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err == nil || time.Since(start) > 8*time.Second {
		t.Fatalf("the stalled stream was not cut by the idle timeout (err %v after %s)", err, time.Since(start))
	}
	if !strings.Contains(f.logs.String(), "stream_idle_timeout_ms") {
		t.Errorf("the log does not name the limit:\n%s", f.logs.String())
	}
}

// answer401 is an upstream that refuses every request's credential.
type answer401 struct{}

func (answer401) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
	}
	return &http.Response{StatusCode: 401, Header: http.Header{"Content-Type": {"application/json"}}, Request: r,
		Body: io.NopCloser(strings.NewReader(authError))}, nil
}

// FuzzHostileBody: any body on a managed endpoint, from a client the
// upstream refuses, is answered (never a panic), costs no stored state,
// and is refused by the limits when over them. The seeds are the hostile
// bodies of the attack: deep nesting, many tiny blocks, many messages, a
// long string, broken JSON.
func FuzzHostileBody(f *testing.F) {
	f.Add(`{"model":"m","messages":[{"role":"user","content":[` + strings.TrimSuffix(strings.Repeat(`{"type":"text","text":"x"},`, 3000), ",") + `]}]}`)
	f.Add(`{"model":"m","messages":[` + strings.TrimSuffix(strings.Repeat(`{"role":"user","content":"x"},`, 3000), ",") + `]}`)
	f.Add(`{"model":"m","messages":[{"role":"user","content":` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `}]}`)
	f.Add(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("y", 1<<20) + `"}]}`)
	f.Add(`{"model":"m","messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"x","content":[[[[`)
	f.Add(`{"messages":"x","messages":[]}`)
	cfg := config.Defaults()
	cfg.Proxy.Limits.Messages = 2000
	cfg.Proxy.Limits.ContentBlocks = 2000
	p := benchProxy(f, cfg, answer401{})
	h := p.Handler()
	f.Fuzz(func(t *testing.T, body string) {
		req := httptest.NewRequest("POST", "http://127.0.0.1:7420/v1/messages", strings.NewReader(body))
		req.Header.Set("X-Api-Key", "fuzz-client-key-0123456789")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		switch w.Code {
		case 401, 400, 403, 413:
		default:
			t.Fatalf("status %d: %s", w.Code, w.Body.String())
		}
		// Over the block limit and parsed: a body that is not JSON is
		// forwarded as sent (it costs one validity scan, bounded by
		// proxy.limits.body_bytes), for the provider to refuse.
		if strings.Count(body, `"type"`) > 2000 && w.Code == 401 && strings.Contains(body, `"messages":[{"role":"user","content":[{"type"`) && !strings.Contains(body, `\`) && json.Valid([]byte(body)) {
			t.Fatalf("over proxy.limits.content_blocks, yet forwarded")
		}
		if ids, _ := p.eng.ListSessions(context.Background()); len(ids) != 0 {
			t.Fatalf("a refused client left sessions %v", ids)
		}
	})
}

// TestHeaderBytesLimitExact: proxy.limits.header_bytes is exact. A request
// whose line and headers are exactly the limit is forwarded; one byte more
// is answered 431 in the API's error format naming the key, though
// net/http alone would read 4096 bytes more; a header far past that gets
// net/http's own 431. Nothing refused reaches the upstream.
func TestHeaderBytesLimitExact(t *testing.T) {
	const limit = 8192
	cfg := testConfig()
	cfg.Proxy.Limits.HeaderBytes = limit
	f := newFixture(t, cfg)
	body := newConversation().user("hello").body()
	host := strings.TrimPrefix(f.url, "http://")
	// head is a request whose line and headers (the blank line that ends
	// them aside) are size bytes.
	head := func(size int) string {
		h := "POST /v1/messages HTTP/1.1\r\nHost: " + host + "\r\nContent-Type: application/json\r\nX-Api-Key: " + testKey +
			"\r\nAnthropic-Version: 2023-06-01\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n"
		pad := size - len(h) - len("X-Pad: \r\n")
		return h + "X-Pad: " + strings.Repeat("p", pad) + "\r\n\r\n"
	}
	resp, b := rawRequest(t, f, head(limit), body, 10*time.Second)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("headers of exactly the limit: %d %s", resp.StatusCode, b)
	}
	if n := len(f.up.requests()); n != 1 {
		t.Fatalf("%d requests reached the upstream, want 1", n)
	}
	for _, size := range []int{limit + 1, limit + 3000} {
		resp, b = rawRequest(t, f, head(size), body, 10*time.Second)
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || !strings.Contains(b, "proxy.limits.header_bytes") || !strings.Contains(b, `"request_too_large"`) {
			t.Fatalf("headers of %d bytes: %d %s", size, resp.StatusCode, b)
		}
	}
	resp, b = rawRequest(t, f, head(64<<10), body, 10*time.Second)
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("headers of 64 KiB: %d %s", resp.StatusCode, b)
	}
	if n := len(f.up.requests()); n != 1 {
		t.Errorf("%d requests reached the upstream, want 1", n)
	}
}

// With the default limits a request of more messages than the old default
// (20,000) but within the Messages API's own 100,000 is served: ctxd
// refuses no request the provider would take for its count.
func TestDefaultLimitsTakeWhatTheProviderTakes(t *testing.T) {
	f := newFixture(t, testConfig())
	c := newConversation()
	for i := range 10001 {
		c.user(fmt.Sprintf("q%d", i))
		c.assistant(assistantText("a"))
	}
	c.user("last")
	resp, b := f.post(c.body(), nil)
	if resp.StatusCode != 200 {
		t.Fatalf("20,003 messages: %d %.300s", resp.StatusCode, b)
	}
}
