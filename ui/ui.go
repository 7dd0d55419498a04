// Package ui is ctxd's read-only dashboard (docs/design.md §10 "Proof a
// user can see"): a page of sessions (agent, model, window, state,
// savings, last activity; sorted, filtered and paged on the server) and a
// page per session (context size per request against the window and
// threshold, cache reads and writes per request, the ledger's waterfall,
// compactions with their summaries and what they replaced, diagnostics),
// from assets embedded in the binary. The page follows the engine's
// changes as server-sent events. It reads the engine and writes nothing.
// The proxy serves it at /ui on its loopback listener, the daemon API on
// its listeners behind the daemon's token (package server).
package ui

import (
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/ledger"
)

//go:embed assets
var assets embed.FS

// Prefix is the path the dashboard is served under.
const Prefix = "/ui"

// Page sizes of GET /ui/api/sessions.
const (
	// DefaultLimit is the page size when the query gives none.
	DefaultLimit = 100
	// MaxLimit is the largest page.
	MaxLimit = 1000
)

// Heartbeat is the interval of ": ping" comments on the event stream,
// which keep proxies and the browser from closing an idle connection.
const Heartbeat = 15 * time.Second

// Dashboard serves the dashboard. Create it with New; it is safe for
// concurrent use.
type Dashboard struct {
	eng   *engine.Engine
	mux   *http.ServeMux
	heart time.Duration
	// retry is how long a browser waits before it reconnects a stream
	// that ended (the stream's "retry:" field).
	retry time.Duration

	// done is closed by BeginShutdown: event streams end.
	done     chan struct{}
	doneOnce sync.Once

	// snap is the newest scan of every session's listing row, reused
	// while the engine reports no change (never on a fleet, where other
	// nodes' changes are not reported).
	snapMu sync.Mutex
	snap   *snapshot
	// scanned counts the listing rows read by full scans (a test's
	// witness that a change did not cost one).
	scanned atomic.Int64
}

// snapshot is every stored session as the list shows it, at change seq,
// with the filtered and sorted orders asked for since (views, by query;
// at most maxViews).
type snapshot struct {
	seq uint64
	// mode is the daemon's [proxy] mode the rows were read with: the mode
	// of a proxied session that has none of its own.
	mode  string
	rows  []row
	taken time.Time
	views map[string][]row
}

// maxViews bounds a snapshot's views.
const maxViews = 8

// snapshotIdle is how long an unused snapshot is kept.
const snapshotIdle = time.Minute

// Handler returns a Dashboard for eng (New), as an http.Handler.
func Handler(eng *engine.Engine) http.Handler { return New(eng) }

// New returns the dashboard of eng. It serves, under Prefix, only GET and
// HEAD:
//
//   - /ui/ (the page) and /ui/assets/…;
//   - /ui/api/sessions?q=TEXT&sort=KEY&order=asc|desc&offset=N&limit=N: a
//     page (at most MaxLimit, default DefaultLimit) of the stored sessions
//     whose id, agent, model, state or mode holds TEXT (case-insensitive),
//     sorted by KEY (id, agent, model, window, tokens, state, mode, saved,
//     without_ctxd, updated; ties by id), as {"sessions", "offset",
//     "limit", "matched", "total"};
//   - /ui/api/totals: every session's ledger summed;
//   - /ui/api/sessions/{id}: a session with its ledger entries, totals,
//     waterfall, checkpoints and diagnostics;
//   - /ui/api/events: server-sent events, one "change" event per change
//     of the engine's sessions (engine.Changes) with data {"sessions":
//     [ids]} or {"all": true} when changes were missed; "id:" is the
//     change counter, and Last-Event-ID resumes after it (a counter
//     this engine never reached, from before a restart, gets {"all":
//     true} at once).
func New(eng *engine.Engine) *Dashboard {
	d := &Dashboard{eng: eng, mux: http.NewServeMux(), heart: Heartbeat, retry: 2 * time.Second, done: make(chan struct{})}
	sub, _ := fs.Sub(assets, "assets")
	files := http.StripPrefix(Prefix+"/assets/", http.FileServer(http.FS(sub)))
	d.mux.HandleFunc("GET "+Prefix+"/{$}", func(w http.ResponseWriter, r *http.Request) {
		b, _ := assets.ReadFile("assets/index.html")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(b)
	})
	d.mux.Handle("GET "+Prefix+"/assets/", files)
	d.mux.HandleFunc("GET "+Prefix+"/api/sessions", d.sessions)
	d.mux.HandleFunc("GET "+Prefix+"/api/totals", d.totals)
	d.mux.HandleFunc("GET "+Prefix+"/api/sessions/{id}", d.session)
	d.mux.HandleFunc("GET "+Prefix+"/api/events", d.events)
	return d
}

// ServeHTTP serves the dashboard's routes, each response with a
// Content-Security-Policy allowing only the dashboard's own files, no
// framing and no Referer.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	d.mux.ServeHTTP(w, r)
}

// BeginShutdown ends every open event stream. Register it with
// http.Server.RegisterOnShutdown on each server that serves the
// dashboard: Shutdown waits for connections to go idle, which a followed
// stream never does. Safe to call more than once.
func (d *Dashboard) BeginShutdown() { d.doneOnce.Do(func() { close(d.done) }) }

// row is one session as the list shows it.
type row struct {
	ID           string          `json:"id"`
	Agent        string          `json:"agent"`
	Model        string          `json:"model"`
	ContextLimit uint64          `json:"context_limit"`
	Threshold    uint64          `json:"threshold"`
	Tokens       uint64          `json:"tokens"`
	State        string          `json:"state"`
	Mode         string          `json:"mode,omitempty"`
	Ledger       *ledger.Summary `json:"ledger,omitempty"`
	Updated      string          `json:"updated"`
	// updated is Updated as a time, for sorting.
	updated time.Time
}

// rowOf is in's row; a proxied session's mode is its own, else the
// daemon's [proxy] mode (def), so that it shows and filters as the mode
// its requests go in; a session of the API has none.
func rowOf(in engine.Info, def string) row {
	agent := in.Labels[engine.LabelProxy]
	mode := in.Mode
	if agent == "" {
		agent = "api"
	} else if mode == "" {
		mode = def
	}
	state := in.Compaction
	if in.CircuitOpen {
		state = "circuit open"
	}
	return row{ID: in.ID, Agent: agent, Model: in.Model, ContextLimit: in.ContextLimit, Threshold: in.Threshold, Tokens: in.Tokens,
		State: state, Mode: mode, Ledger: in.Ledger, Updated: in.Updated.UTC().Format("2006-01-02 15:04:05"), updated: in.Updated}
}

// rows returns every stored session's row: the snapshot when the engine
// reported no change since it was taken, else a new scan of the listing
// rows (a page of engine.MaxListLimit at a time; no session is loaded).
func (d *Dashboard) rows(ctx context.Context) ([]row, error) {
	s, err := d.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	return s.rows, nil
}

// view returns the rows matching q in the order of by and desc, from the
// snapshot, keeping it for the next page, and the number of rows stored.
func (d *Dashboard) view(ctx context.Context, q, key string, desc bool) ([]row, int, error) {
	s, err := d.snapshot(ctx)
	if err != nil {
		return nil, 0, err
	}
	k := q + "\x00" + key + "\x00" + strconv.FormatBool(desc)
	d.snapMu.Lock()
	v, ok := s.views[k]
	d.snapMu.Unlock()
	if ok {
		return v, len(s.rows), nil
	}
	v = s.rows
	if q != "" {
		v = nil
		for _, x := range s.rows {
			if strings.Contains(strings.ToLower(x.ID+"\x00"+x.Agent+"\x00"+x.Model+"\x00"+x.State+"\x00"+x.Mode), q) {
				v = append(v, x)
			}
		}
	}
	if key != "id" || desc {
		by := sortKeys[key]
		v = slices.Clone(v)
		slices.SortStableFunc(v, func(a, b row) int {
			c := by(a, b)
			if desc {
				c = -c
			}
			if c == 0 {
				c = strings.Compare(a.ID, b.ID)
				if desc && key == "id" {
					c = -c
				}
			}
			return c
		})
	}
	d.snapMu.Lock()
	if len(s.views) >= maxViews {
		clear(s.views)
	}
	s.views[k] = v
	d.snapMu.Unlock()
	return v, len(s.rows), nil
}

// snapshot returns the snapshot of every row: the kept one while the
// engine reported no change since it was taken; after changes, the kept
// one with the changed sessions' rows read again (patch), when the engine
// still remembers which sessions changed; else (and always on a fleet) a
// scan of every listing row.
func (d *Dashboard) snapshot(ctx context.Context) (*snapshot, error) {
	seq := d.eng.ChangeSeq()
	def := d.eng.Config().Proxy.Mode
	d.snapMu.Lock()
	defer d.snapMu.Unlock()
	if s := d.snap; s != nil && !d.eng.Shared() && s.mode == def {
		if s.seq == seq {
			s.taken = time.Now()
			return s, nil
		}
		if ns, ok := d.patch(ctx, s); ok {
			d.snap = ns
			return ns, nil
		}
	}
	var out []row
	after := ""
	for {
		page, next, err := d.eng.ListSessionPage(ctx, after, engine.MaxListLimit)
		if err != nil {
			return nil, err
		}
		for _, in := range page {
			out = append(out, rowOf(in, def))
		}
		d.scanned.Add(int64(len(page)))
		if next == "" {
			break
		}
		after = next
	}
	s := &snapshot{seq: seq, mode: def, rows: out, taken: time.Now(), views: map[string][]row{}}
	if d.snap == nil {
		// Dropped once unused for snapshotIdle: 100,000 rows are tens of
		// megabytes.
		time.AfterFunc(snapshotIdle, d.dropIdle)
	}
	d.snap = s
	return s, nil
}

// patch returns s with the rows of the sessions changed since it was
// taken read again (engine.Changes: at most the 1,024 newest changes are
// remembered), a deleted session's row removed and a new one's inserted
// in id order, the rows kept in id order as a scan has them; false when
// the changes were missed or a row could not be read (the caller scans).
// Called with snapMu held.
func (d *Dashboard) patch(ctx context.Context, s *snapshot) (*snapshot, bool) {
	// The counter passed s.seq, so Changes returns at once; a context
	// ended already makes sure it never waits.
	now, cancel := context.WithCancel(context.WithoutCancel(ctx))
	cancel()
	ids, seq, missed, err := d.eng.Changes(now, s.seq)
	if err != nil || missed {
		return nil, false
	}
	rows := slices.Clone(s.rows)
	done := map[string]bool{}
	for _, id := range ids {
		if done[id] {
			continue
		}
		done[id] = true
		in, err := d.eng.Session(ctx, id)
		i, found := slices.BinarySearchFunc(rows, id, func(r row, id string) int { return strings.Compare(r.ID, id) })
		switch {
		case errors.Is(err, engine.ErrNotFound):
			if found {
				rows = slices.Delete(rows, i, i+1)
			}
		case err != nil:
			return nil, false
		case found:
			rows[i] = rowOf(in, s.mode)
		default:
			rows = slices.Insert(rows, i, rowOf(in, s.mode))
		}
	}
	return &snapshot{seq: seq, mode: s.mode, rows: rows, taken: time.Now(), views: map[string][]row{}}, true
}

// dropIdle drops the snapshot when it was not used for snapshotIdle, or
// looks again later.
func (d *Dashboard) dropIdle() {
	d.snapMu.Lock()
	defer d.snapMu.Unlock()
	if d.snap == nil {
		return
	}
	if idle := time.Since(d.snap.taken); idle < snapshotIdle {
		time.AfterFunc(snapshotIdle-idle, d.dropIdle)
		return
	}
	d.snap = nil
}

// sortKeys are the columns the list sorts by.
var sortKeys = map[string]func(a, b row) int{
	"id":     func(a, b row) int { return 0 },
	"agent":  func(a, b row) int { return strings.Compare(a.Agent, b.Agent) },
	"model":  func(a, b row) int { return strings.Compare(a.Model, b.Model) },
	"window": func(a, b row) int { return cmp.Compare(a.ContextLimit, b.ContextLimit) },
	"tokens": func(a, b row) int { return cmp.Compare(a.Tokens, b.Tokens) },
	"state":  func(a, b row) int { return strings.Compare(a.State, b.State) },
	"mode":   func(a, b row) int { return strings.Compare(a.Mode, b.Mode) },
	"saved": func(a, b row) int {
		return cmp.Compare(savedOf(a), savedOf(b))
	},
	"without_ctxd": func(a, b row) int {
		return cmp.Compare(withoutOf(a), withoutOf(b))
	},
	"updated": func(a, b row) int { return a.updated.Compare(b.updated) },
}

// savedOf is a row's net saving: enforce mode's plus observe mode's
// projection (a session has one or the other, or both after a switch).
func savedOf(r row) float64 {
	if r.Ledger == nil {
		return 0
	}
	return r.Ledger.Saved + r.Ledger.ProjectedSaved
}

func withoutOf(r row) float64 {
	if r.Ledger == nil {
		return 0
	}
	return r.Ledger.WithoutCtxd
}

// sessions serves GET /ui/api/sessions.
func (d *Dashboard) sessions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	num := func(key string, def, lo, hi int) (int, bool) {
		v := q.Get(key)
		if v == "" {
			return def, true
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			http.Error(w, key+": "+strconv.Quote(v)+" is not a number from "+strconv.Itoa(lo)+" to "+strconv.Itoa(hi), http.StatusBadRequest)
			return 0, false
		}
		return n, true
	}
	limit, ok := num("limit", DefaultLimit, 1, MaxLimit)
	if !ok {
		return
	}
	offset, ok := num("offset", 0, 0, 1<<31-1)
	if !ok {
		return
	}
	key := cmp.Or(q.Get("sort"), "id")
	if _, ok := sortKeys[key]; !ok {
		http.Error(w, "sort: "+strconv.Quote(key)+" is not a column (id, agent, model, window, tokens, state, mode, saved, without_ctxd, updated)", http.StatusBadRequest)
		return
	}
	order := cmp.Or(q.Get("order"), "asc")
	if order != "asc" && order != "desc" {
		http.Error(w, "order: "+strconv.Quote(order)+" is not asc or desc", http.StatusBadRequest)
		return
	}
	match, total, err := d.view(r.Context(), strings.ToLower(strings.TrimSpace(q.Get("q"))), key, order == "desc")
	if err != nil {
		writeErr(w, err)
		return
	}
	var page []row
	if offset < len(match) {
		page = match[offset:min(offset+limit, len(match))]
	}
	if page == nil {
		page = []row{}
	}
	writeJSON(w, map[string]any{"sessions": page, "offset": offset, "limit": limit, "matched": len(match), "total": total})
}

// totals serves GET /ui/api/totals: the ledger summaries of every
// session's row summed.
func (d *Dashboard) totals(w http.ResponseWriter, r *http.Request) {
	all, err := d.rows(r.Context())
	if err != nil {
		writeErr(w, err)
		return
	}
	var sum ledger.Summary
	n := 0
	for _, x := range all {
		if x.Ledger != nil {
			sum.Add(*x.Ledger)
			n++
		}
	}
	writeJSON(w, map[string]any{"sessions": n, "stored": len(all), "totals": sum})
}

// compaction is a checkpoint as the session page shows it: what the
// summary replaced, the messages of seq ReplacedFrom to ReplacedTo.
type compaction struct {
	checkpoint.Checkpoint
	ReplacedFrom uint64 `json:"replaced_from"`
	ReplacedTo   uint64 `json:"replaced_to"`
}

// session serves GET /ui/api/sessions/{id}.
func (d *Dashboard) session(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	info, err := d.eng.Session(r.Context(), id)
	if err != nil {
		writeErr(w, err)
		return
	}
	entries, totals, err := d.eng.Ledger(r.Context(), id)
	if err != nil {
		writeErr(w, err)
		return
	}
	cps, err := d.eng.Checkpoints(r.Context(), id)
	if err != nil {
		writeErr(w, err)
		return
	}
	// One pass over the log: the diagnostics, and the seqs of the
	// messages, for the range each summary replaced.
	diags := []json.RawMessage{}
	var msgSeqs []uint64
	_ = d.eng.Events(r.Context(), id, 1, false, func(ev checkpoint.Event) error {
		switch ev.Kind {
		case checkpoint.KindMessage:
			msgSeqs = append(msgSeqs, ev.Seq)
		case checkpoint.KindDiagnostic, checkpoint.KindCompactionFailed:
			b, _ := json.Marshal(map[string]any{"seq": ev.Seq, "time": ev.Time, "kind": ev.Kind, "data": ev.Data})
			diags = append(diags, b)
		}
		return nil
	})
	comps := make([]compaction, 0, len(cps))
	var prev uint64 // the previous checkpoint's snapshot: replaced already
	for _, c := range cps {
		// The summary replaces the previous summary and the messages
		// after its snapshot up to this one's retained tail.
		to := c.SnapshotSeq
		if c.FirstRetainedSeq > 0 {
			to = c.FirstRetainedSeq - 1
		}
		from := prev + 1
		if i, _ := slices.BinarySearch(msgSeqs, from); i < len(msgSeqs) {
			from = msgSeqs[i]
		}
		comps = append(comps, compaction{Checkpoint: c, ReplacedFrom: from, ReplacedTo: to})
		prev = c.SnapshotSeq
	}
	if entries == nil {
		entries = []ledger.Entry{}
	}
	writeJSON(w, map[string]any{"session": rowOf(info, d.eng.Config().Proxy.Mode), "entries": entries, "totals": totals,
		"waterfall": totals.Waterfall(), "checkpoints": comps, "diagnostics": diags})
}

// events serves GET /ui/api/events.
func (d *Dashboard) events(w http.ResponseWriter, r *http.Request) {
	last := d.eng.ChangeSeq()
	// A browser resuming from a counter this engine never reached (the
	// daemon restarted since) is told to read everything again.
	resync := false
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		if n, err := strconv.ParseUint(v, 10, 64); err == nil && n <= last {
			last = n
		} else {
			resync = true
		}
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-d.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	send := func(s string) bool {
		if _, err := w.Write([]byte(s)); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	// retry: how long the browser waits before it reconnects.
	if !send("retry: " + strconv.FormatInt(d.retry.Milliseconds(), 10) + "\n: dashboard changes\n\n") {
		return
	}
	if resync && !send("id: "+strconv.FormatUint(last, 10)+"\nevent: change\ndata: {\"all\":true}\n\n") {
		return
	}
	for {
		wait, done := context.WithTimeout(ctx, d.heart)
		ids, seq, missed, err := d.eng.Changes(wait, last)
		done()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			if !send(": ping\n\n") {
				return
			}
			continue
		}
		last = seq
		var data []byte
		if missed {
			data = []byte(`{"all":true}`)
		} else {
			slices.Sort(ids)
			data, _ = json.Marshal(map[string]any{"sessions": slices.Compact(ids)})
		}
		if !send("id: " + strconv.FormatUint(seq, 10) + "\nevent: change\ndata: " + string(data) + "\n\n") {
			return
		}
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, engine.ErrNotFound):
		status = http.StatusNotFound
	case errors.Is(err, engine.ErrInvalid):
		status = http.StatusBadRequest
	}
	http.Error(w, strings.SplitN(err.Error(), "\n", 2)[0], status)
}
