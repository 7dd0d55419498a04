package engine

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/history"
)

// A long system prompt or tool set is counted once by its content: a
// second session with the same ones gets the same figure without
// counting, and a session whose prompt differs in one word gets its own
// count, never the first's. The kept counts stay bounded.
func TestFixedTokensKeptByContent(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, testConfig(), "")
	est := history.Estimator{}
	system := strings.Repeat("You are a careful coding agent; read before you write. ", 60)
	other := strings.Replace(system, "careful", "reckless and hurried", 1)
	tools := []history.ToolDef{{Name: "Bash", Description: strings.Repeat("Runs a shell command and returns its output. ", 40),
		InputSchema: []byte(`{"type":"object","properties":{"command":{"type":"string"}}}`)}}
	fixed := func(id, sys string) uint64 {
		t.Helper()
		if _, err := h.e.CreateSession(ctx, CreateParams{ID: id, Model: "test-model", ContextLimit: 200000, System: sys, Tools: tools}); err != nil {
			t.Fatal(err)
		}
		s, err := h.e.lock(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		defer s.mu.Unlock()
		return s.fixedTokens
	}
	want := est.Text(system) + est.Tools(tools)
	if got := fixed("a", system); got != want {
		t.Fatalf("first session: %d fixed tokens, want %d", got, want)
	}
	if n := len(h.e.fixed.m); n != 2 {
		t.Fatalf("%d counts kept, want the prompt's and the tools'", n)
	}
	if got := fixed("b", system); got != want {
		t.Fatalf("same prompt: %d fixed tokens, want %d", got, want)
	}
	wantOther := est.Text(other) + est.Tools(tools)
	if wantOther == want {
		t.Fatal("the test's two prompts count the same")
	}
	if got := fixed("c", other); got != wantOther {
		t.Fatalf("other prompt: %d fixed tokens, want its own %d", got, wantOther)
	}

	var c fixedCounts
	for i := range 3 * fixedCountMax {
		text := fmt.Sprintf("%d %s", i, system)
		if n := c.count('s', text, func() uint64 { return uint64(i) }); n != uint64(i) {
			t.Fatalf("text %d counted %d", i, n)
		}
		if len(c.m) > fixedCountMax {
			t.Fatalf("%d counts kept, at most %d", len(c.m), fixedCountMax)
		}
	}
}
