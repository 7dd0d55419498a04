package engine

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/workers"
)

// slowSummarizer is an Anthropic summarizer that answers each call after
// latency (20 s in the test below), or sooner when the test releases the
// call's session (release) or every session (releaseAll). Every call's
// start and end, and every pre-send read of the test, takes a tick of one
// counter, so "the read waited for a summarizer call" is an order of
// events, not a duration: a call of the read's session started after the
// read began and ended before it returned.
type slowSummarizer struct {
	srv     *httptest.Server
	latency time.Duration
	clock   *atomic.Uint64

	mu      sync.Mutex
	calls   map[string][]callSpan // by session
	gates   map[string]chan struct{}
	started map[string]chan struct{}
	all     chan struct{}
	allOnce sync.Once
}

type callSpan struct{ start, end uint64 }

var sessionTag = regexp.MustCompile(`SESSION-[a-z0-9-]+`)

func newSlowSummarizer(t *testing.T, latency time.Duration, clock *atomic.Uint64) *slowSummarizer {
	f := &slowSummarizer{latency: latency, clock: clock, calls: map[string][]callSpan{}, gates: map[string]chan struct{}{}, started: map[string]chan struct{}{}, all: make(chan struct{})}
	reply := okSummary(specSummary()).body
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id := strings.TrimPrefix(sessionTag.FindString(string(body)), "SESSION-")
		start := clock.Add(1)
		f.mu.Lock()
		gate, started := f.gate(id), f.startedCh(id)
		f.mu.Unlock()
		started <- struct{}{}
		timer := time.NewTimer(latency)
		defer timer.Stop()
		select {
		case <-gate:
		case <-f.all:
		case <-timer.C:
		case <-r.Context().Done():
			return
		}
		f.mu.Lock()
		f.calls[id] = append(f.calls[id], callSpan{start, clock.Add(1)})
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, reply)
	}))
	t.Cleanup(f.srv.Close)
	t.Cleanup(f.releaseAll)
	t.Setenv("CTXD_TEST_KEY", "test-key")
	return f
}

// gate and startedCh are called with f.mu held.
func (f *slowSummarizer) gate(id string) chan struct{} {
	if f.gates[id] == nil {
		f.gates[id] = make(chan struct{})
	}
	return f.gates[id]
}

func (f *slowSummarizer) startedCh(id string) chan struct{} {
	if f.started[id] == nil {
		f.started[id] = make(chan struct{}, 16)
	}
	return f.started[id]
}

func (f *slowSummarizer) release(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.gate(id))
}

func (f *slowSummarizer) releaseAll() { f.allOnce.Do(func() { close(f.all) }) }

// waitStarted waits for a summarizer call of session id to start.
func (f *slowSummarizer) waitStarted(t *testing.T, id string) {
	f.mu.Lock()
	ch := f.startedCh(id)
	f.mu.Unlock()
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Errorf("%s: no summarizer call started", id)
	}
}

// within reports whether a summarizer call of session id ran wholly
// between ticks from and to: a read spanning them waited for it.
func (f *slowSummarizer) within(id string, from, to uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.calls[id] {
		if c.start > from && c.end < to {
			return true
		}
	}
	return false
}

func (f *slowSummarizer) count(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls[id])
}

// crossing is one session's pre-send read at a compaction.
type crossing struct {
	id, kind  string
	fits      bool
	from, to  uint64
	compacted bool
	code      string
	fact      string
	tokens    uint64
	took      time.Duration // logged, never asserted
}

// The kinds of session the test drives to its threshold (20,000-token
// window: threshold 14,000, prepare mark 12,000).
const (
	crossPrepared  = "prepared"   // past the mark, the summary ready, then past the threshold
	crossPreparing = "preparing"  // past the threshold while the summary is being made
	crossJump      = "jump"       // one step from below the mark past the threshold
	crossJumpUsage = "jump-usage" // the same, reported by an answer's usage (post-check)
	crossOver      = "over"       // one step past the window
)

// TestCrossingWaitsOnlyWhenTheContextDoesNotFit: with speculative
// summaries on and a 20 s summarizer, across many sessions, the pre-send
// read at the threshold waits for a summarizer call only when the context
// does not fit the window. A session whose summary was prepared installs
// it; one whose summary is being made, and one that jumped from below the
// prepare mark past the threshold in one step (no summary could be
// prepared), is served uncompacted within the window and compacted in the
// background. Each read counts as blocked when a summarizer call of its
// session ran wholly within it (an order of events, not a timing). After
// the calls end, every session holds a checkpoint, is under its threshold
// and keeps the crossing step's fact. With CTXD_PRESEND_BASELINE=1 the
// same sessions run with speculative summaries off too (the reads that
// fit then wait the summarizer's 20 s), for docs/performance.md.
func TestCrossingWaitsOnlyWhenTheContextDoesNotFit(t *testing.T) {
	pcts := []uint64{0}
	if os.Getenv("CTXD_PRESEND_BASELINE") != "" {
		pcts = append(pcts, config.PrepareOff)
	}
	for _, pct := range pcts {
		name := "speculative on"
		if pct == config.PrepareOff {
			name = "speculative off"
		}
		t.Run(name, func(t *testing.T) { crossingWaits(t, pct, 6) })
	}
}

func crossingWaits(t *testing.T, pct uint64, perKind int) {
	var clock atomic.Uint64
	f := newSlowSummarizer(t, 20*time.Second, &clock)
	cfg := testConfig()
	cfg.Summarizer.Bindings = []config.Binding{{Name: "slow", Provider: "anthropic", Model: "claude-sonnet-4-5", BaseURL: f.srv.URL, APIKeyEnv: "CTXD_TEST_KEY"}}
	cfg.ContextCompaction.PreparePercent = pct
	kinds := []string{crossPrepared, crossPreparing, crossJump, crossJumpUsage, crossOver}
	n := perKind * len(kinds)
	h := newHarnessPool(t, cfg, "", workers.Options{Size: n + 2, Queue: 4 * n, DrainTimeout: time.Second})
	on := pct != config.PrepareOff
	ctx := context.Background()

	var cs []*crossing
	for i := 0; i < perKind; i++ {
		for _, k := range kinds {
			id := fmt.Sprintf("%s-%d", k, i)
			cs = append(cs, &crossing{id: id, kind: k, fits: k != crossOver, fact: fmt.Sprintf("FACT-CROSS-%s", strings.ToUpper(id))})
		}
	}

	// Each session up to just before its crossing step.
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.create(c.id, 20000)
			first := user("SESSION-" + c.id + ": migrate the billing service to the new schema.")
			switch c.kind {
			case crossPrepared, crossPreparing:
				h.append(c.id, first, assistant(words(6500)), user("continue with the ledger tables"), withUsage(assistant(words(6000)), 6600, 6000))
				if !on {
					return
				}
				f.waitStarted(t, c.id) // the speculative summary is being made
				if c.kind == crossPrepared {
					f.release(c.id)
					h.waitEvent(c.id, 1, checkpoint.KindPrepared)
				}
			default:
				h.append(c.id, first, assistant(words(4500)), user("continue with the ledger tables"), withUsage(assistant(words(4000)), 5000, 4000))
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	// The crossing step and the pre-send read, every session at once.
	read := func(c *crossing) {
		c.from = clock.Add(1)
		start := time.Now()
		a, err := h.e.Context(ctx, c.id, ContextOptions{})
		c.took = time.Since(start)
		c.to = clock.Add(1)
		if err != nil {
			t.Errorf("%s: %v", c.id, err)
			return
		}
		c.compacted, c.code, c.tokens = a.Compacted, a.DiagnosticCode, a.Tokens
	}
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			step := user(c.fact + ": now drop the legacy tables")
			var res AppendResult
			switch c.kind {
			case crossPrepared, crossPreparing:
				res = h.append(c.id, user(c.fact+": next, a long brief "+words(1800)))
			case crossJump:
				res = h.append(c.id, step, calls("x"), result("x", words(6000)))
			case crossJumpUsage:
				res = h.append(c.id, step, calls("x"), result("x", words(5500)), withUsage(assistant("Dropped them."), 14600, 20))
			case crossOver:
				res = h.append(c.id, step, calls("x"), result("x", words(12500)))
			}
			if res.Tokens < res.Threshold || (res.Tokens > 20000) == c.fits {
				t.Errorf("%s: %d tokens after the step (threshold %d, window 20,000); want past the threshold, fits %v", c.id, res.Tokens, res.Threshold, c.fits)
			}
			if !c.fits {
				// It waits for its compaction: let the call end once it runs.
				go func() { f.waitStarted(t, c.id); f.release(c.id) }()
			}
			read(c)
		}()
	}
	wg.Wait()
	// Every read has returned: the calls still running end now.
	f.releaseAll()

	blocked := map[string]int{}
	var fitBlocked, fitReads int
	var fitTook []time.Duration
	for _, c := range cs {
		b := f.within(c.id, c.from, c.to)
		if b {
			blocked[c.kind]++
		}
		if c.fits {
			fitReads++
			fitTook = append(fitTook, c.took)
			if b {
				fitBlocked++
			}
			if on && b {
				t.Errorf("%s: the read waited for a summarizer call (compacted %v, diagnostic %q); its context fits the window", c.id, c.compacted, c.code)
			}
			if on && !c.compacted && c.code != api.DiagSummaryPreparing && c.code != api.DiagCompactionQueued {
				t.Errorf("%s: served uncompacted with diagnostic %q; want %q", c.id, c.code, api.DiagSummaryPreparing)
			}
		} else if !b || !c.compacted {
			t.Errorf("%s: over the window, the read did not wait for its compaction (blocked %v, compacted %v, %q)", c.id, b, c.compacted, c.code)
		}
	}
	slices.Sort(fitTook)
	t.Logf("prepare_percent %d: %d of %d reads that fit the window waited for a summarizer call; by kind %v (%d sessions of each of %v); their wall time (not asserted) p50 %v, p99 %v", pct, fitBlocked, fitReads, blocked, perKind, kinds,
		fitTook[len(fitTook)/2].Round(time.Millisecond), fitTook[(len(fitTook)*99+99)/100-1].Round(time.Millisecond))

	// Then every session compacts, and nothing of the crossing step is lost.
	for _, c := range cs {
		if err := h.e.WaitCompaction(ctx, c.id); err != nil {
			t.Fatalf("%s: %v", c.id, err)
		}
		a := h.context(c.id)
		if a.CheckpointSeq == 0 || a.Tokens >= a.Threshold {
			t.Errorf("%s: after the background work: checkpoint %d, %d tokens (threshold %d)", c.id, a.CheckpointSeq, a.Tokens, a.Threshold)
		}
		if !strings.Contains(contextText(a), c.fact) {
			t.Errorf("%s: the context lost the crossing step's %s", c.id, c.fact)
		}
		if on && c.kind == crossPrepared && f.count(c.id) != 1 {
			t.Errorf("%s: %d summarizer calls; want 1 (the prepared summary installed)", c.id, f.count(c.id))
		}
	}
}
