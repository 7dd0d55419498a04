package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/api"
)

// The text ledger marks a request whose answer broke off: the provider
// bills what it reported, and the row says why it is short.
func TestLedgerMarksACutAnswer(t *testing.T) {
	l := &api.LedgerResponse{Entries: []api.LedgerEntry{
		{Kind: "request", Mode: "enforce", ClientTokens: 100, SentTokens: 100},
		{Kind: "request", Mode: "enforce", ClientTokens: 120, SentTokens: 120, Cut: true},
	}}
	var b bytes.Buffer
	writeLedger(&b, l)
	lines := strings.Split(b.String(), "\n")
	if !strings.Contains(lines[2], "request (cut)") || strings.Contains(lines[1], "cut") {
		t.Fatalf("ledger:\n%s", b.String())
	}
}

// A request the cache model could not price (Cold) is explained by both
// of its causes: a restart, or a new branch's first request (a client's
// rewind starts a branch with no restart).
func TestLedgerExplainsAColdRequest(t *testing.T) {
	l := &api.LedgerResponse{
		Entries: []api.LedgerEntry{{Kind: "request", Mode: "enforce", ClientTokens: 100, SentTokens: 100}},
		Totals:  api.LedgerTotals{Requests: 1, Cold: 1},
	}
	var b bytes.Buffer
	writeLedger(&b, l)
	if !strings.Contains(b.String(), "1 request read the provider's cache") || !strings.Contains(b.String(), "a new branch's first") {
		t.Fatalf("ledger:\n%s", b.String())
	}
}
