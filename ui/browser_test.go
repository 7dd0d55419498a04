package ui

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/ledger"
)

// chromium runs headless Chromium with args and returns its standard
// output: the page's DOM after its scripts ran (--dump-dom), or nothing
// for a screenshot. Without Chromium the test skips, or fails under
// CI=true (.ci/run installs it).
func chromium(t *testing.T, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium is not installed (apt-get install chromium)")
		}
		t.Skip("chromium is not installed (apt-get install chromium)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=8000"}
	out, err := exec.CommandContext(ctx, bin, append(base, args...)...).Output()
	if err != nil {
		t.Fatalf("chromium %v: %v", args, err)
	}
	return string(out)
}

// figure is the text of the element with id in dom.
func figure(t *testing.T, dom, id string) string {
	t.Helper()
	m := regexp.MustCompile(`id="` + id + `"[^>]*>([^<]*)<`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("no #%s in the page:\n%.2000s", id, dom)
	}
	return m[1]
}

// TestDashboardInChromium loads the dashboard in headless Chromium against
// an engine with recorded ledgers and checks the figures the page shows
// against the engine's (what the API serves): the totals, a row per
// session with its saving, and a session's page with its totals, chart and
// waterfall; then takes a screenshot (CTXD_SCREENSHOT=FILE keeps it, as
// docs/dashboard.png was made).
func TestDashboardInChromium(t *testing.T) {
	eng := newEngine(t)
	ctx := context.Background()
	for i, id := range []string{"p-alpha", "p-beta"} {
		if _, err := eng.CreateSession(ctx, engine.CreateParams{ID: id, Model: "claude-opus-4-8", Labels: map[string]string{"proxy": "anthropic"}}); err != nil {
			t.Fatal(err)
		}
		for k := range 12 {
			grow := uint64(8000 * (k + 1))
			en := ledger.Entry{Kind: ledger.KindRequest, Model: "claude-opus-4-8", Mode: ledger.ModeEnforce, ClientTokens: 20000 + grow, SentTokens: 20000 + grow/3,
				Reported: ledger.Usage{CacheRead: 18000 + grow/3, CacheWrite5m: 2000, Output: 300}, Counterfactual: ledger.Usage{CacheRead: 18000 + grow, CacheWrite5m: 2000, Output: 300},
				Causes: map[string]uint64{ledger.CauseGrowth: 1500, ledger.CausePass: 500}, ContextLimit: 200000, Threshold: 140000}
			if k == 6 {
				en.Rewrites = []string{ledger.CauseCompaction}
				en.Causes = map[string]uint64{ledger.CauseGrowth: 1000, ledger.CauseCompaction: 1000 + uint64(i)}
			}
			if err := eng.RecordLedger(ctx, id, en); err != nil {
				t.Fatal(err)
			}
		}
		if err := eng.RecordLedger(ctx, id, ledger.Entry{Kind: ledger.KindSummarizer, Model: "claude-opus-4-8", Mode: ledger.ModeEnforce,
			Credential: ledger.CredentialClient, Reported: ledger.Usage{CacheRead: 60000, Output: 1500}}); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: Handler(eng)}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	base := "http://" + l.Addr().String() + "/ui/"

	sum, _, err := eng.LedgerTotals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	usd := func(v float64) string {
		if v < 0 {
			return fmt.Sprintf("-$%.4f", -v)
		}
		return fmt.Sprintf("$%.4f", v)
	}
	dom := chromium(t, "--dump-dom", base)
	if got := figure(t, dom, "t-saved"); got != usd(sum.Saved) {
		t.Errorf("page total saved %s, engine %s", got, usd(sum.Saved))
	}
	if got := figure(t, dom, "t-without"); got != usd(sum.WithoutCtxd) {
		t.Errorf("page total without ctxd %s, engine %s", got, usd(sum.WithoutCtxd))
	}
	for _, id := range []string{"p-alpha", "p-beta"} {
		if !strings.Contains(dom, `data-id="`+id+`"`) {
			t.Errorf("no row for %s", id)
		}
	}

	_, tot, err := eng.Ledger(ctx, "p-beta")
	if err != nil {
		t.Fatal(err)
	}
	page := base + "#/s/p-beta"
	dom = chromium(t, "--dump-dom", page)
	for id, want := range map[string]string{"s-saved": usd(tot.Saved), "s-paid": usd(tot.Paid), "s-without": usd(tot.WithoutCtxd),
		"s-summarizer": usd(tot.Summarizer), "s-requests": fmt.Sprint(tot.Requests)} {
		if got := figure(t, dom, id); got != want {
			t.Errorf("session page #%s = %s, engine %s", id, got, want)
		}
	}
	if !strings.Contains(dom, `id="context-chart"`) || !strings.Contains(dom, `id="window"`) || strings.Count(dom, `class="wf"`) != len(tot.Waterfall()) || !strings.Contains(dom, ">C<") {
		t.Errorf("session page lacks its chart, window line, waterfall bars (%d) or compaction mark:\n%.3000s", len(tot.Waterfall()), dom)
	}

	shot := os.Getenv("CTXD_SCREENSHOT")
	if shot == "" {
		shot = filepath.Join(t.TempDir(), "dashboard.png")
	}
	chromium(t, "--screenshot="+shot, "--window-size=1100,1300", page)
	if st, err := os.Stat(shot); err != nil || st.Size() < 5000 {
		t.Fatalf("screenshot %s: %v", shot, err)
	}
}
