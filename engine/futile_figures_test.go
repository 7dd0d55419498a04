package engine

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/api"
)

// TestFutileFiguresConsistent (proxy finding 5): when the provider reports
// fewer tokens for the whole context than ctxd estimates for its fixed
// prefix alone (a 30k-word system prompt, the provider counting 21,000),
// the futility and over-window diagnostics give figures that agree — the
// fixed prefix is never larger than the context it is part of — and say
// which figure is the provider's reported usage and which ctxd's estimate.
func TestFutileFiguresConsistent(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	ctx := context.Background()
	if _, err := h.e.CreateSession(ctx, CreateParams{ID: "s", Model: "test-model", ContextLimit: 20000, System: words(30000)}); err != nil {
		t.Fatal(err)
	}
	h.append("s", user("hi"), withUsage(assistant("ok"), 21000, 10), user("next"))
	a, err := h.e.Context(ctx, "s", ContextOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d := a.Diagnostic
	if a.DiagnosticCode != api.DiagFutile {
		t.Errorf("diagnostic code %q, want %q (futility is not a failed compaction)", a.DiagnosticCode, api.DiagFutile)
	}
	fixedRe := regexp.MustCompile(`fixed prefix (\d+) tokens`)
	ctxRe := regexp.MustCompile(`the assembled context \((\d+) tokens`)
	fm, cm := fixedRe.FindStringSubmatch(d), ctxRe.FindStringSubmatch(d)
	if fm == nil || cm == nil {
		t.Fatalf("diagnostic %q: want the futility and the over-window figures", d)
	}
	fixed, _ := strconv.Atoi(fm[1])
	whole, _ := strconv.Atoi(cm[1])
	if fixed > whole || uint64(whole) != a.Tokens {
		t.Errorf("fixed prefix %d tokens, assembled context %d (Tokens %d): the prefix is part of the context\n%s", fixed, whole, a.Tokens, d)
	}
	for _, want := range []string{"21010 reported by the provider for its last answer", "ctxd's own estimate of the prefix"} {
		if !strings.Contains(d, want) {
			t.Errorf("diagnostic lacks %q:\n%s", want, d)
		}
	}
	if strings.Contains(d, "tokens, estimated)") {
		t.Errorf("the figure's source is not said:\n%s", d)
	}
}
