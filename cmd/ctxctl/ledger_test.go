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
