package ui

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
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

// newEngine is an engine over an in-memory store with the default
// configuration, changed by each of with.
func newEngine(t *testing.T, with ...func(*config.Config)) *engine.Engine {
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
	// The pool runs compactions (the browser test compacts a session).
	runCtx, stop := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); _ = pool.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-ran })
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := config.Defaults()
	cfg.Storage.DataDir = t.TempDir()
	for _, f := range with {
		f(&cfg)
	}
	eng, err := engine.New(engine.Options{Config: cfg, Log: cps, Artifacts: arts, Pool: pool, Logger: logger,
		Summarizer: summarizer.New(summarizer.Options{Logger: logger, RetryMax: -1}), OffloadDir: cfg.Storage.DataDir})
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
		Sessions []row `json:"sessions"`
		Matched  int   `json:"matched"`
		Total    int   `json:"total"`
	}
	getJSON(t, srv.URL+"/ui/api/sessions?limit=2", &p1)
	getJSON(t, srv.URL+"/ui/api/sessions?limit=2&offset=2", &p2)
	if len(p1.Sessions) != 2 || p1.Total != 3 || p1.Matched != 3 || len(p2.Sessions) != 1 || p2.Sessions[0].ID != "s-c" {
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

// TestSessionListAtScale: the list is sorted, filtered and paged on the
// server over every stored session, read from their listing rows (none is
// loaded): CTXD_UI_SESSIONS sessions (default 3000; docs/performance.md
// has the figures at 100,000) through the engine's API, every page
// checked against the order asked for.
func TestSessionListAtScale(t *testing.T) {
	n := 3000
	if v := os.Getenv("CTXD_UI_SESSIONS"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	eng := newEngine(t)
	ctx := context.Background()
	start := time.Now()
	for i := range n {
		id := fmt.Sprintf("m-%06d", i)
		model := []string{"claude-opus-4-8", "claude-sonnet-4-5", "gpt-5"}[i%3]
		if _, err := eng.CreateSession(ctx, engine.CreateParams{ID: id, Model: model, ContextLimit: 100000 + uint64(i%7)*1000, Labels: map[string]string{"proxy": "anthropic"}}); err != nil {
			t.Fatal(err)
		}
		if i%10 == 0 {
			// Every tenth has a ledger, with savings spread over sessions.
			en := ledger.Entry{Kind: ledger.KindRequest, Model: "claude-opus-4-8", Mode: ledger.ModeEnforce, ClientTokens: 1000, SentTokens: 500,
				Reported: ledger.Usage{Input: 500, Output: 10}, Counterfactual: ledger.Usage{Input: 1000 + uint64(i%97), Output: 10}}
			if err := eng.RecordLedger(ctx, id, en); err != nil {
				t.Fatal(err)
			}
		}
	}
	created := time.Since(start)
	srv := httptest.NewServer(Handler(eng))
	defer srv.Close()
	type page struct {
		Sessions []row `json:"sessions"`
		Matched  int   `json:"matched"`
		Total    int   `json:"total"`
	}
	// The first page reads every listing row; the next ones reuse that
	// read until the engine reports a change.
	start = time.Now()
	var first page
	getJSON(t, srv.URL+"/ui/api/sessions?sort=updated&order=desc", &first)
	cold := time.Since(start)
	// Sorted by saving, descending, a page of 1000 at a time: every
	// session once, in order.
	start = time.Now()
	seen := map[string]bool{}
	last := math.Inf(1)
	for off := 0; ; off += MaxLimit {
		var p page
		getJSON(t, fmt.Sprintf("%s/ui/api/sessions?sort=saved&order=desc&limit=%d&offset=%d", srv.URL, MaxLimit, off), &p)
		if p.Total != n || p.Matched != n {
			t.Fatalf("total %d, matched %d, want %d", p.Total, p.Matched, n)
		}
		for _, r := range p.Sessions {
			v := savedOf(r)
			if v > last || seen[r.ID] {
				t.Fatalf("offset %d: %s (saved %v) after %v, or seen twice", off, r.ID, v, last)
			}
			last, seen[r.ID] = v, true
		}
		if len(p.Sessions) < MaxLimit {
			break
		}
	}
	if len(seen) != n {
		t.Fatalf("paged through %d sessions, want %d", len(seen), n)
	}
	paged := time.Since(start)
	// Filtered: the GPT sessions, a third, by window ascending.
	start = time.Now()
	var p page
	getJSON(t, srv.URL+"/ui/api/sessions?q=GPT-5&sort=window&limit=100", &p)
	filtered := time.Since(start)
	if want := n / 3; p.Matched != want || len(p.Sessions) != min(100, want) {
		t.Fatalf("filter gpt-5: matched %d, page %d; want %d", p.Matched, len(p.Sessions), want)
	}
	for i, r := range p.Sessions {
		if r.Model != "gpt-5" || (i > 0 && r.ContextLimit < p.Sessions[i-1].ContextLimit) {
			t.Fatalf("row %d: %+v", i, r)
		}
	}
	// The same page again: the read and the view are reused.
	start = time.Now()
	getJSON(t, srv.URL+"/ui/api/sessions?sort=updated&order=desc", &p)
	reused := time.Since(start)
	// A change is seen at the next read (the snapshot is not reused).
	if err := eng.DeleteSession(ctx, "m-000000"); err != nil {
		t.Fatal(err)
	}
	getJSON(t, srv.URL+"/ui/api/sessions?limit=1", &p)
	if p.Total != n-1 || p.Sessions[0].ID != "m-000001" {
		t.Fatalf("after a delete: total %d, first %s", p.Total, p.Sessions[0].ID)
	}
	// A new order of the read just taken: a sort, no row read.
	start = time.Now()
	getJSON(t, srv.URL+"/ui/api/sessions?sort=updated&order=desc", &p)
	resorted := time.Since(start)
	// The first page after a change reads again only the changed
	// session's row (the kept read patched, then sorted anew): that read
	// is the one timed. More changes than the engine remembers make it
	// scan every row, as the first read did (TestListFollowsChangesWithoutAScan).
	if err := eng.DeleteSession(ctx, "m-000002"); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	getJSON(t, srv.URL+"/ui/api/sessions?sort=updated&order=desc", &p)
	changed := time.Since(start)
	if p.Total != n-2 {
		t.Fatalf("after a second delete: total %d, want %d", p.Total, n-2)
	}
	for _, bad := range []string{"limit=0", "limit=1001", "offset=-1", "sort=nope", "order=up"} {
		if r, err := http.Get(srv.URL + "/ui/api/sessions?" + bad); err != nil || r.StatusCode != 400 {
			t.Errorf("%s: %v %v, want 400", bad, err, r.StatusCode)
		}
	}
	t.Logf("%d sessions: created in %v; first page (every row read) %v; then every page of %d sorted by saving %v; a filtered page %v; the first page again (reused) %v; a new order of a kept read %v; first page after a change (the changed row read again, the rows sorted anew) %v",
		n, created, cold, MaxLimit, paged, filtered, reused, resorted, changed)
}

// TestEventsFollowChanges: the event stream sends a change event naming
// each session created, appended to or given a ledger entry, resumes
// after Last-Event-ID, and ends at BeginShutdown.
func TestEventsFollowChanges(t *testing.T) {
	eng := newEngine(t)
	ctx := context.Background()
	d := New(eng)
	srv := httptest.NewServer(d)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/ui/api/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	rd := bufio.NewReader(resp.Body)
	next := func() (id, data string) {
		t.Helper()
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				t.Fatalf("stream ended: %v", err)
			}
			line = strings.TrimRight(line, "\n")
			switch {
			case strings.HasPrefix(line, "id: "):
				id = line[4:]
			case strings.HasPrefix(line, "data: "):
				data = line[6:]
			case line == "" && data != "":
				return id, data
			}
		}
	}
	if _, err := eng.CreateSession(ctx, engine.CreateParams{ID: "ev-1", Model: "claude-opus-4-8"}); err != nil {
		t.Fatal(err)
	}
	id1, data := next()
	if data != `{"sessions":["ev-1"]}` {
		t.Fatalf("after a create: %s", data)
	}
	if err := eng.RecordLedger(ctx, "ev-1", ledger.Entry{Kind: ledger.KindRequest, Model: "claude-opus-4-8", Mode: ledger.ModeEnforce, Reported: ledger.Usage{Input: 10}}); err != nil {
		t.Fatal(err)
	}
	if _, data := next(); data != `{"sessions":["ev-1"]}` {
		t.Fatalf("after a ledger entry: %s", data)
	}
	// Resumed after the first event: the ledger entry's change again.
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/ui/api/events", nil)
	req.Header.Set("Last-Event-ID", id1)
	r2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Body.Close()
	rd = bufio.NewReader(r2.Body)
	if _, data := next(); data != `{"sessions":["ev-1"]}` {
		t.Fatalf("resumed: %s", data)
	}
	// A counter from before a restart: read everything again.
	req.Header.Set("Last-Event-ID", "999999")
	r3, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r3.Body.Close()
	rd = bufio.NewReader(r3.Body)
	if _, data := next(); data != `{"all":true}` {
		t.Fatalf("resumed from an unknown counter: %s", data)
	}
	d.BeginShutdown()
	if _, err := io.ReadAll(r2.Body); err != nil {
		t.Fatalf("stream did not end cleanly at shutdown: %v", err)
	}
}

// TestListFollowsChangesWithoutAScan: after a change the list's next read
// reads again only the sessions the engine reports changed (a ledger entry,
// a new session, a deleted one), not every stored session's row, and shows
// what a full scan shows; when the engine no longer remembers every change
// (more than 1,024 since), it scans again.
func TestListFollowsChangesWithoutAScan(t *testing.T) {
	const n = 300
	eng := newEngine(t)
	ctx := context.Background()
	for i := range n {
		if _, err := eng.CreateSession(ctx, engine.CreateParams{ID: fmt.Sprintf("s-%04d", i), Model: "claude-opus-4-8"}); err != nil {
			t.Fatal(err)
		}
	}
	d := New(eng)
	srv := httptest.NewServer(d)
	defer srv.Close()
	type page struct {
		Sessions []row `json:"sessions"`
		Total    int   `json:"total"`
	}
	var p page
	getJSON(t, srv.URL+"/ui/api/sessions?limit=1", &p)
	if got := d.scanned.Load(); got != n || p.Total != n {
		t.Fatalf("first read: %d rows scanned, total %d; want %d", got, p.Total, n)
	}
	// What a fresh dashboard, which scans, shows.
	scan := func() []byte {
		t.Helper()
		rows, err := New(eng).rows(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(rows)
		return b
	}
	same := func(when string) {
		t.Helper()
		rows, err := d.rows(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if b := must(json.Marshal(rows)); !bytes.Equal(b, scan()) {
			t.Fatalf("%s: the list differs from a scan", when)
		}
	}
	en := ledger.Entry{Kind: ledger.KindRequest, Model: "claude-opus-4-8", Mode: ledger.ModeEnforce, ClientTokens: 100000, SentTokens: 40000,
		Reported: ledger.Usage{Input: 40000, Output: 10}, Counterfactual: ledger.Usage{Input: 100000, Output: 10}}
	if err := eng.RecordLedger(ctx, "s-0150", en); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.CreateSession(ctx, engine.CreateParams{ID: "s-0150a", Model: "gpt-5"}); err != nil {
		t.Fatal(err)
	}
	if err := eng.DeleteSession(ctx, "s-0010"); err != nil {
		t.Fatal(err)
	}
	getJSON(t, srv.URL+"/ui/api/sessions?sort=saved&order=desc&limit=1", &p)
	if p.Total != n || p.Sessions[0].ID != "s-0150" || p.Sessions[0].Ledger == nil {
		t.Fatalf("after the changes: total %d, first by saving %+v", p.Total, p.Sessions)
	}
	getJSON(t, srv.URL+"/ui/api/sessions?q=gpt-5", &p)
	if len(p.Sessions) != 1 || p.Sessions[0].ID != "s-0150a" {
		t.Fatalf("the new session: %+v", p.Sessions)
	}
	if got := d.scanned.Load(); got != n {
		t.Fatalf("three changes cost a scan: %d rows read, want the first scan's %d", got, n)
	}
	same("after three changes")
	// More changes than the engine remembers: a scan.
	for range 1100 {
		if err := eng.RecordLedger(ctx, "s-0020", en); err != nil {
			t.Fatal(err)
		}
	}
	getJSON(t, srv.URL+"/ui/api/sessions?limit=1", &p)
	if got := d.scanned.Load(); got != 2*n {
		t.Fatalf("after 1,100 changes: %d rows scanned, want %d (a second scan)", got, 2*n)
	}
	same("after a scan")
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// A proxied session with no mode of its own goes in the daemon's [proxy]
// mode: the list shows that mode and its filter finds it; a session of
// the API has no mode.
func TestSessionListShowsAndFiltersTheModeInEffect(t *testing.T) {
	eng := newEngine(t)
	ctx := context.Background()
	proxied := map[string]string{"proxy": "anthropic"}
	for _, id := range []string{"p-default", "p-observe"} {
		if _, err := eng.CreateSession(ctx, engine.CreateParams{ID: id, Model: "claude-sonnet-4-5", Labels: proxied}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := eng.CreateSession(ctx, engine.CreateParams{ID: "api-one", Model: "claude-sonnet-4-5"}); err != nil {
		t.Fatal(err)
	}
	if err := eng.SetMode(ctx, "p-observe", ledger.ModeObserve); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(Handler(eng))
	defer srv.Close()
	type page struct {
		Sessions []row `json:"sessions"`
	}
	modes := func(q string) map[string]string {
		var p page
		getJSON(t, srv.URL+"/ui/api/sessions?q="+q, &p)
		m := map[string]string{}
		for _, r := range p.Sessions {
			m[r.ID] = r.Mode
		}
		return m
	}
	if got, want := modes(""), map[string]string{"p-default": "enforce", "p-observe": "observe", "api-one": ""}; !maps.Equal(got, want) {
		t.Fatalf("modes shown %v, want %v", got, want)
	}
	if got := modes("enforce"); len(got) != 1 || got["p-default"] != "enforce" {
		t.Fatalf("filter enforce found %v, want the proxied session without a mode of its own", got)
	}
	if got := modes("observe"); len(got) != 1 || got["p-observe"] != "observe" {
		t.Fatalf("filter observe found %v", got)
	}
}
