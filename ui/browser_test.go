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
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/ledger"
	"github.com/ctxd/ctxd/server"
	"github.com/ctxd/ctxd/trigger"
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
	// The one summarizer binding is down (nothing listens on its port):
	// the compaction below is written by the extractive fallback, and
	// says so in a diagnostic.
	down, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	downURL := "http://" + down.Addr().String()
	_ = down.Close()
	t.Setenv("CTXD_UI_TEST_KEY", "sk-ant-test-0123456789")
	eng := newEngine(t, func(c *config.Config) {
		c.Summarizer.Bindings = []config.Binding{{Name: "down", Provider: config.ProviderAnthropic, Model: "claude-haiku-4-5", BaseURL: downURL, APIKeyEnv: "CTXD_UI_TEST_KEY"}}
	})
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
			switch k {
			case 3:
				en.Rewrites = []string{ledger.CausePass}
			case 6:
				en.Rewrites = []string{ledger.CauseCompaction}
				en.Causes = map[string]uint64{ledger.CauseGrowth: 1000, ledger.CauseCompaction: 1000 + uint64(i)}
			case 9:
				en.Rewrites = []string{ledger.CauseOffload}
				en.Causes = map[string]uint64{ledger.CauseGrowth: 1200, ledger.CauseOffload: 800}
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
	// p-beta has a history and a compaction (the extractive summarizer),
	// which its page shows with what the summary replaced: the messages of
	// seq 14 to 25 (its 13 ledger entries came first).
	var msgs []history.Message
	for k := range 6 {
		msgs = append(msgs, history.Message{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: fmt.Sprintf("Please run step %d of the migration and report the row counts.", k+1)}}},
			history.Message{Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockText, Text: fmt.Sprintf("Step %d done: %d rows moved, no errors.", k+1, 1000*(k+1))}}})
	}
	if _, err := eng.Append(ctx, "p-beta", msgs); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Compact(ctx, "p-beta", trigger.Manual, true); err != nil {
		t.Fatal(err)
	}
	cps, err := eng.Checkpoints(ctx, "p-beta")
	if err != nil || len(cps) != 1 {
		t.Fatalf("p-beta checkpoints %v, %v", cps, err)
	}
	// Then p-beta is tried in observe mode for two requests (the client's
	// bytes sent, ctxd's request projected) and turned on again.
	if err := eng.SetMode(ctx, "p-beta", ledger.ModeObserve); err != nil {
		t.Fatal(err)
	}
	for k := range 2 {
		grow := uint64(4000 * k)
		if err := eng.RecordLedger(ctx, "p-beta", ledger.Entry{Kind: ledger.KindRequest, Model: "claude-opus-4-8", Mode: ledger.ModeObserve, ClientTokens: 120000 + grow, SentTokens: 45000 + grow,
			Reported: ledger.Usage{CacheRead: 118000 + grow, CacheWrite5m: 2000, Output: 300}, Counterfactual: ledger.Usage{CacheRead: 43000 + grow, CacheWrite5m: 2000, Output: 300},
			Causes: map[string]uint64{ledger.CauseGrowth: 2000}, ContextLimit: 200000, Threshold: 140000}); err != nil {
			t.Fatal(err)
		}
	}
	if err := eng.SetMode(ctx, "p-beta", ledger.ModeEnforce); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Once the page's event stream is open (its first flush), a change
	// the page has not read: on the list, a new session; on the session
	// page, a new request of it. The page shows it without a reload only
	// if it follows the stream (its fallback poll is every 30 s, past the
	// virtual-time budget).
	var streams atomic.Int32
	changes := []func(){
		func() {
			if _, err := eng.CreateSession(ctx, engine.CreateParams{ID: "p-gamma", Model: "claude-opus-4-8", Labels: map[string]string{"proxy": "anthropic"}}); err != nil {
				t.Error(err)
			}
		},
		func() {
			if err := eng.RecordLedger(ctx, "p-beta", ledger.Entry{Kind: ledger.KindRequest, Model: "claude-opus-4-8", Mode: ledger.ModeEnforce, ClientTokens: 130000, SentTokens: 50000,
				Reported: ledger.Usage{CacheRead: 48000, CacheWrite5m: 2000, Output: 300}, Counterfactual: ledger.Usage{CacheRead: 128000, CacheWrite5m: 2000, Output: 300},
				Causes: map[string]uint64{ledger.CauseGrowth: 2000}, ContextLimit: 200000, Threshold: 140000}); err != nil {
				t.Error(err)
			}
		},
	}
	// Headless Chromium's virtual time stands still while a request is
	// open: each stream ends after its change event (or at once when
	// there is none to make), and the browser would reconnect only after
	// ten minutes.
	d := New(eng)
	d.retry = 10 * time.Minute
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == Prefix+"/api/events" {
			ctx, cancel := context.WithCancel(r.Context())
			defer cancel()
			o := &onFlush{ResponseWriter: w, end: cancel}
			if n := int(streams.Add(1)); n <= len(changes) {
				o.fn = changes[n-1]
			}
			w, r = o, r.WithContext(ctx)
		}
		d.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	base := "http://" + l.Addr().String() + "/ui/"

	sum, _, err := eng.LedgerTotals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The page formats as the ledger does.
	usd := ledger.USD
	dom := chromium(t, "--dump-dom", base)
	if got := figure(t, dom, "t-saved"); got != usd(sum.Saved) {
		t.Errorf("page total saved %s, engine %s", got, usd(sum.Saved))
	}
	if got := figure(t, dom, "t-without"); got != usd(sum.WithoutCtxd) {
		t.Errorf("page total without ctxd %s, engine %s", got, usd(sum.WithoutCtxd))
	}
	if got := figure(t, dom, "t-projected"); got != usd(sum.ProjectedSaved) || sum.ProjectedSaved <= 0 {
		t.Errorf("page total observe projection %s, engine %s", got, usd(sum.ProjectedSaved))
	}
	for _, id := range []string{"p-alpha", "p-beta", "p-gamma"} {
		if !strings.Contains(dom, `data-id="`+id+`"`) {
			t.Errorf("no row for %s (p-gamma was created after the page loaded)", id)
		}
	}
	if !strings.Contains(dom, `data-sse="opened"`) || !strings.Contains(dom, `data-updates="1"`) {
		t.Errorf("the page did not follow the event stream:\n%.1500s", dom)
	}
	if got := figure(t, dom, "total"); got != "3" {
		t.Errorf("the list says %s sessions stored, want 3", got)
	}

	page := base + "#/s/p-beta"
	dom = chromium(t, "--dump-dom", page)
	entries, tot, err := eng.Ledger(ctx, "p-beta")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(dom, `data-updates="1"`) {
		t.Errorf("the session page did not read its figures again on the change event")
	}
	if want := fmt.Sprintf("<b>checkpoint %d</b>", cps[0].Seq); !strings.Contains(dom, want) || !strings.Contains(dom, "replaced messages 14–25 (") || !strings.Contains(dom, "Step 6 done") {
		t.Errorf("the session page lacks the compaction, what it replaced or its summary:\n%.4000s", dom[strings.Index(dom, `id="compactions"`):])
	}
	if tot.Requests != 13 {
		t.Fatalf("p-beta has %d requests, want the 12 recorded and the one added while its page was open", tot.Requests)
	}
	for id, want := range map[string]string{"s-saved": usd(tot.Saved), "s-paid": usd(tot.Paid), "s-without": usd(tot.WithoutCtxd),
		"s-summarizer": usd(tot.Summarizer), "s-requests": fmt.Sprint(tot.Requests), "s-projected": usd(tot.ProjectedSaved)} {
		if got := figure(t, dom, id); got != want {
			t.Errorf("session page #%s = %s, engine %s", id, got, want)
		}
	}
	if tot.ObservedRequests != 2 || tot.ProjectedSaved <= 0 {
		t.Fatalf("p-beta observe totals: %d requests, projected saving %v", tot.ObservedRequests, tot.ProjectedSaved)
	}
	if !strings.Contains(dom, `id="context-chart"`) || !strings.Contains(dom, `id="window"`) || !strings.Contains(dom, `id="threshold"`) {
		t.Errorf("session page lacks its chart, window or threshold line:\n%.3000s", dom)
	}
	for _, c := range []string{ledger.CauseCompaction, ledger.CausePass, ledger.CauseOffload} {
		if !strings.Contains(dom, `class="mark mark-`+c+`">`+strings.ToUpper(c[:1])+`<`) {
			t.Errorf("the chart does not mark the %s", c)
		}
	}
	// The waterfall: a row per bar, with the bar's figure; a negative bar
	// (what ctxd removed) drawn as one; the first and last, totals, not
	// in a cost's red.
	wf := regexp.MustCompile(`<tr class="wf"><td class="l">([^<]*)</td><td class="(neg|pos|tot)">([^<]*)</td><td class="l"><svg[^>]*><rect class="([a-z]+)"`).FindAllStringSubmatch(dom, -1)
	bars := tot.Waterfall()
	if len(wf) != len(bars) {
		t.Fatalf("waterfall: %d rows on the page, %d bars in the ledger", len(wf), len(bars))
	}
	negative := 0
	for i, b := range bars {
		if wf[i][1] != b.Label || wf[i][3] != usd(b.Value) || (b.Value < 0) != (wf[i][2] == "neg" && wf[i][4] == "neg") {
			t.Errorf("waterfall bar %d: page %q %s %s (rect %s), ledger %q %s", i, wf[i][1], wf[i][2], wf[i][3], wf[i][4], b.Label, usd(b.Value))
		}
		if b.Value < 0 {
			negative++
		}
		if total := i == 0 || i == len(bars)-1; total != (wf[i][2] == "tot") {
			t.Errorf("waterfall bar %d (%q): figure's class %s", i, b.Label, wf[i][2])
		}
	}
	if negative == 0 {
		t.Errorf("no negative bar in the waterfall %+v", bars)
	}
	// Cache reads and writes per request: ctxd's request (in observe mode
	// the projected one), as the ledger has them.
	cache := regexp.MustCompile(`<tr class="req"><td>(\d+)</td><td class="l">([a-z]+)[^<]*</td><td>[^<]*</td><td class="l"><svg.*?</svg></td><td>(\d+)</td><td>(\d+)</td>`).FindAllStringSubmatch(dom, -1)
	var reqs []ledger.Entry
	for _, e := range entries {
		if e.Kind == ledger.KindRequest {
			reqs = append(reqs, e)
		}
	}
	if len(cache) != len(reqs) {
		t.Fatalf("cache table: %d rows on the page, %d requests in the ledger", len(cache), len(reqs))
	}
	for i, e := range reqs {
		u := e.Reported
		if e.Mode == ledger.ModeObserve {
			u = e.Counterfactual
		}
		if cache[i][2] != e.Mode || cache[i][3] != fmt.Sprint(u.CacheRead) || cache[i][4] != fmt.Sprint(u.CacheWrite()) {
			t.Errorf("cache row %d: page %s read %s written %s; ledger %s read %d written %d", i+1, cache[i][2], cache[i][3], cache[i][4], e.Mode, u.CacheRead, u.CacheWrite())
		}
	}
	// A diagnostic reads as its line (level, code: message), not as JSON.
	diag := regexp.MustCompile(`<div class="diag"><b>diagnostic</b> seq \d+ [^<]* <span class="diag-(info|warn|error)">[a-z]+</span> <code>` + api.DiagFallback + `</code>: ([^<]+)</div>`).FindStringSubmatch(dom)
	if diag == nil || diag[2] == "" {
		t.Errorf("the session page lacks the diagnostic's line:\n%.2000s", dom[strings.Index(dom, `id="diagnostics"`):])
	}

	shot := os.Getenv("CTXD_SCREENSHOT")
	if shot == "" {
		shot = filepath.Join(t.TempDir(), "dashboard.png")
	}
	chromium(t, "--screenshot="+shot, "--window-size=1100,1500", page)
	if st, err := os.Stat(shot); err != nil || st.Size() < 5000 {
		t.Fatalf("screenshot %s: %v", shot, err)
	}
}

// onFlush runs fn once, in its own goroutine, at the first Flush (an
// event stream flushes once it follows the changes), and ends the stream
// (end) after the first change event is written, or at the first Flush
// when fn is nil.
type onFlush struct {
	http.ResponseWriter
	fn   func()
	end  context.CancelFunc
	once sync.Once
}

func (o *onFlush) Write(b []byte) (int, error) {
	n, err := o.ResponseWriter.Write(b)
	if strings.Contains(string(b), "event: change") {
		o.end()
	}
	return n, err
}

func (o *onFlush) Flush() {
	if f, ok := o.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
	o.once.Do(func() {
		if o.fn == nil {
			o.end()
			return
		}
		go o.fn()
	})
}

func (o *onFlush) Unwrap() http.ResponseWriter { return o.ResponseWriter }

// TestDashboardOnTCPInChromium: on the daemon's TCP listener (package
// server, behind its token) a browser opening the dashboard is refused;
// opening the one-time link `ctxctl dashboard` prints sets the cookie and
// shows the sessions.
func TestDashboardOnTCPInChromium(t *testing.T) {
	eng := newEngine(t)
	ctx := context.Background()
	if _, err := eng.CreateSession(ctx, engine.CreateParams{ID: "tcp-one", Model: "claude-opus-4-8"}); err != nil {
		t.Fatal(err)
	}
	d := New(eng)
	d.retry = 10 * time.Minute
	// Streams end at once: virtual time stands still while one is open.
	ui := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == Prefix+"/api/events" {
			c, cancel := context.WithCancel(r.Context())
			defer cancel()
			w, r = &onFlush{ResponseWriter: w, end: cancel}, r.WithContext(c)
		}
		d.ServeHTTP(w, r)
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const token = "a-token-of-the-daemon-0123456789"
	srv := server.New(server.Options{Engine: eng, AuthToken: token, UI: ui, Listen: l.Addr().String()})
	hs := &http.Server{Handler: srv.Handler(), ConnContext: srv.ConnContext}
	go func() { _ = hs.Serve(l) }()
	defer hs.Close()

	dom := chromium(t, "--dump-dom", "http://"+l.Addr().String()+"/ui/")
	if strings.Contains(dom, "tcp-one") || !strings.Contains(dom, "unauthorized") {
		t.Fatalf("without the link the page shows:\n%.1500s", dom)
	}
	link, err := (&api.Client{BaseURL: "http://" + l.Addr().String(), Token: token}).DashboardLink(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dom = chromium(t, "--dump-dom", link.URL)
	if !strings.Contains(dom, `data-id="tcp-one"`) || !strings.Contains(dom, `data-sse="opened"`) {
		t.Fatalf("after the link the page shows:\n%.2500s", dom)
	}
}
