package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/ledger"
)

// fakeClock is an injectable clock (Options.Now): tests move it, never
// sleep.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

var clockStart = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

// idleHarness is a harness whose engine reads clk; speculative summaries
// are off so that idle compaction is what is measured.
func idleHarness(t *testing.T, cfg config.Config) (*harness, *fakeClock) {
	cfg.ContextCompaction.PreparePercent = config.PrepareOff
	h := newHarness(t, cfg, "")
	clk := &fakeClock{t: clockStart}
	h.e.opts.Now = clk.Now // before the engine's first use
	return h, clk
}

// A session idle until shortly before its 5-minute cache lapses is
// compacted then, once, with the expected payback in its ledger; not
// earlier, and not after the cache lapsed.
func TestIdleCompactionBeforeTheCacheLapses(t *testing.T) {
	h, clk := idleHarness(t, testConfig()) // the extractive summarizer: free
	h.create("s", 20000)
	h.toPrepareMark("s") // a provider request answered at clockStart
	ctx := context.Background()

	clk.set(clockStart.Add(2 * time.Minute))
	if got := h.e.CompactIdle(ctx); len(got) != 0 {
		t.Fatalf("at 2 min: %+v, want nothing (the cache lives 3 more minutes)", got)
	}
	clk.set(clockStart.Add(CacheTTLDefault - time.Minute))
	got := h.e.CompactIdle(ctx)
	if len(got) != 1 || got[0].PaybackTokens <= 0 || got[0].ExpectedAfter >= got[0].Tokens ||
		!got[0].CacheExpires.Equal(clockStart.Add(CacheTTLDefault)) {
		t.Fatalf("at 4 min: %+v, want one idle compaction paying back", got)
	}
	ev := h.waitEvent("s", 1, checkpoint.KindCheckpoint)
	cp, err := h.log.GetCheckpoint(ctx, "s", ev.Seq)
	if err != nil {
		t.Fatal(err)
	}
	if cp.Reason != "idle" {
		t.Fatalf("checkpoint reason %q, want idle", cp.Reason)
	}
	if again := h.e.CompactIdle(ctx); len(again) != 0 {
		t.Fatalf("a second sweep queued %+v, want nothing (once per cache lifetime)", again)
	}
	entries, tot, err := h.e.Ledger(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	var idle *ledger.Entry
	for i := range entries {
		if entries[i].Kind == ledger.KindIdle {
			idle = &entries[i]
		}
	}
	if idle == nil || tot.IdleCompactions != 1 || idle.PaybackTokens <= 0 || idle.TokensAfter >= idle.TokensBefore || idle.CacheTTLSeconds != 300 {
		t.Fatalf("ledger idle entry %+v, totals %d; want one with a positive payback", idle, tot.IdleCompactions)
	}
	if int64(float64(idle.TokensBefore-idle.TokensAfter)*1.25) != idle.PaybackTokens {
		t.Fatalf("payback %d, want (before − after) × 1.25 with a free summarizer", idle.PaybackTokens)
	}
}

func TestIdleCompactionNotAfterTheCacheLapsed(t *testing.T) {
	h, clk := idleHarness(t, testConfig())
	h.create("s", 20000)
	h.toPrepareMark("s")
	clk.set(clockStart.Add(CacheTTLDefault + time.Second))
	if got := h.e.CompactIdle(context.Background()); len(got) != 0 {
		t.Fatalf("after the cache lapsed: %+v, want nothing (the rewrite is paid either way)", got)
	}
}

// A request that wrote the 1-hour cache is compacted near the end of the
// hour, not of five minutes.
func TestIdleCompactionFollowsTheOneHourLifetime(t *testing.T) {
	h, clk := idleHarness(t, testConfig())
	h.create("s", 20000)
	m := withUsage(assistant(words(6000)), 6600, 6000)
	m.Usage.CacheCreationInputTokens, m.Usage.CacheCreation1hInputTokens = 6600, 6600
	m.Usage.InputTokens = 0
	h.append("s", user("Migrate the billing service to the new schema."), assistant(words(6500)), user("continue"), m)
	clk.set(clockStart.Add(CacheTTLDefault - time.Minute))
	if got := h.e.CompactIdle(context.Background()); len(got) != 0 {
		t.Fatalf("at 4 min with a 1-hour cache: %+v, want nothing", got)
	}
	clk.set(clockStart.Add(CacheTTLLong - time.Minute))
	if got := h.e.CompactIdle(context.Background()); len(got) != 1 {
		t.Fatalf("at 59 min with a 1-hour cache: %+v, want one", got)
	}
}

// A small context is not worth compacting: the rewrite it spares is less
// than what the compaction leaves.
func TestIdleCompactionSkipsASmallContext(t *testing.T) {
	h, clk := idleHarness(t, testConfig())
	h.create("s", 20000)
	h.append("s", user("hi"), withUsage(assistant("hello"), 30, 5))
	clk.set(clockStart.Add(CacheTTLDefault - time.Minute))
	if got := h.e.CompactIdle(context.Background()); len(got) != 0 {
		t.Fatalf("%+v, want nothing for a small context", got)
	}
}

// idle = "auto" is off for a session whose summarizer the client's
// credential pays; "on" turns it on; "off" turns it off everywhere.
func TestIdleCompactionAutoIsOffWhenTheClientPays(t *testing.T) {
	for _, tc := range []struct {
		idle       string
		clientPays bool
		want       bool
	}{
		{config.IdleAuto, true, false},
		{config.IdleAuto, false, true},
		{config.IdleOn, true, true},
		{config.IdleOff, false, false},
	} {
		cfg := testConfig()
		cfg.ContextCompaction.Idle = tc.idle
		h, clk := idleHarness(t, cfg)
		if tc.clientPays {
			h.e.SetSessionBindings(func(string, map[string]string) ([]config.Binding, bool, error) {
				// Extractive, so that only the gate differs (a priced
				// call would not pay back at this size).
				return []config.Binding{{Name: "client", Provider: config.ProviderExtractive, Credential: &config.Credential{}}}, true, nil
			})
		}
		h.create("s", 20000)
		h.toPrepareMark("s")
		clk.set(clockStart.Add(CacheTTLDefault - time.Minute))
		s, err := h.e.lock(context.Background(), "s")
		if err != nil {
			t.Fatal(err)
		}
		ic, _, due := h.e.idleDue(s, clk.Now())
		s.mu.Unlock()
		if due != tc.want {
			t.Errorf("idle %q, client pays %v: due %v (%+v), want %v", tc.idle, tc.clientPays, due, ic, tc.want)
		}
		h.Close()
	}
}

// A paid summarizer's call counts against the payback: reading the
// history from the cache (0.1×) and writing the summary as output (5× the
// input price at claude-sonnet-4-5's prices). At 12,600 tokens it costs
// more than the cache write it spares, so the session is not compacted.
func TestIdlePaybackCountsAPaidSummarizer(t *testing.T) {
	fake := newFakeAnthropic(t, okSummary(specSummary()))
	h, clk := idleHarness(t, specConfig(fake))
	h.create("s", 20000)
	h.toPrepareMark("s")
	clk.set(clockStart.Add(CacheTTLDefault - time.Minute))
	s, err := h.e.lock(context.Background(), "s")
	if err != nil {
		t.Fatal(err)
	}
	tokens, _ := s.estimate()
	_, plan, due := h.e.idleDue(s, clk.Now())
	s.mu.Unlock()
	if min := float64(tokens)*0.1 + 5*float64(config.DefaultExtractiveSummaryBytes/4); due || plan.summarizerTokens < min {
		t.Fatalf("due %v, summarizer cost %v tokens for a context of %d; want not due, at least %v", due, plan.summarizerTokens, tokens, min)
	}
	if got := h.e.CompactIdle(context.Background()); len(got) != 0 || fake.count() != 0 {
		t.Fatalf("queued %+v, %d summarizer calls; want none", got, fake.count())
	}
}
