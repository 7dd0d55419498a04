package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestAnswerNotRecordedSaysWhy: a client gone before the upstream's
// first byte on a recorded conversation leaves no answer to record; the
// log says so, with the reason, not with an empty error.
func TestAnswerNotRecordedSaysWhy(t *testing.T) {
	arrived, quit := make(chan struct{}, 1), make(chan struct{})
	var n atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		if n.Add(1) == 1 {
			rp := textAnswer("ok")
			if rp.stream {
				w.Header().Set("Content-Type", "text/event-stream")
			} else {
				w.Header().Set("Content-Type", "application/json")
			}
			_, _ = io.WriteString(w, rp.body)
			return
		}
		select {
		case arrived <- struct{}{}:
		default:
		}
		select {
		case <-r.Context().Done():
		case <-quit:
		}
	}))
	defer up.Close()
	defer close(quit)
	f := newFixture(t, testConfig())
	f.cfg.Proxy.Upstreams.Anthropic.BaseURL = up.URL
	f.restart()
	c := newConversation().user("hello")
	resp, _ := f.post(c.body(), nil)
	if resp.StatusCode != 200 || resp.Header.Get(HeaderSessionID) == "" {
		t.Fatalf("first request: %d", resp.StatusCode)
	}
	f.settle()
	c.assistant(assistantText("ok")).user("and now?")
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", f.url+"/v1/messages", strings.NewReader(c.body()))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", testKey)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
		}
	}()
	<-arrived
	cancel()
	<-done
	f.settle() // the request holds its lane until its answer's record ran
	var line string
	for _, l := range strings.Split(f.logs.String(), "\n") {
		if strings.Contains(l, "answer not recorded") {
			line = l
		}
	}
	if line == "" || strings.Contains(line, "<nil>") || !strings.Contains(line, "reason=") {
		t.Fatalf("the log line gives no reason: %q", line)
	}
}
