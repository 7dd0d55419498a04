package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/internal/bodybuf"
)

// holdingTransport answers every request at once with a streamed text
// answer; the body of a request while hold is set is kept unread (a
// transport still sending it after the answer came), the others read
// whole.
type holdingTransport struct {
	mu   sync.Mutex
	hold bool
	held []io.ReadCloser
	seen [][]byte
}

func (t *holdingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.mu.Lock()
	hold := t.hold
	t.mu.Unlock()
	if hold {
		t.mu.Lock()
		t.held = append(t.held, r.Body)
		t.mu.Unlock()
	} else {
		b, err := io.ReadAll(r.Body)
		_ = r.Body.Close()
		if err != nil {
			return nil, err
		}
		t.mu.Lock()
		t.seen = append(t.seen, b)
		t.mu.Unlock()
	}
	body := sse("", "ok", nil, 100, 5)
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(strings.NewReader(body)), Request: r, ContentLength: -1}, nil
}

// poolConversation is a conversation of ~200 KB (a pooled body) whose
// every tool result is filled with fill.
func poolConversation(fill string) *conversation {
	c := newConversation()
	c.system = fmt.Sprintf(`[{"type":"text","text":"system of %s"}]`, fill)
	c.user("start " + fill)
	for i := 0; i < 20; i++ {
		id := fmt.Sprintf("toolu_%s%03d", fill, i)
		c.assistant(assistantCall(id, "Bash", `{"command":"ls"}`))
		c.results([2]string{id, strings.Repeat(fill+" ", 2000)})
	}
	return c.user("go on")
}

func servePool(t *testing.T, h http.Handler, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest("POST", "http://127.0.0.1:7420/v1/messages", strings.NewReader(body))
	req.Header.Set("X-Api-Key", testKey)
	req.Header.Set(HeaderContextLimit, "1000000")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != 200 || w.Header().Get(HeaderSessionID) == "" {
		t.Fatalf("status %d, session %q, diagnostic %q", w.Code, w.Header().Get(HeaderSessionID), w.Header().Get(HeaderDiagnostic))
	}
	return w
}

// TestALateReadOfTheOutgoingBodyIsTheRequestsOwn: the transport may read
// the outgoing body after the answer reached the client (RoundTripper's
// contract); the client's body buffer it points into is not reused for
// another request until then, and what outlives the request (the held
// credential's system prompt and tools) is not the buffer's bytes.
func TestALateReadOfTheOutgoingBodyIsTheRequestsOwn(t *testing.T) {
	tr := &holdingTransport{hold: true}
	cfg := config.Defaults()
	cfg.ContextEditing.Enabled = false
	p := benchProxy(t, cfg, tr)
	h := p.Handler()
	a, b := poolConversation("alpha"), poolConversation("bravo")
	if n := len(a.body()); n < bodybuf.MinPooled || bodybuf.SizeClass(n) != bodybuf.SizeClass(len(b.body())) {
		t.Fatalf("the two bodies (%d, %d bytes) must be pooled, in one size class", n, len(b.body()))
	}
	idA := servePool(t, h, a.body()).Header().Get(HeaderSessionID)
	tr.mu.Lock()
	tr.hold = false
	tr.mu.Unlock()
	for i := 0; i < 5; i++ { // other requests, which would take a released buffer
		servePool(t, h, b.body())
		b.assistant(assistantText("ok")).user(fmt.Sprintf("more %d", i))
	}
	if len(tr.held) != 1 {
		t.Fatalf("held bodies: %d, want 1", len(tr.held))
	}
	late, err := io.ReadAll(tr.held[0])
	_ = tr.held[0].Close()
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(late) || bytes.Contains(late, []byte("bravo")) || !bytes.Contains(late, []byte("alpha alpha")) {
		t.Fatalf("the late read of the first request's body is not its own (%d bytes, valid JSON %v, holds bravo %v)",
			len(late), json.Valid(late), bytes.Contains(late, []byte("bravo")))
	}
	for i, s := range tr.seen {
		if !json.Valid(s) || bytes.Contains(s, []byte("alpha")) {
			t.Fatalf("request %d's outgoing body is not its own", i+2)
		}
	}
	// The first request's buffer is free now: more requests take it.
	for i := 0; i < 3; i++ {
		b.assistant(assistantText("ok")).user(fmt.Sprintf("last %d", i))
		servePool(t, h, b.body())
	}
	held, ok, err := p.creds.ForSummary(idA, false)
	if !ok || string(held.Cred.System) != `[{"type":"text","text":"system of alpha"}]` {
		t.Fatalf("held system prompt of the first session: %q (%v)", held.Cred.System, err)
	}
	if !bytes.Equal(held.Cred.Tools, []byte(a.tools)) {
		t.Fatalf("held tools of the first session: %q", held.Cred.Tools)
	}
}
