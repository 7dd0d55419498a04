package netlimit

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestListenerCapAndOwnerShare: past Max open connections a new one is
// answered the 503 refusal and closed; the owner's share stays free for
// the owner when the others filled theirs; a closed connection frees its
// place.
func TestListenerCapAndOwnerShare(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var owner atomic.Bool
	l := &Listener{Listener: inner, Max: 3, OwnerShare: 1, IsOwner: func(net.Conn) bool { return owner.Load() },
		Refusal: Refusal503([]byte(`{"error":"the limit (x.connections)"}`))}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	addr := inner.Addr().String()
	get := func() (*http.Response, net.Conn) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		_, _ = io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return resp, c
	}
	var held []net.Conn
	for i := 0; i < 2; i++ { // the others' share: 3 - 1
		resp, c := get()
		if resp.StatusCode != 200 {
			t.Fatalf("connection %d: %d", i, resp.StatusCode)
		}
		held = append(held, c)
	}
	resp, c := get()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a third other connection: %d, want 503", resp.StatusCode)
	}
	_ = c.Close()
	owner.Store(true)
	resp, oc := get()
	if resp.StatusCode != 200 {
		t.Fatalf("the owner's connection with the others' share full: %d", resp.StatusCode)
	}
	resp, c = get()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a fourth connection: %d, want 503", resp.StatusCode)
	}
	_ = c.Close()
	if st := l.Stats(); st.Open != 3 || st.Others != 2 || st.Refused != 2 {
		t.Fatalf("stats %+v", st)
	}
	_ = oc.Close()
	owner.Store(false)
	_ = held[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for l.Stats().Open > 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if resp, _ := get(); resp.StatusCode != 200 {
		t.Fatalf("after two closed: %d", resp.StatusCode)
	}
}

// TestBodyTimer: a body that stops is cut after the grace with
// ErrBodyTimeout; one that keeps the rate reads whole; the deadline is
// cleared once the body ended.
func TestBodyTimer(t *testing.T) {
	errs := make(chan error, 4)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := NewBodyTimer(w, r, 200*time.Millisecond, 1000)
		_, err := io.ReadAll(b)
		errs <- err
		time.Sleep(400 * time.Millisecond) // past every body deadline
		_, _ = io.WriteString(w, "done")
	})}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	c, _ := net.Dial("tcp", ln.Addr().String())
	defer c.Close()
	_, _ = io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")
	select {
	case err := <-errs:
		if err == nil || !strings.Contains(err.Error(), ErrBodyTimeout.Error()) {
			t.Fatalf("stalled body: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a stalled body was not cut")
	}
	c2, _ := net.Dial("tcp", ln.Addr().String())
	defer c2.Close()
	_ = c2.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(c2, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
	if err := <-errs; err != nil {
		t.Fatalf("a whole body: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c2), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the answer after the body: %v", err)
	}
}

// TestHeaderBytesCountsWhatWasSent: HeaderBytes of a request read by
// net/http equals the bytes of its request line and headers on the wire
// (the blank line that ends them aside).
func TestHeaderBytesCountsWhatWasSent(t *testing.T) {
	raw := "POST /v1/messages?beta=true HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nX-Api-Key: sk-x\r\nAccept: a\r\nAccept: b\r\nContent-Length: 0\r\n\r\n"
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := HeaderBytes(r), len(raw)-2; got != want {
		t.Fatalf("HeaderBytes = %d, want %d", got, want)
	}
}
