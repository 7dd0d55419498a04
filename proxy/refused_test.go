package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/internal/fakeprovider"
)

// TestRefusedNewConversationLeavesNoState: the provider's own refusals
// (the fake's real 429, 500 and 529 bodies), and a client that leaves
// before the upstream's first byte, leave no session: neither in the
// listing nor as messages; the provider's status and body reach the
// client unchanged. The first accepted request records the conversation.
func TestRefusedNewConversationLeavesNoState(t *testing.T) {
	fp := fakeprovider.Start(t, fakeprovider.Config{})
	f := newFixture(t, testConfig())
	f.cfg.Proxy.Upstreams.Anthropic.BaseURL = fp.URL()
	f.restart()
	listed := func() int {
		t.Helper()
		f.settle()
		page, _, err := f.eng.ListSessionPage(context.Background(), "", 100)
		if err != nil {
			t.Fatal(err)
		}
		return len(page) + len(f.sessions())
	}
	c := newConversation().user("hello")
	for _, st := range []int{429, 500, 529} {
		fp.FailNext(fakeprovider.Fault{Status: st})
		resp, b := f.post(c.body(), nil)
		if resp.StatusCode != st || !strings.Contains(string(b), `"type":"error"`) {
			t.Fatalf("fault %d: the client got %d %s", st, resp.StatusCode, b)
		}
		if n := listed(); n != 0 {
			t.Fatalf("refused %d: %d sessions listed", st, n)
		}
	}
	resp, b := f.post(c.body(), nil)
	id := resp.Header.Get(HeaderSessionID)
	f.settle()
	if info, err := f.eng.Session(context.Background(), id); resp.StatusCode != 200 || err != nil || info.Messages != 2 {
		t.Fatalf("accepted: %d %s; session %+v %v", resp.StatusCode, b, info, err)
	}

	// A client gone before the upstream's first byte.
	arrived, quit := make(chan struct{}, 1), make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		select {
		case <-r.Context().Done():
		case <-quit:
		}
	}))
	defer slow.Close()
	defer close(quit)
	g := newFixture(t, testConfig())
	g.cfg.Proxy.Upstreams.Anthropic.BaseURL = slow.URL
	g.restart()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", g.url+"/v1/messages", strings.NewReader(newConversation().user("hello").body()))
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
	g.settle()
	if ids := g.sessions(); len(ids) != 0 {
		t.Fatalf("a client gone before the first byte left sessions %v", ids)
	}
}
