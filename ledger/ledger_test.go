package ledger

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
)

// req builds a request of elements of the given sizes (each element's
// bytes are its label repeated), the marker on the last element.
func req(labels ...string) Request {
	r := Request{Model: "claude-opus-4-8", LastMarker: len(labels) - 1}
	for _, l := range labels {
		r.Elements = append(r.Elements, []byte(strings.Repeat(l, 100)))
	}
	return r
}

func TestCacheModelReadsWhatWasWrittenUntilItExpires(t *testing.T) {
	var c CacheModel
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if b := c.Bill(req("t", "s", "a"), t0); b.Read != 0 || b.Write != 300 || !b.Fresh {
		t.Fatalf("first request: %+v, want 300 bytes written, nothing read", b)
	}
	if b := c.Bill(req("t", "s", "a", "b"), t0.Add(time.Minute)); b.Read != 300 || b.Write != 100 || b.Expired+b.Changed != 0 {
		t.Fatalf("growth: %+v, want the old prefix read and the new message written", b)
	}
	// Past the 5-minute lifetime: everything is written again, as expiry.
	if b := c.Bill(req("t", "s", "a", "b", "c"), t0.Add(7*time.Minute)); b.Read != 0 || b.Write != 500 || b.Expired != 400 {
		t.Fatalf("after expiry: %+v, want 500 written, 400 of them expired", b)
	}
	// The client edits its first message: what follows is a change.
	if b := c.Bill(req("t", "s", "X", "b", "c"), t0.Add(8*time.Minute)); b.Read != 200 || b.Changed != 300 {
		t.Fatalf("an edit: %+v, want 200 read, 300 changed", b)
	}
	// Nothing after the last marker is written.
	r := req("t", "s", "X", "b", "c", "d")
	r.LastMarker = 4
	if b := c.Bill(r, t0.Add(9*time.Minute)); b.Read != 500 || b.Write != 0 || b.Input != 100 {
		t.Fatalf("after the marker: %+v, want 500 read, 100 uncached input", b)
	}
}

func TestOneHourMarkersOutliveFiveMinutes(t *testing.T) {
	var c CacheModel
	t0 := time.Now()
	r := req("t", "a")
	r.LongTTL = true
	c.Bill(r, t0)
	if b := c.Bill(r, t0.Add(30*time.Minute)); b.Read != 200 {
		t.Fatalf("1-hour entry after 30 minutes: %+v, want read", b)
	}
}

// TestEntryAttributesEveryCacheWrite: ctxd's writes split into the
// client's growth and the rewrite that broke ctxd's prefix, summing to
// what the provider reported.
func TestEntryAttributesEveryCacheWrite(t *testing.T) {
	var c Conversation
	t0 := time.Now()
	// 1 token = 10 bytes in this conversation's reports.
	obs := func(at time.Duration, client, sent Request, reported Usage, rewrites ...string) Entry {
		return c.Entry(Observation{Time: t0.Add(at), Model: "claude-opus-4-8", Mode: ModeEnforce, Client: client, Ctxd: sent, Reported: reported, Rewrites: rewrites})
	}
	e := obs(0, req("t", "s", "a"), req("t", "s", "a"), Usage{CacheWrite5m: 30, Output: 5})
	if e.Counterfactual.CacheWrite5m != 30 || e.Causes[CauseGrowth] != 30 || e.ClientTokens != 30 || e.SentTokens != 30 {
		t.Fatalf("first: %+v", e)
	}
	e = obs(time.Minute, req("t", "s", "a", "b"), req("t", "s", "a", "b"), Usage{CacheRead: 30, CacheWrite5m: 10, Output: 5})
	if e.Counterfactual != e.Reported || e.Causes[CauseGrowth] != 10 || len(e.Causes) != 1 {
		t.Fatalf("growth: %+v", e)
	}
	// ctxd compacts: a, b become a summary Z; the client's own request
	// grows by c.
	e = obs(2*time.Minute, req("t", "s", "a", "b", "c"), req("t", "s", "Z", "c"), Usage{CacheRead: 20, CacheWrite5m: 20, Output: 5}, CauseCompaction)
	if e.Causes[CauseGrowth] != 10 || e.Causes[CauseCompaction] != 10 {
		t.Fatalf("compaction: causes %v, want 10 growth + 10 compaction", e.Causes)
	}
	if e.Counterfactual.CacheRead != 40 || e.Counterfactual.CacheWrite5m != 10 || e.ClientTokens != 50 || e.SentTokens != 40 {
		t.Fatalf("compaction: counterfactual %+v client %d sent %d", e.Counterfactual, e.ClientTokens, e.SentTokens)
	}
	var sum uint64
	for _, n := range e.Causes {
		sum += n
	}
	if sum != e.Reported.CacheWrite() {
		t.Fatalf("causes sum to %d, reported writes %d", sum, e.Reported.CacheWrite())
	}
	// Ten minutes idle: the whole prefix is written again, as expiry.
	e = obs(12*time.Minute, req("t", "s", "a", "b", "c", "d"), req("t", "s", "Z", "c", "d"), Usage{CacheWrite5m: 50, Output: 5})
	if e.Causes[CauseGrowth] != 10 || e.Causes[CauseTTLExpiry] != 40 {
		t.Fatalf("expiry: causes %v, want 10 growth + 40 ttl_expiry", e.Causes)
	}
}

// TestUnchangedRequestClaimsNothing: when ctxd sends the client's request
// on the same cache state, the counterfactual is what the provider
// reported, to the token, even where its tokens are not spread evenly
// over the bytes (a rate over bytes would have claimed 31 read, 9 written
// as 30 and 10: a ledger of −0.1 % on a session ctxd never touched).
func TestUnchangedRequestClaimsNothing(t *testing.T) {
	var c Conversation
	t0 := time.Now()
	c.Entry(Observation{Time: t0, Model: "claude-opus-4-8", Mode: ModeEnforce, Client: req("t", "s", "a"), Ctxd: req("t", "s", "a"), Reported: Usage{CacheWrite5m: 33, Output: 5}})
	rep := Usage{CacheRead: 33, CacheWrite5m: 9, Output: 5}
	e := c.Entry(Observation{Time: t0.Add(time.Minute), Model: "claude-opus-4-8", Mode: ModeEnforce, Client: req("t", "s", "a", "b"), Ctxd: req("t", "s", "a", "b"), Reported: rep})
	if e.Counterfactual != rep {
		t.Fatalf("unchanged request: counterfactual %+v, reported %+v", e.Counterfactual, rep)
	}
	e.Price(config.Defaults())
	if e.Cost != e.CounterfactualCost {
		t.Errorf("cost %v, without ctxd %v: a saving claimed for nothing", e.Cost, e.CounterfactualCost)
	}
}

// TestObserveProjectsCtxdsRequest: in observe mode the reported usage is
// the client's, and the counterfactual is ctxd's request on its own cache
// model.
func TestObserveProjectsCtxdsRequest(t *testing.T) {
	var c Conversation
	t0 := time.Now()
	e := c.Entry(Observation{Time: t0, Model: "m", Mode: ModeObserve, Client: req("t", "a", "b", "c"), Ctxd: req("t", "Z"), Reported: Usage{CacheWrite5m: 40}})
	if e.ClientTokens != 40 || e.SentTokens != 20 || e.Counterfactual.CacheWrite5m != 20 || e.Causes[CauseGrowth] != 20 {
		t.Fatalf("observe: %+v", e)
	}
}

func TestColdAfterRestartClaimsNothing(t *testing.T) {
	var c Conversation
	rep := Usage{CacheRead: 900, CacheWrite5m: 10, Output: 3}
	e := c.Entry(Observation{Time: time.Now(), Model: "m", Mode: ModeEnforce, Client: req("t", "a", "b"), Ctxd: req("t", "Z"), Reported: rep})
	if !e.Cold || e.Counterfactual != rep {
		t.Fatalf("cold: %+v", e)
	}
}

func TestPriceOf(t *testing.T) {
	cfg := config.Defaults()
	p, ok := PriceOf(cfg, "claude-sonnet-4-5-20250929")
	if !ok || p.Input != 3 || p.CacheRead != 0.3 || p.CacheWrite5m != 3.75 || p.CacheWrite1h != 6 || p.Output != 15 {
		t.Fatalf("dated sonnet: %+v %v", p, ok)
	}
	m := cfg.Models["claude-sonnet-4-5"]
	m.Price = &config.Price{Input: 1, CacheWrite5m: 2, CacheWrite1h: 3, CacheRead: 0.5, Output: 4}
	cfg.Models["claude-sonnet-4-5"] = m
	if p, _ := PriceOf(cfg, "claude-sonnet-4-5"); p.Input != 1 || p.Output != 4 {
		t.Fatalf("override: %+v", p)
	}
	if _, ok := PriceOf(cfg, "my-local-model"); ok {
		t.Fatal("a model nothing prices has a price")
	}
	for id := range config.Catalog() {
		if _, ok := PriceOf(config.Defaults(), id); !ok {
			t.Errorf("catalog model %s has no built-in price", id)
		}
	}
}

func TestFromHistorySplitsTheLifetimes(t *testing.T) {
	u := FromHistory(&history.Usage{InputTokens: 3, CacheCreationInputTokens: 100, CacheCreation1hInputTokens: 60, CacheReadInputTokens: 7, OutputTokens: 9})
	if u != (Usage{Input: 3, CacheRead: 7, CacheWrite5m: 40, CacheWrite1h: 60, Output: 9}) {
		t.Fatalf("%+v", u)
	}
	p := config.Price{Input: 3, CacheWrite5m: 3.75, CacheWrite1h: 6, CacheRead: 0.3, Output: 15}
	want := (3*3 + 7*0.3 + 40*3.75 + 60*6 + 9*15) / 1e6
	if got := u.Cost(p); math.Abs(got-want) > 1e-12 {
		t.Fatalf("cost %v, want %v", got, want)
	}
}

// TestTotalsAreNetOfSummarizerCalls: savings subtract ctxd's own calls, and
// the waterfall's middle bars bridge its first bar to its last.
func TestTotalsAreNetOfSummarizerCalls(t *testing.T) {
	cfg := config.Defaults()
	entries := []Entry{
		{Kind: KindRequest, Model: "claude-opus-4-8", Mode: ModeEnforce, ClientTokens: 100000, SentTokens: 20000,
			Reported: Usage{CacheRead: 10000, CacheWrite5m: 10000}, Counterfactual: Usage{CacheRead: 90000, CacheWrite5m: 10000},
			Causes: map[string]uint64{CauseGrowth: 2000, CauseCompaction: 8000}},
		{Kind: KindSummarizer, Model: "claude-opus-4-8", Mode: ModeEnforce, Credential: CredentialClient, Reported: Usage{CacheRead: 90000, Output: 2000}},
		{Kind: KindRequest, Model: "claude-opus-4-8", Mode: ModeObserve, Reported: Usage{CacheRead: 50000}, Counterfactual: Usage{CacheRead: 10000}},
	}
	for i := range entries {
		entries[i].Price(cfg)
	}
	tot := Sum(entries)
	p, _ := PriceOf(cfg, "claude-opus-4-8")
	without := Usage{CacheRead: 90000, CacheWrite5m: 10000}.Cost(p)
	paid := Usage{CacheRead: 10000, CacheWrite5m: 10000}.Cost(p)
	summ := Usage{CacheRead: 90000, Output: 2000}.Cost(p)
	if math.Abs(tot.Saved-(without-paid-summ)) > 1e-9 || math.Abs(tot.SavedShare-tot.Saved/without) > 1e-12 {
		t.Fatalf("saved %v share %v, want %v", tot.Saved, tot.SavedShare, without-paid-summ)
	}
	if tot.TokensSaved != 80000 || tot.Requests != 1 || tot.ObservedRequests != 1 || tot.SummarizerByCredential[CredentialClient] != summ {
		t.Fatalf("totals %+v", tot)
	}
	if math.Abs(tot.ProjectedSaved-(Usage{CacheRead: 40000}.Cost(p))) > 1e-9 {
		t.Fatalf("projected saved %v", tot.ProjectedSaved)
	}
	bars := tot.Waterfall()
	first, last := bars[0], bars[len(bars)-1]
	var mid float64
	for _, b := range bars[1 : len(bars)-1] {
		mid += b.Value
	}
	if first.Label != "without ctxd" || last.Label != "paid with summarizer" || math.Abs(first.Value+mid-last.Value) > 1e-9 {
		t.Fatalf("waterfall %+v does not bridge", bars)
	}
	if bars[2].Label != CauseCompaction || math.Abs(bars[2].Value-8000*p.CacheWrite5m/1e6) > 1e-12 || bars[1].Value >= 0 {
		t.Fatalf("waterfall bars %+v", bars)
	}
	var merged Totals
	merged.Merge(Sum(entries[:1]))
	merged.Merge(Sum(entries[1:]))
	if math.Abs(merged.Saved-tot.Saved) > 1e-12 || merged.CacheWrites[CauseCompaction] != 8000 {
		t.Fatalf("merge %+v", merged)
	}
}

// USD never shows a negative zero, and shows the sign of an amount under
// half a hundredth of a cent (six decimals).
func TestUSD(t *testing.T) {
	for v, want := range map[float64]string{0: "$0.0000", -0.0000004: "$0.0000", -0.00001: "-$0.000010", -0.00004999: "-$0.000050", -0.000035: "-$0.000035", 0.00002: "$0.000020", -0.00005: "-$0.0001", 0.12345: "$0.1235", -1.5: "-$1.5000"} {
		if got := USD(v); got != want {
			t.Errorf("USD(%v) = %q, want %q", v, got, want)
		}
	}
}

// TestCachelessUpstreamClaimsNoCacheSavings: an upstream that reports no
// cache use at all, though the client marks its prefix, bills everything
// as input; the ledger prices the other side the same way, so that the
// saving is only the tokens ctxd kept out, at the input price — never
// cache reads the upstream does not make — and attributes no cache write.
// The first report of a cache read ends it.
func TestCachelessUpstreamClaimsNoCacheSavings(t *testing.T) {
	cfg := config.Defaults()
	p, _ := PriceOf(cfg, "claude-opus-4-8")
	t0 := time.Now()
	for _, mode := range []string{ModeEnforce, ModeObserve} {
		var c Conversation
		var tot Totals
		client := req("t", "s", "a")
		for i, m := range []string{"b", "c", "d", "e"} {
			client.Elements = append(client.Elements, []byte(strings.Repeat(m, 100)))
			client.LastMarker = len(client.Elements) - 1
			ctxd := req("t", "s", "Z", m) // ctxd's request: 400 bytes
			sent := ctxd
			if mode == ModeObserve {
				sent = client
			}
			// 1 token = 10 bytes; everything billed as uncached input.
			en := c.Entry(Observation{Time: t0.Add(time.Duration(i) * time.Minute), Model: "claude-opus-4-8", Mode: mode, Client: client, Ctxd: ctxd,
				Reported: Usage{Input: uint64(sent.Bytes() / 10), Output: 7}})
			en.Price(cfg)
			if !en.Uncached || en.Counterfactual.CacheRead+en.Counterfactual.CacheWrite() != 0 || len(en.Causes) != 0 {
				t.Fatalf("%s request %d: %+v, want an uncached counterfactual and no cause", mode, i, en)
			}
			tot.Add(en)
		}
		// Kept out: client 400+500+600+700 bytes against ctxd's 4 × 400.
		want := float64(2200-1600) / 10 * p.Input / 1e6
		got := tot.Saved
		if mode == ModeObserve {
			got = tot.ProjectedSaved
		}
		if math.Abs(got-want) > 1e-12 || tot.Uncached != 4 || tot.Counterfactual.CacheRead != 0 {
			t.Fatalf("%s: saved %v, want %v (the tokens kept out at the input price); totals %+v", mode, got, want, tot)
		}
		// The upstream reads from its cache after all: the model prices
		// the other side with the cache again.
		client.Elements = append(client.Elements, []byte(strings.Repeat("f", 100)))
		client.LastMarker = len(client.Elements) - 1
		en := c.Entry(Observation{Time: t0.Add(5 * time.Minute), Model: "claude-opus-4-8", Mode: mode, Client: client, Ctxd: req("t", "s", "Z", "f"),
			Reported: Usage{CacheRead: 30, Input: 10, Output: 7}})
		if en.Uncached || en.Counterfactual.CacheRead == 0 {
			t.Fatalf("%s after a cache read: %+v, want the cache model's counterfactual", mode, en)
		}
	}
}

// TestClientChangeIsItsOwnCause: when the client changes its own prefix —
// its system prompt, then its model — the cache writes of what it changed
// are client_change, not ctxd's (other) nor the client's growth, and a
// session ctxd never touched claims nothing.
func TestClientChangeIsItsOwnCause(t *testing.T) {
	var c Conversation
	t0 := time.Now()
	// 1 token = 10 bytes; ctxd sends the client's request unchanged.
	obs := func(at time.Duration, r Request, reported Usage) Entry {
		return c.Entry(Observation{Time: t0.Add(at), Model: r.Model, Mode: ModeEnforce, Client: r, Ctxd: r, Reported: reported})
	}
	if e := obs(0, req("t", "s", "a"), Usage{CacheWrite5m: 30, Output: 5}); e.Causes[CauseGrowth] != 30 {
		t.Fatalf("first: %+v", e)
	}
	// A new system prompt: s and a are written again, b is new.
	e := obs(time.Minute, req("t", "S", "a", "b"), Usage{CacheRead: 10, CacheWrite5m: 30, Output: 5})
	if e.Causes[CauseClientChange] != 20 || e.Causes[CauseGrowth] != 10 || len(e.Causes) != 2 || e.Counterfactual != e.Reported {
		t.Fatalf("system prompt changed: causes %v, counterfactual %+v; want 20 client_change + 10 growth, nothing claimed", e.Causes, e.Counterfactual)
	}
	// Another model: nothing of the cache is its; the whole previous
	// prefix is written again.
	r := req("t", "S", "a", "b", "c")
	r.Model = "claude-sonnet-4-5"
	e = obs(2*time.Minute, r, Usage{CacheWrite5m: 50, Output: 5})
	if e.Causes[CauseClientChange] != 40 || e.Causes[CauseGrowth] != 10 || len(e.Causes) != 2 || e.Counterfactual != e.Reported {
		t.Fatalf("model changed: causes %v, counterfactual %+v; want 40 client_change + 10 growth, nothing claimed", e.Causes, e.Counterfactual)
	}
}

// A usage as the provider would have reported it reads back as itself.
func TestUsageHistoryReadsBack(t *testing.T) {
	u := Usage{Input: 3, CacheRead: 7, CacheWrite5m: 40, CacheWrite1h: 60, Output: 9}
	if got := FromHistory(u.History()); got != u {
		t.Fatalf("%+v, want %+v", got, u)
	}
}
