package engine

import (
	"context"
	"errors"
	"testing"
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
