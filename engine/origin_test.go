package engine

import (
	"context"
	"errors"
	"testing"

	"github.com/ctxd/ctxd/history"
)

// TestProxyAPISaysWhoOwnsASession: a session created with the proxy's
// label is the proxy's, across a restart (the label is stored with the
// session); one without is the daemon API's; a missing one is
// ErrNotFound, a bad id ErrInvalid.
func TestProxyAPISaysWhoOwnsASession(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	h := newHarness(t, testConfig(), dir)
	if _, err := h.e.CreateSession(ctx, CreateParams{ID: "p-1", Model: "claude-sonnet-4-5", Labels: map[string]string{LabelProxy: "responses", "team": "x"}}); err != nil {
		t.Fatal(err)
	}
	h.create("s", 100000)
	check := func(e *Engine, when string) {
		t.Helper()
		if api, err := e.ProxyAPI(ctx, "p-1"); err != nil || api != "responses" {
			t.Errorf("%s: ProxyAPI(p-1) = %q, %v; want responses", when, api, err)
		}
		if api, err := e.ProxyAPI(ctx, "s"); err != nil || api != "" {
			t.Errorf("%s: ProxyAPI(s) = %q, %v; want \"\"", when, api, err)
		}
		if _, err := e.ProxyAPI(ctx, "none"); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: ProxyAPI(none) err %v, want ErrNotFound", when, err)
		}
		if _, err := e.ProxyAPI(ctx, "a/b"); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: ProxyAPI(a/b) err %v, want ErrInvalid", when, err)
		}
	}
	check(h.e, "loaded")
	h.Close()
	check(newHarness(t, testConfig(), dir).e, "after a restart")
}

// BenchmarkProxyAPIBesideAppend measures the owner check the daemon API
// makes before each append (ProxyAPI) beside the baseline, one append of a
// user prompt and an answer to the same session, in the same run: the
// check must cost a small fraction of the append it guards.
func BenchmarkProxyAPIBesideAppend(b *testing.B) {
	cfg := testConfig()
	cfg.ContextCompaction.Auto = false
	h := newHarness(&testing.T{}, cfg, b.TempDir())
	defer h.Close()
	h.create("s", 100000000)
	ctx := context.Background()
	msgs := []history.Message{user("next step"), assistant("ok")}
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := h.e.Append(ctx, "s", msgs); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("proxy_api", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if api, err := h.e.ProxyAPI(ctx, "s"); err != nil || api != "" {
				b.Fatal(api, err)
			}
		}
	})
}
