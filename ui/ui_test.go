package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/artifacts"
	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/internal/store"
	"github.com/ctxd/ctxd/ledger"
	"github.com/ctxd/ctxd/summarizer"
	"github.com/ctxd/ctxd/workers"
)

func newEngine(t *testing.T) *engine.Engine {
	t.Helper()
	db, err := store.OpenInMemory()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	arts, err := artifacts.Open(db, bytes.Repeat([]byte("u"), artifacts.SecretSize))
	if err != nil {
		t.Fatal(err)
	}
	cps := checkpoint.Open(db, checkpoint.Options{})
	t.Cleanup(func() { _ = cps.Close(); _ = arts.Close() })
	pool, err := workers.New(workers.Options{Size: 1, Queue: 4, DrainTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := config.Defaults()
	cfg.Storage.DataDir = t.TempDir()
	eng, err := engine.New(engine.Options{Config: cfg, Log: cps, Artifacts: arts, Pool: pool, Logger: logger,
		Summarizer: summarizer.New(summarizer.Options{Logger: logger}), OffloadDir: cfg.Storage.DataDir})
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s: %d %s", url, resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// TestDashboardServesTheLedger: the page and its embedded assets, the
// session list paged on the server with each session's savings, the totals,
// and a session's ledger with its waterfall — the figures the engine's
// ledger holds.
func TestDashboardServesTheLedger(t *testing.T) {
	eng := newEngine(t)
	ctx := context.Background()
	for i, id := range []string{"s-a", "s-b", "s-c"} {
		if _, err := eng.CreateSession(ctx, engine.CreateParams{ID: id, Model: "claude-opus-4-8"}); err != nil {
			t.Fatal(err)
		}
		en := ledger.Entry{Kind: ledger.KindRequest, Model: "claude-opus-4-8", Mode: ledger.ModeEnforce, ClientTokens: 100000, SentTokens: 40000,
			Reported: ledger.Usage{CacheRead: 30000, CacheWrite5m: 10000, Output: 100}, Counterfactual: ledger.Usage{CacheRead: 90000, CacheWrite5m: 10000, Output: 100},
			Causes: map[string]uint64{ledger.CauseGrowth: 2000, ledger.CauseCompaction: 8000 + uint64(i)}}
		if err := eng.RecordLedger(ctx, id, en); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(Handler(eng))
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(page), `src="/ui/assets/app.js"`) || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Fatalf("page %s", page)
	}
	for _, a := range []string{"app.js", "style.css"} {
		r, err := http.Get(srv.URL + "/ui/assets/" + a)
		if err != nil || r.StatusCode != 200 {
			t.Fatalf("asset %s: %v %v", a, err, r.StatusCode)
		}
		r.Body.Close()
	}

	var p1, p2 struct {
		Sessions []row  `json:"sessions"`
		Next     string `json:"next"`
	}
	getJSON(t, srv.URL+"/ui/api/sessions?limit=2", &p1)
	getJSON(t, srv.URL+"/ui/api/sessions?limit=2&after="+p1.Next, &p2)
	if len(p1.Sessions) != 2 || p1.Next == "" || len(p2.Sessions) != 1 || p2.Next != "" {
		t.Fatalf("pages %+v / %+v", p1, p2)
	}
	_, tot, _ := eng.Ledger(ctx, "s-a")
	if r := p1.Sessions[0]; r.ID != "s-a" || r.Ledger == nil || math.Abs(r.Ledger.Saved-tot.Saved) > 1e-6 || r.Agent != "api" {
		t.Fatalf("row %+v, ledger totals saved %v", r, tot.Saved)
	}
	var totals struct {
		Sessions int            `json:"sessions"`
		Totals   ledger.Summary `json:"totals"`
	}
	getJSON(t, srv.URL+"/ui/api/totals", &totals)
	if totals.Sessions != 3 || math.Abs(totals.Totals.Saved-3*tot.Saved) > 1e-5 {
		t.Fatalf("totals %+v, want 3 × %v", totals, tot.Saved)
	}
	var s struct {
		Entries   []ledger.Entry `json:"entries"`
		Totals    ledger.Totals  `json:"totals"`
		Waterfall []ledger.Bar   `json:"waterfall"`
	}
	getJSON(t, srv.URL+"/ui/api/sessions/s-b", &s)
	if len(s.Entries) != 1 || s.Totals.CacheWrites[ledger.CauseCompaction] != 8001 || len(s.Waterfall) < 4 || s.Waterfall[0].Label != "without ctxd" {
		t.Fatalf("session s-b: %+v", s)
	}
	if r, _ := http.Get(srv.URL + "/ui/api/sessions/nope"); r.StatusCode != 404 {
		t.Fatalf("unknown session: %d", r.StatusCode)
	}
}
