package summarizer

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ctxd/ctxd/config"
)

// TestRedirectToAnotherHostNotFollowed: a summarizer endpoint that answers
// 307 to another host never makes ctxd send that host the key or the
// conversation; the attempt fails naming the redirect, once (no retry).
func TestRedirectToAnotherHostNotFollowed(t *testing.T) {
	var other atomic.Int32
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		other.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer elsewhere.Close()
	var first atomic.Int32
	// 127.0.0.1 and localhost are other hosts to net/http.
	to := strings.Replace(elsewhere.URL, "127.0.0.1", "localhost", 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		first.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		http.Redirect(w, r, to+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer up.Close()
	s := newTestSummarizer()
	b := anthropicBinding("p", up.URL)
	b.Credential = &config.Credential{APIKey: "operator-key-0123456789abcdef"}
	_, err := s.Summarize(context.Background(), []config.Binding{b}, sampleRequest(), nil)
	if err == nil || !strings.Contains(err.Error(), "another host: not followed") {
		t.Fatalf("err %v", err)
	}
	if other.Load() != 0 {
		t.Fatalf("the other host got %d requests", other.Load())
	}
	if first.Load() != 1 {
		t.Fatalf("the endpoint was tried %d times, want 1", first.Load())
	}
}
