package server

import (
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

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
