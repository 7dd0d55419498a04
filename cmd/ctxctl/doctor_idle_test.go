package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/api"
)

// doctor shows a session's speculative summaries by outcome and each idle
// compaction with its expected payback, from the session's ledger.
func TestDoctorShowsSpeculativeAndIdleCompactions(t *testing.T) {
	rep := doctorReport{Session: &doctorSessionReport{ID: "s1", Session: &api.Session{ID: "s1", Model: "claude-sonnet-4-5"}}}
	at := time.Date(2026, 12, 2, 10, 4, 0, 0, time.UTC)
	rep.Session.addLedger(&api.LedgerResponse{
		Entries: []api.LedgerEntry{
			{Kind: api.LedgerKindPrepared, Outcome: "ready"},
			{Kind: api.LedgerKindIdle, Time: at, TokensBefore: 120000, TokensAfter: 20000, CacheTTLSeconds: 300, PaybackTokens: 125000, Payback: 0.375},
		},
		Totals: api.LedgerTotals{PreparedMade: 3, PreparedUsed: 1, PreparedExtended: 1, PreparedUnused: 1, PreparedUnusedCost: 0.0123},
	})
	var b bytes.Buffer
	writeDoctor(&b, &rep)
	for _, w := range []string{
		"speculative:     3 summaries prepared: 1 used, 1 extended, 1 never used ($0.0123)",
		"idle compaction: 2026-12-02T10:04:00Z: 120000 → 20000 tokens before a 5m0s cache lapsed; expected payback 125000 input tokens ($0.3750)",
	} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("doctor lacks %q:\n%s", w, b.String())
		}
	}
	if rep.Session.Speculative == nil || len(rep.Session.IdleCompactions) != 1 {
		t.Fatalf("report %+v, want the speculative counts and one idle compaction (JSON)", rep.Session)
	}
}
