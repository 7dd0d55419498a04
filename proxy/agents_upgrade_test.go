package proxy

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxd/ctxd/internal/agenttest"
	"github.com/ctxd/ctxd/internal/fakeprovider"
)

// TestCodexUpgradeAnswers pins what ctxd's 426 relies on: Codex, with a
// provider that supports WebSockets, falls back to HTTP after one
// upgrade answered 426, while an upgrade answered 404 (as a server that
// does not know the transport answers) is retried, with back-off, before
// Codex uses HTTP (docs/proxy.md "The WebSocket transport" has the
// figures for 403, 400, 501 and a dropped connection).
func TestCodexUpgradeAnswers(t *testing.T) {
	agenttest.Bin(t, agenttest.Codex)
	rows := []struct {
		status int
		// upgrades: exactly one when once, else more than one.
		once bool
	}{
		{http.StatusUpgradeRequired, true},
		{http.StatusNotFound, false},
	}
	for _, row := range rows {
		t.Run(http.StatusText(row.status), func(t *testing.T) {
			const marker = "CTXD-DONE-UPGRADE"
			p := fakeprovider.Start(t, fakeprovider.Config{Marker: marker})
			u, err := url.Parse(p.URL())
			if err != nil {
				t.Fatal(err)
			}
			rp := httputil.NewSingleHostReverseProxy(u)
			var mu sync.Mutex
			var upgrades []time.Time
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Upgrade") == "" {
					rp.ServeHTTP(w, r)
					return
				}
				mu.Lock()
				upgrades = append(upgrades, time.Now())
				mu.Unlock()
				w.Header().Set("Connection", "close")
				http.Error(w, `{"error":{"message":"no WebSocket here","type":"invalid_request_error"}}`, row.status)
			}))
			defer srv.Close()
			res := agenttest.Run{Agent: agenttest.Codex, BaseURL: srv.URL, Prompt: "Say done.", Timeout: 180e9, WebSockets: true}.Exec(t)
			if res.ExitCode != 0 || !strings.Contains(res.FinalText(), marker) || len(p.Requests()) == 0 {
				agenttest.Log(t, res, p)
				t.Fatalf("exit %d, answer %q", res.ExitCode, res.FinalText())
			}
			mu.Lock()
			defer mu.Unlock()
			if len(upgrades) == 0 {
				t.Fatal("Codex opened no WebSocket")
			}
			wait := p.Requests()[0].Time.Sub(upgrades[0])
			t.Logf("%d: %d upgrades, the first HTTP request %s after the first upgrade", row.status, len(upgrades), wait.Round(time.Millisecond))
			if row.once && len(upgrades) != 1 {
				t.Errorf("%d upgrades, want one", len(upgrades))
			}
			if !row.once && len(upgrades) < 2 {
				t.Errorf("%d upgrade: Codex no longer retries after a %d (docs/proxy.md needs its figures again)", len(upgrades), row.status)
			}
		})
	}
}
