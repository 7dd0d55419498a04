package engine

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/ledger"
	"github.com/ctxd/ctxd/trigger"
)

// preparedFact is a fact only the prepared summary states.
const preparedFact = "FACT-PREPARED-7731: the migration key is blue-heron"

// specConfig is a configuration with fake as the only summarizer binding
// (priced as a catalog model, so costs show) and the default prepare mark:
// a 20,000-token window compacts at 14,000 and prepares at 12,000.
func specConfig(fake *fakeAnthropic) config.Config {
	cfg := testConfig()
	b := fake.binding()
	b.Model = "claude-sonnet-4-5"
	cfg.Summarizer.Bindings = []config.Binding{b}
	return cfg
}

// toPrepareMark fills session id (20,000-token window) to about 12,600
// tokens with a closed round and a reported usage (the request's input,
// then the answer's output): past the prepare mark, below the threshold.
// It returns the newest message's seq.
func (h *harness) toPrepareMark(id string) uint64 {
	h.t.Helper()
	res := h.append(id, user("Migrate the billing service to the new schema."), assistant(words(6500)),
		user("continue with the ledger tables"), withUsage(assistant(words(6000)), 6600, 6000))
	if res.CompactionQueued || res.Tokens >= res.Threshold || res.Tokens < 12000 {
		h.t.Fatalf("filled to %d tokens (threshold %d, compaction queued %v); want 12,000..14,000", res.Tokens, res.Threshold, res.CompactionQueued)
	}
	return res.LastSeq
}

func (h *harness) prepared(id string) []preparedSummary {
	h.t.Helper()
	var out []preparedSummary
	for _, ev := range h.events(id, checkpoint.KindPrepared) {
		var p preparedSummary
		if err := json.Unmarshal(ev.Data, &p); err != nil {
			h.t.Fatal(err)
		}
		p.Seq = ev.Seq
		out = append(out, p)
	}
	return out
}

func (h *harness) ledgerTotals(id string) ledger.Totals {
	h.t.Helper()
	_, tot, err := h.e.Ledger(context.Background(), id)
	if err != nil {
		h.t.Fatal(err)
	}
	return tot
}

// specSummary is a plausible summary of the sessions these tests fill
// (about 1,100 bytes: more than 1 % of their history) stating
// preparedFact, then extra.
func specSummary(extra ...string) string {
	return "## Goal\nMigrate billing.\n" + preparedFact + "\n" + strings.Repeat("The ledger tables keep their keys. ", 30) + strings.Join(extra, "\n")
}

func contextText(a *Assembled) string {
	var b strings.Builder
	for _, m := range a.Messages {
		for _, bl := range m.Content {
			b.WriteString(bl.Text)
			b.WriteString("\n")
		}
	}
	return b.String()
}

// The prepare mark starts the summary in the background as an extension
// of the session's last request; the trigger installs it without calling
// the summarizer again, and the messages after it follow it verbatim:
// nothing the prepared summary covers, nor anything after it, is lost.
func TestPreparedSummaryInstalledAtTriggerLosesNothing(t *testing.T) {
	fake := newFakeAnthropic(t, okSummary(specSummary()))
	h := newHarness(t, specConfig(fake), "")
	h.create("s", 20000)
	last := h.toPrepareMark("s")
	ev := h.waitEvent("s", 1, checkpoint.KindPrepared)
	ps := h.prepared("s")
	if len(ps) != 1 || ps[0].SnapshotSeq != last || ps[0].Base != 0 {
		t.Fatalf("prepared = %+v, want one covering up to seq %d", ps, last)
	}
	if fake.count() != 1 {
		t.Fatalf("summarizer requests = %d, want 1", fake.count())
	}
	// A cache-friendly extension of the session's last request: its system
	// prompt, then the session's messages, then the prompt.
	var req struct {
		System   any `json:"system"`
		Messages []struct {
			Role string `json:"role"`
		} `json:"messages"`
	}
	fake.mu.Lock()
	body := fake.requests[0]
	fake.mu.Unlock()
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatal(err)
	}
	if sys, _ := json.Marshal(req.System); !strings.Contains(string(sys), "You are a test agent.") {
		t.Fatalf("summarizer request's system = %s, want the session's", sys)
	}
	if n := len(h.context("s").Messages); len(req.Messages) < n {
		t.Fatalf("summarizer request has %d messages, want the context's %d and the prompt", len(req.Messages), n)
	}

	// Cross the threshold: the post-check compacts, installing the
	// prepared summary.
	h.append("s", user("now FACT-AFTER-1: rename the invoices table"), withUsage(assistant("Renamed invoices to bills."), 14200, 50))
	cpEv := h.waitEvent("s", ev.Seq, checkpoint.KindCheckpoint)
	if fake.count() != 1 {
		t.Fatalf("summarizer requests = %d after the trigger, want still 1 (installed, not re-summarized)", fake.count())
	}
	cp, err := h.log.GetCheckpoint(context.Background(), "s", cpEv.Seq)
	if err != nil {
		t.Fatal(err)
	}
	if cp.SnapshotSeq != last || !strings.Contains(cp.Summary, preparedFact) {
		t.Fatalf("checkpoint covers to %d with summary %.200q; want the prepared one, to %d", cp.SnapshotSeq, cp.Summary, last)
	}
	a := h.context("s")
	checkValid(t, a.Messages)
	txt := contextText(a)
	for _, want := range []string{preparedFact, "FACT-AFTER-1", "Renamed invoices to bills.", "Migrate the billing service"} {
		if !strings.Contains(txt, want) {
			t.Errorf("context after the install lacks %q", want)
		}
	}
	tot := h.ledgerTotals("s")
	if tot.PreparedMade != 1 || tot.PreparedUsed != 1 || tot.PreparedUnused != 0 {
		t.Fatalf("ledger: made %d used %d unused %d, want 1 1 0", tot.PreparedMade, tot.PreparedUsed, tot.PreparedUnused)
	}
}

// What came after the prepared summary and does not fit the retention
// budget is folded by an extractive summary of the new part only: the
// prepared summary is kept whole, no summarizer call on the request path.
func TestPreparedSummaryFoldsANewPartThatDoesNotFit(t *testing.T) {
	fake := newFakeAnthropic(t, okSummary(specSummary()))
	cfg := specConfig(fake)
	h := newHarness(t, cfg, "")
	h.create("s", 20000)
	last := h.toPrepareMark("s")
	ev := h.waitEvent("s", 1, checkpoint.KindPrepared)
	// A new part larger than the retention budget (at most 5,000 tokens).
	// The post-check fires (18,500 ≥ 14,000) and installs.
	h.append("s", user("then FACT-NEW-2: drop the legacy_refunds table"), calls("x"), result("x", words(5500)),
		withUsage(assistant("Dropped legacy_refunds."), 18500, 50))
	cpEv := h.waitEvent("s", ev.Seq, checkpoint.KindCheckpoint)
	if fake.count() != 1 {
		t.Fatalf("summarizer requests = %d, want 1", fake.count())
	}
	cp, err := h.log.GetCheckpoint(context.Background(), "s", cpEv.Seq)
	if err != nil {
		t.Fatal(err)
	}
	if cp.SnapshotSeq <= last {
		t.Fatalf("checkpoint covers to %d, want past the prepared snapshot %d (folded)", cp.SnapshotSeq, last)
	}
	i := strings.Index(cp.Summary, preparedFact)
	j := strings.Index(cp.Summary, FoldHeading)
	if i < 0 || j < i {
		t.Fatalf("summary %.300q: want the prepared summary whole, then %q", cp.Summary, FoldHeading)
	}
	if !strings.Contains(cp.Summary[j:], "FACT-NEW-2") {
		t.Errorf("the fold lacks the new part's request: %q", cp.Summary[j:])
	}
	if cp.Stalled {
		t.Errorf("the install stalled at %d tokens", cp.TokensAfter)
	}
	checkValid(t, h.context("s").Messages)
}

// A prepared summary the session outgrows is extended: the summarizer
// reads it and the messages after it, not the history it covers.
func TestPreparedSummaryIsExtended(t *testing.T) {
	fake := newFakeAnthropic(t, okSummary(specSummary()), okSummary(specSummary("FACT-EXT-3 extended.")))
	cfg := specConfig(fake)
	cfg.ContextCompaction.KeepRecentTokens = 2000
	h := newHarness(t, cfg, "")
	h.create("s", 20000)
	h.toPrepareMark("s")
	ev := h.waitEvent("s", 1, checkpoint.KindPrepared)
	// The job that wrote the event ends before the next check: while it
	// runs no second one is queued (prepareWanted), and nothing would ask
	// again in this test.
	h.waitJobDone("s")
	// Over half the retention budget (2,000) more, still below the
	// threshold; the pre-send check starts the extension.
	h.append("s", user("FACT-EXT-3 check the refunds"), assistant(words(1100)))
	if _, err := h.e.Context(context.Background(), "s", ContextOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitEvent("s", ev.Seq+1, checkpoint.KindPrepared)
	ps := h.prepared("s")
	if len(ps) != 2 || ps[1].Extends != ps[0].Seq || ps[1].SnapshotSeq <= ps[0].SnapshotSeq {
		t.Fatalf("prepared = %+v, want the second extending the first", ps)
	}
	fake.mu.Lock()
	body := string(fake.requests[1])
	fake.mu.Unlock()
	if !strings.Contains(body, "FACT-PREPARED-7731") || !strings.Contains(body, "FACT-EXT-3") {
		t.Fatal("the extension request lacks the prepared summary or the new part")
	}
	if strings.Contains(body, words(6500)) {
		t.Fatal("the extension re-reads the history the prepared summary covers")
	}
	tot := h.ledgerTotals("s")
	if tot.PreparedMade != 2 || tot.PreparedExtended != 1 {
		t.Fatalf("ledger: made %d extended %d, want 2 1", tot.PreparedMade, tot.PreparedExtended)
	}
}

// A pre-send check over the threshold while the speculative summary is
// being made does not wait for it when the context fits the window: it is
// served at once, and the summary is installed when ready.
func TestPreSendDoesNotWaitForAPreparingSummary(t *testing.T) {
	fake := newFakeAnthropic(t, okSummary(specSummary()))
	fake.release = make(chan struct{})
	h := newHarness(t, specConfig(fake), "")
	h.create("s", 20000)
	h.toPrepareMark("s")
	<-fake.received // the summarizer call is running
	h.append("s", user("next: FACT-AFTER-4 and a long brief "+words(1800)))
	a, err := h.e.Context(context.Background(), "s", ContextOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Compacted || a.DiagnosticCode != api.DiagSummaryPreparing {
		t.Fatalf("pre-send: compacted %v, diagnostic %q (%s); want served at once with %q", a.Compacted, a.DiagnosticCode, a.Diagnostic, api.DiagSummaryPreparing)
	}
	close(fake.release)
	cpEv := h.waitEvent("s", 1, checkpoint.KindCheckpoint)
	cp, err := h.log.GetCheckpoint(context.Background(), "s", cpEv.Seq)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cp.Summary, preparedFact) || fake.count() != 1 {
		t.Fatalf("checkpoint summary %.120q after %d summarizer calls; want the prepared one, 1 call", cp.Summary, fake.count())
	}
	if !strings.Contains(contextText(h.context("s")), "FACT-AFTER-4") {
		t.Fatal("the message after the prepared snapshot is lost")
	}
}

// Overflow recovery installs the prepared summary (no summarizer call),
// and so does a manual compaction.
func TestOverflowUsesThePreparedSummary(t *testing.T) {
	fake := newFakeAnthropic(t, okSummary(specSummary()))
	h := newHarness(t, specConfig(fake), "")
	h.create("s", 20000)
	h.toPrepareMark("s")
	h.waitEvent("s", 1, checkpoint.KindPrepared)
	res, err := h.e.Compact(context.Background(), "s", trigger.Overflow, true)
	if err != nil {
		t.Fatal(err)
	}
	if res.Checkpoint == nil || !strings.Contains(res.Checkpoint.Summary, preparedFact) || fake.count() != 1 {
		t.Fatalf("overflow checkpoint %+v after %d summarizer calls; want the prepared summary, 1 call", res.Checkpoint, fake.count())
	}
	if tot := h.ledgerTotals("s"); tot.PreparedUsed != 1 {
		t.Fatalf("prepared used = %d, want 1", tot.PreparedUsed)
	}
}

// A manual compaction asked for while the summary is being made joins the
// job and still compacts (with the summary, once ready).
func TestManualCompactionJoiningAPreparationCompacts(t *testing.T) {
	fake := newFakeAnthropic(t, okSummary(specSummary()))
	fake.release = make(chan struct{})
	h := newHarness(t, specConfig(fake), "")
	h.create("s", 20000)
	h.toPrepareMark("s")
	<-fake.received
	done := make(chan CompactResult, 1)
	go func() {
		res, err := h.e.Compact(context.Background(), "s", trigger.Manual, true)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	// The summary is released once the manual compaction has joined the
	// job (a compaction that came after the job might find it already
	// compacted at the pre-send mark: nothing to compact).
	joined := func() bool {
		s, err := h.e.lock(context.Background(), "s")
		if err != nil {
			t.Fatal(err)
		}
		defer s.mu.Unlock()
		return s.afterPrepare == trigger.Manual
	}
	for deadline := time.Now().Add(30 * time.Second); !joined(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the manual compaction never joined the speculative summary job")
		}
	}
	close(fake.release)
	res := <-done
	if res.Checkpoint == nil || !strings.Contains(res.Checkpoint.Summary, preparedFact) {
		t.Fatalf("manual compaction result %+v; want a checkpoint of the prepared summary", res)
	}
}

// A prepared summary that cannot be installed (the fold would not fit
// max_summary_bytes) is never used: the full compaction runs, and the
// ledger shows the unused one with its cost.
func TestUnusedPreparedSummaryIsALedgerEntry(t *testing.T) {
	long := "## Goal\n" + preparedFact + "\n" + strings.Repeat("detail ", 120)
	fake := newFakeAnthropic(t, okSummary(long), okSummary("## Goal\nfull summary\n"+strings.Repeat("The full compaction speaks. ", 40)))
	cfg := specConfig(fake)
	cfg.ContextCompaction.MaxSummaryBytes = uint64(len(long) + 200)
	h := newHarness(t, cfg, "")
	h.create("s", 20000)
	h.toPrepareMark("s")
	ev := h.waitEvent("s", 1, checkpoint.KindPrepared)
	h.append("s", user("then drop the legacy table"), calls("x"), result("x", words(5500)), withUsage(assistant("Dropped."), 18500, 50))
	h.waitEvent("s", ev.Seq, checkpoint.KindCheckpoint)
	tot := h.ledgerTotals("s")
	if tot.PreparedMade != 1 || tot.PreparedUnused != 1 || tot.PreparedUsed != 0 {
		t.Fatalf("ledger: made %d used %d unused %d; want 1 0 1", tot.PreparedMade, tot.PreparedUsed, tot.PreparedUnused)
	}
	if tot.PreparedUnusedCost <= 0 {
		t.Fatalf("unused cost = %v, want the prepared summary's call priced", tot.PreparedUnusedCost)
	}
	if fake.count() != 2 {
		t.Fatalf("summarizer requests = %d, want 2 (prepare, full)", fake.count())
	}
}

// A prepared summary survives a restart: it is an event of the log, and
// the reloaded session installs it.
func TestPreparedSummarySurvivesARestart(t *testing.T) {
	fake := newFakeAnthropic(t, okSummary(specSummary()))
	dir := t.TempDir()
	h := newHarness(t, specConfig(fake), dir)
	h.create("s", 20000)
	h.toPrepareMark("s")
	h.waitEvent("s", 1, checkpoint.KindPrepared)
	h.Close()
	h = newHarness(t, specConfig(fake), dir)
	res, err := h.e.Compact(context.Background(), "s", trigger.Manual, true)
	if err != nil {
		t.Fatal(err)
	}
	if res.Checkpoint == nil || !strings.Contains(res.Checkpoint.Summary, preparedFact) || fake.count() != 1 {
		t.Fatalf("checkpoint after a restart %+v, %d summarizer calls; want the prepared summary, 1 call", res.Checkpoint, fake.count())
	}
}

// prepare_percent = 100 turns speculative summaries off: nothing is
// prepared, and the trigger summarizes as before.
func TestPreparePercentOff(t *testing.T) {
	fake := newFakeAnthropic(t, okSummary("## Goal\nfull\n"+strings.Repeat("The full compaction speaks. ", 40)))
	cfg := specConfig(fake)
	cfg.ContextCompaction.PreparePercent = config.PrepareOff
	h := newHarness(t, cfg, "")
	h.create("s", 20000)
	h.toPrepareMark("s")
	if _, err := h.e.Context(context.Background(), "s", ContextOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := h.e.WaitCompaction(context.Background(), "s"); err != nil {
		t.Fatal(err)
	}
	if n := len(h.prepared("s")); n != 0 || fake.count() != 0 {
		t.Fatalf("%d prepared, %d summarizer calls; want none", n, fake.count())
	}
}

// With the derived prepare mark, a session whose summarizer the client's
// credential pays prepares nothing (a call the client may never need);
// an explicit prepare_percent turns speculative summaries on there too.
func TestPrepareDefaultOffWhenTheClientPays(t *testing.T) {
	for _, pct := range []uint64{0, 60} {
		fake := newFakeAnthropic(t, okSummary(specSummary()))
		cfg := specConfig(fake)
		cfg.ContextCompaction.PreparePercent = pct
		h := newHarness(t, cfg, "")
		b := fake.binding()
		b.Credential = &config.Credential{}
		h.e.SetSessionBindings(func(string, map[string]string) ([]config.Binding, bool, error) {
			return []config.Binding{b}, true, nil
		})
		h.create("s", 20000)
		h.toPrepareMark("s")
		s, err := h.e.lock(context.Background(), "s")
		if err != nil {
			t.Fatal(err)
		}
		tokens, _ := s.estimate()
		why := h.e.prepareGate(s, tokens)
		s.mu.Unlock()
		if (why == "") != (pct != 0) {
			t.Errorf("prepare_percent %d, client pays: gate %q", pct, why)
		}
		h.Close()
	}
}
