package server

import (
	"bytes"
	"context"
	"math"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/ledger"
)

// metricValue is the value of the counter name with labels in reg.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue next
				}
			}
			return counterOf(m)
		}
	}
	return 0
}

func counterOf(m *dto.Metric) float64 { return m.GetCounter().GetValue() }

// TestLedgerMetrics: the ledger's figures as counters — tokens saved,
// costs with and without ctxd, net saving split by sign, cache writes by
// cause, summarizer cost by credential, observe mode's projection apart.
func TestLedgerMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.Ledger(ledger.Entry{Kind: ledger.KindRequest, Mode: ledger.ModeEnforce, ClientTokens: 1000, SentTokens: 400,
		Cost: 0.3, CounterfactualCost: 1.0, Causes: map[string]uint64{ledger.CauseGrowth: 50, ledger.CauseCompaction: 300}})
	m.Ledger(ledger.Entry{Kind: ledger.KindRequest, Mode: ledger.ModeEnforce, ClientTokens: 500, SentTokens: 500, Cost: 0.6, CounterfactualCost: 0.5})
	m.Ledger(ledger.Entry{Kind: ledger.KindSummarizer, Mode: ledger.ModeEnforce, Credential: ledger.CredentialClient, Cost: 0.05})
	m.Ledger(ledger.Entry{Kind: ledger.KindRequest, Mode: ledger.ModeObserve, Cost: 2, CounterfactualCost: 1.5, Causes: map[string]uint64{ledger.CausePass: 9}})
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{MetricTokensSaved, nil, 600},
		{MetricCostWithout, nil, 1.5},
		{MetricCostPaid, map[string]string{"mode": "enforce"}, 0.9},
		{MetricCostPaid, map[string]string{"mode": "observe"}, 2},
		{MetricCostProjected, nil, 1.5},
		{MetricCostSaved, nil, 0.7},
		{MetricCostAdded, nil, 0.15},
		{MetricSummarizerCost, map[string]string{"credential": "client"}, 0.05},
		{MetricCacheWrites, map[string]string{"cause": "compaction"}, 300},
		{MetricCacheWrites, map[string]string{"cause": "growth"}, 50},
		{MetricCacheWrites, map[string]string{"cause": "pass"}, 0},
		{MetricLedgerRequests, map[string]string{"mode": "enforce"}, 2},
		{MetricLedgerRequests, map[string]string{"mode": "observe"}, 1},
	} {
		if got := metricValue(t, reg, c.name, c.labels); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

// TestLedgerAndModeOverHTTP: a ledger entry the engine records is in the
// session's ledger, the totals and the metrics the daemon serves (tokens
// and cost saved, cache writes by cause); PUT /v1/sessions/{id}/mode
// (ctxctl session mode) sets the session's own mode, a mode entry in its
// ledger, and "" (ctxctl's "default") clears it; a value that is not a
// mode is refused naming the field.
func TestLedgerAndModeOverHTTP(t *testing.T) {
	f := newFixture(t, nil)
	f.create(t, "s1")
	ctx := context.Background()
	en := ledger.Entry{Kind: ledger.KindRequest, Model: "claude-sonnet-4-5", Mode: ledger.ModeEnforce, ClientTokens: 100000, SentTokens: 40000,
		Reported: ledger.Usage{CacheRead: 30000, CacheWrite5m: 10000, Output: 100}, Counterfactual: ledger.Usage{CacheRead: 90000, CacheWrite5m: 10000, Output: 100},
		Causes: map[string]uint64{ledger.CauseGrowth: 2000, ledger.CauseCompaction: 8000}, Rewrites: []string{ledger.CauseCompaction}}
	if err := f.eng.RecordLedger(ctx, "s1", en); err != nil {
		t.Fatal(err)
	}
	l, err := f.client.Ledger(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	_, tot, err := f.eng.Ledger(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Entries) != 1 || l.Totals.Saved != tot.Saved || tot.Saved <= 0 || l.Totals.TokensSaved != 60000 || len(l.Waterfall) != len(tot.Waterfall()) {
		t.Fatalf("ledger over HTTP %+v; engine totals %+v", l, tot)
	}
	all, err := f.client.LedgerTotals(ctx)
	if err != nil || all.Sessions != 1 || math.Abs(all.Totals.Saved-tot.Saved) > 1e-6 {
		t.Fatalf("GET /v1/ledger: %+v %v, want saved %v", all, err, tot.Saved)
	}
	b, err := f.client.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		MetricTokensSaved + " 60000",
		MetricCostSaved + " " + strconv.FormatFloat(tot.Saved, 'g', -1, 64),
		MetricCacheWrites + `{cause="compaction"} 8000`,
		MetricCacheWrites + `{cause="growth"} 2000`,
	} {
		if !bytes.Contains(b, []byte(want+"\n")) {
			t.Errorf("metrics lack %q", want)
		}
	}

	for _, c := range []struct{ set, want string }{{api.ModeObserve, ledger.ModeObserve}, {api.ModeEnforce, ledger.ModeEnforce}, {"", ""}} {
		if err := f.client.SetMode(ctx, "s1", c.set); err != nil {
			t.Fatalf("mode %q: %v", c.set, err)
		}
		if got, _ := f.eng.Mode(ctx, "s1"); got != c.want {
			t.Fatalf("after PUT mode %q the session's mode is %q", c.set, got)
		}
		if l, err := f.client.Ledger(ctx, "s1"); err != nil || l.Mode != c.want {
			t.Fatalf("ledger after mode %q: %+v %v", c.set, l.Mode, err)
		}
	}
	entries, _, _ := f.eng.Ledger(ctx, "s1")
	var modes []string
	for _, e := range entries {
		if e.Kind == ledger.KindMode {
			modes = append(modes, e.Mode)
		}
	}
	if !slices.Equal(modes, []string{ledger.ModeObserve, ledger.ModeEnforce, ""}) {
		t.Fatalf("mode entries %q", modes)
	}
	f.wantRefused(t, http.MethodPut, "/v1/sessions/s1/mode", `{"mode":"shadow"}`, nil, http.StatusBadRequest, api.Invalid, "mode", []string{"shadow"}, "s1", f.lastSeq(t, "s1"))
}

// The API's ledger types carry every field of the ledger's, which the
// server passes on by their JSON (recode): a field the API lacks would be
// dropped from GET /v1/sessions/{id}/ledger without a word.
func TestAPILedgerTypesCarryEveryLedgerField(t *testing.T) {
	for _, c := range []struct {
		ledger, api any
	}{{ledger.Entry{}, api.LedgerEntry{}}, {ledger.Totals{}, api.LedgerTotals{}}, {ledger.Bar{}, api.LedgerBar{}}} {
		have := map[string]bool{}
		for _, f := range reflect.VisibleFields(reflect.TypeOf(c.api)) {
			have[strings.Split(f.Tag.Get("json"), ",")[0]] = true
		}
		for _, f := range reflect.VisibleFields(reflect.TypeOf(c.ledger)) {
			name := strings.Split(f.Tag.Get("json"), ",")[0]
			if name != "" && name != "-" && f.IsExported() && !have[name] {
				t.Errorf("%T has %q, %T does not: the ledger endpoint drops it", c.ledger, name, c.api)
			}
		}
	}
}
