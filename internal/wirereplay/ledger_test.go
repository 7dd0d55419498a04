package wirereplay

import (
	"bytes"
	"math"
	"path"
	"testing"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/ledger"
)

// ledgerSum adds up a run's ledger entries: the reported usage of the
// requests and of the summarizer calls, and the enforce and observe totals.
func ledgerSum(res Result) (reqs, sums ledger.Usage, nReqs, nSums int, tot ledger.Totals) {
	for _, entries := range res.Ledgers {
		for _, e := range entries {
			switch e.Kind {
			case ledger.KindRequest:
				reqs = reqs.Add(e.Reported)
				nReqs++
			case ledger.KindSummarizer:
				sums = sums.Add(e.Reported)
				nSums++
			}
		}
		tot.Merge(ledger.Sum(entries))
	}
	return
}

func within(got, want, share float64) bool {
	if want == 0 {
		return got == 0
	}
	return math.Abs(got-want) <= share*math.Abs(want)
}

// TestLedgerMatchesTheUpstreamsRecount replays the corpus through the proxy
// and holds the ledger to an independent recount of what the cache-modelling
// upstream billed: requests and summarizer calls, input, cache-read and
// cache-write tokens each within 1 %, and the cost at the cache prices
// (Usage.Cost, in input-token units: the Claude models' write, read and
// output prices are 1.25, 0.1 and 5 times their input price) within 1 %.
// The corpus at its models' windows makes no summarizer call (passes and
// offloads keep it under the threshold), so one more run gives the first
// session a 60,000-token window: its compactions' summarizer calls, on the
// client's credential through the same upstream, are counted too; and once
// more with the daemon's own summarizer binding (proxy.summarizer =
// "bindings"), its calls on the daemon's key.
func TestLedgerMatchesTheUpstreamsRecount(t *testing.T) {
	for _, src := range Sources {
		t.Run(path.Base(src.File), func(t *testing.T) {
			recount(t, Load(t, src, maxTurns()), config.Defaults(), "")
		})
	}
	t.Run("summarizer-calls", func(t *testing.T) {
		s := Load(t, Sources[0], maxTurns())
		cfg := config.Defaults()
		m := cfg.Models[s.Model]
		m.ContextLimit = 60000
		cfg.Models[s.Model] = m
		recount(t, s, cfg, ledger.CredentialClient)
	})
	// The same with proxy.summarizer = "bindings": the summarizer calls are
	// the daemon's, on its configured key.
	t.Run("summarizer-calls-daemon-key", func(t *testing.T) {
		s := Load(t, Sources[0], maxTurns())
		cfg := config.Defaults()
		m := cfg.Models[s.Model]
		m.ContextLimit = 60000
		cfg.Models[s.Model] = m
		t.Setenv("CTXD_REPLAY_SUMMARIZER_KEY", "sk-ant-daemon-0123456789abcdef")
		cfg.Proxy.Summarizer = config.ProxySummarizerBindings
		cfg.Summarizer.Bindings = []config.Binding{{Name: "daemon", Provider: config.ProviderAnthropic, Model: s.Model, APIKeyEnv: "CTXD_REPLAY_SUMMARIZER_KEY"}}
		recount(t, s, cfg, ledger.CredentialDaemon)
	})
}

// recount replays s through the proxy with cfg and compares the ledger
// with what the upstream billed; cred, when set: the run must make
// summarizer calls, all on that credential (ledger.Credential*).
func recount(t *testing.T, s *Session, cfg config.Config, cred string) {
	t.Helper()
	via := Through(t, s, cfg)
	reqs, sums, nReqs, nSums, tot := ledgerSum(via)
	up := via.Usage
	if nReqs != via.Managed || nSums != up.Summaries || up.Requests != via.Turns+up.Summaries {
		t.Fatalf("ledger: %d requests, %d summarizer calls; upstream: %d requests of which %d summaries; %d managed", nReqs, nSums, up.Requests, up.Summaries, via.Managed)
	}
	if cred != "" && (nSums == 0 || sums.Output == 0 || tot.SummarizerByCredential[cred] <= 0 || len(tot.SummarizerByCredential) != 1) {
		t.Fatalf("want summarizer calls on the %s credential only in the ledger: %d calls, output %d, by credential %v", cred, nSums, sums.Output, tot.SummarizerByCredential)
	}
	if via.Managed != via.Turns {
		t.Skipf("%d of %d requests managed: the recount needs every request through ctxd", via.Managed, via.Turns)
	}
	all := reqs.Add(sums)
	for _, c := range []struct {
		name      string
		got, want uint64
	}{{"input", all.Input, up.Input}, {"cache read", all.CacheRead, up.CacheRead}, {"cache write", all.CacheWrite(), up.CacheWrite},
		{"summarizer output", sums.Output, up.Output}} {
		if !within(float64(c.got), float64(c.want), 0.01) {
			t.Errorf("%s tokens: ledger %d, upstream %d", c.name, c.got, c.want)
		}
	}
	// The ledger's cost in the model's input-token units; the upstream
	// bills output for summaries only.
	p, ok := ledger.PriceOf(cfg, s.Model)
	if !ok || p.Input == 0 {
		t.Skipf("model %s has no price", s.Model)
	}
	units := (tot.Paid+tot.Summarizer)*1e6/p.Input - 5*float64(reqs.Output)
	if !within(units, up.Cost(), 0.01) {
		t.Errorf("cost: ledger %.0f, upstream %.0f (input-token units)", units, up.Cost())
	}
	t.Logf("%d requests, %d summaries: ledger %.0f, upstream %.0f; without ctxd $%.4f, paid $%.4f, summarizer $%.4f, saved %.1f %%",
		nReqs, nSums, units, up.Cost(), tot.WithoutCtxd, tot.Paid, tot.Summarizer, 100*tot.SavedShare)
}

// TestObserveProjectionEqualsEnforcedSavings replays each corpus session
// twice through the proxy: in observe mode, where every request must reach
// the upstream byte-identical to the client's (each body compared), and in
// enforce mode. What
// observe mode projects ctxd would pay (its requests on the cache model,
// and its summarizer calls) must be what enforce mode then pays, within
// 2 % of what the client paid without ctxd.
func TestObserveProjectionEqualsEnforcedSavings(t *testing.T) {
	for _, src := range Sources {
		t.Run(path.Base(src.File), func(t *testing.T) {
			s := Load(t, src, maxTurns())
			direct := Direct(t, s)
			cfg := config.Defaults()
			cfg.Proxy.Mode = config.ProxyModeObserve
			obs := Through(t, s, cfg)
			if len(obs.Bodies) != len(s.Turns) {
				t.Fatalf("observe mode: the upstream received %d agent requests for %d sent", len(obs.Bodies), len(s.Turns))
			}
			for i, turn := range s.Turns {
				if !bytes.Equal(obs.Bodies[i], turn.Body) {
					t.Fatalf("observe mode: request %d reached the upstream changed (%d bytes sent, %d received)", i, len(turn.Body), len(obs.Bodies[i]))
				}
			}
			if obs.Usage.Requests-obs.Usage.Summaries != direct.Usage.Requests || !within(obs.Usage.Cost()-5*float64(obs.Usage.Output), direct.Usage.Cost(), 0) {
				t.Fatalf("observe mode changed what the upstream billed: %+v vs direct %+v", obs.Usage, direct.Usage)
			}
			enf := Through(t, s, config.Defaults())
			if enf.Managed != enf.Turns || obs.Managed != obs.Turns {
				t.Skipf("managed: observe %d, enforce %d of %d", obs.Managed, enf.Managed, enf.Turns)
			}
			_, _, _, _, ot := ledgerSum(obs)
			_, _, _, _, et := ledgerSum(enf)
			projected := ot.Projected + ot.ObserveSummarizer
			paid := et.Paid + et.Summarizer
			if !within(projected, paid, 0) && math.Abs(projected-paid) > 0.02*ot.Observed {
				t.Errorf("observe projected $%.4f (requests $%.4f + summarizer $%.4f), enforce paid $%.4f (requests $%.4f + summarizer $%.4f); without ctxd $%.4f",
					projected, ot.Projected, ot.ObserveSummarizer, paid, et.Paid, et.Summarizer, ot.Observed)
			}
			t.Logf("without ctxd $%.4f; observe projected saving $%.4f (%.1f %%), enforce saved $%.4f (%.1f %%)",
				ot.Observed, ot.ProjectedSaved, 100*ot.ProjectedShare, et.Saved, 100*et.SavedShare)
		})
	}
}
