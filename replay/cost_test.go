package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/ledger"
	"github.com/ctxd/ctxd/transcript"
)

// TestReplayReportsCost: a recorded Claude Code session replayed with a
// threshold where its agent compacted: one request per response, the
// agent's own requests (read from the cache as far as written) against
// ctxd's, net savings with the summarizer subtracted and named against
// what the agent paid, ctxd's cache writes split by cause (summing to
// them), in the JSON report and the text.
func TestReplayReportsCost(t *testing.T) {
	tr := importCorpus(t, "claude-code/autocompact-150tools.jsonl")
	cfg := config.Defaults()
	cfg.ContextCompaction.Trigger = config.Trigger{BufferTokens: 33000}
	r, err := Run(context.Background(), tr, Options{Config: cfg, ContextLimit: 200000})
	if err != nil {
		t.Fatal(err)
	}
	c := r.Cost.Totals
	if !r.Cost.Priced || c.Requests != uint64(r.Responses) || c.WithoutCtxd <= 0 || c.Paid <= 0 {
		t.Fatalf("cost %+v for %d responses", r.Cost, r.Responses)
	}
	if math.Abs(c.Saved-(c.WithoutCtxd-c.Paid-c.Summarizer)) > 1e-9 || math.Abs(c.SavedShare*c.WithoutCtxd-c.Saved) > 1e-9 {
		t.Fatalf("saved %v share %v of %v", c.Saved, c.SavedShare, c.WithoutCtxd)
	}
	if c.SentTokens >= c.ClientTokens || c.Saved <= 0 || c.CacheWrites[ledger.CauseGrowth] == 0 || c.CacheWrites[ledger.CausePass] == 0 {
		t.Fatalf("tokens %d sent for the agent's %d, saved $%.4f, cache writes %v", c.SentTokens, c.ClientTokens, c.Saved, c.CacheWrites)
	}
	var sum uint64
	for _, n := range c.CacheWrites {
		sum += n
	}
	if sum != c.Reported.CacheWrite() {
		t.Fatalf("causes sum to %d of %d cache writes", sum, c.Reported.CacheWrite())
	}
	b, _ := json.Marshal(r)
	var back struct {
		Cost struct {
			Totals struct {
				WithoutCtxd float64 `json:"without_ctxd"`
				Saved       float64 `json:"saved"`
			} `json:"totals"`
		} `json:"cost"`
	}
	if json.Unmarshal(b, &back) != nil || back.Cost.Totals.WithoutCtxd != c.WithoutCtxd || back.Cost.Totals.Saved != c.Saved {
		t.Fatalf("JSON cost %+v", back.Cost)
	}
	var out bytes.Buffer
	r.WriteText(&out)
	if !strings.Contains(out.String(), "without ctxd $") || !strings.Contains(out.String(), "% of the $") || !strings.Contains(out.String(), "growth ") {
		t.Fatalf("text report:\n%s", out.String())
	}
	t.Logf("%s", out.String())
}

// TestWithoutCtxdDoesNotDependOnTheWindow: what the agent would have paid
// without ctxd is a property of the recording, not of how hard ctxd
// compacts it. The demo session replayed with a 200k and a 50k window
// (one compaction, then many) prices the agent's own requests alike: the
// client's bytes are counted at the client's token rate, never at that of
// ctxd's summaries and stubs (which put the 50k baseline at 3.9 times the
// 200k one).
func TestWithoutCtxdDoesNotDependOnTheWindow(t *testing.T) {
	data, err := os.ReadFile(DemoPath)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := transcript.Import(bytes.NewReader(data), transcript.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var without [2]ledger.Totals
	var compactions [2]int
	for i, limit := range []uint64{200000, 50000} {
		r, err := Run(context.Background(), tr, Options{Config: config.Defaults(), ContextLimit: limit})
		if err != nil {
			t.Fatal(err)
		}
		without[i], compactions[i] = r.Cost.Totals, len(r.Compactions)
	}
	if compactions[1] <= compactions[0] {
		t.Fatalf("compactions %d at 50k, %d at 200k: the smaller window should compact more", compactions[1], compactions[0])
	}
	ratio := float64(without[1].ClientTokens) / float64(without[0].ClientTokens)
	cost := without[1].WithoutCtxd / without[0].WithoutCtxd
	if math.Abs(ratio-1) > 0.01 || math.Abs(cost-1) > 0.01 {
		t.Fatalf("without ctxd at 50k vs 200k: tokens ×%.3f, cost ×%.3f (want within 1 %%)", ratio, cost)
	}
}
