package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/api"
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

// TestRefuseProxyOwned: a write to what a proxied session's client owns is
// one error, ErrProxyOwned (a conflict), answering 409 with the field of a
// PATCH and none for an append; a daemon-API session takes the write; a
// Patch of context_limit alone names no owned field.
func TestRefuseProxyOwned(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, testConfig(), t.TempDir())
	if _, err := h.e.CreateSession(ctx, CreateParams{ID: ProxyIDPrefix + "1", Model: "claude-sonnet-4-5", Labels: map[string]string{LabelProxy: "anthropic"}}); err != nil {
		t.Fatal(err)
	}
	h.create("s", 100000)
	sys, limit := "x", uint64(9000)
	for _, c := range []struct {
		patch Patch
		field string
	}{{Patch{System: &sys}, "system"}, {Patch{Model: &sys}, "model"}, {Patch{ContextLimit: &limit}, ""}, {Patch{ContextLimit: &limit, System: &sys}, "system"}} {
		if got := ProxyOwnedField(c.patch); got != c.field {
			t.Errorf("ProxyOwnedField(%+v) = %q, want %q", c.patch, got, c.field)
		}
	}
	for _, field := range []string{"messages", "system", "tools", "pinned", "model"} {
		err := h.e.RefuseProxyOwned(ctx, ProxyIDPrefix+"1", field)
		var pe *ProxyOwnedError
		if !errors.Is(err, ErrProxyOwned) || !errors.Is(err, ErrConflict) || !errors.As(err, &pe) || pe.API != "anthropic" {
			t.Fatalf("%s: err = %v, want a *ProxyOwnedError wrapping ErrProxyOwned", field, err)
		}
		ae, ok := api.AsAPIError(err)
		wantField := field
		if field == "messages" {
			wantField = ""
		}
		if !ok || ae.Code != api.Conflict || ae.Field != wantField || !strings.Contains(ae.Message, "is owned by the proxy (anthropic API)") || !strings.Contains(ae.Message, "nothing was stored") {
			t.Errorf("%s: answers %+v", field, ae)
		}
		if err := h.e.RefuseProxyOwned(ctx, "s", field); err != nil {
			t.Errorf("%s: a daemon-API session is refused: %v", field, err)
		}
	}
	if err := h.e.RefuseProxyOwned(ctx, "none", "messages"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a missing session: %v, want ErrNotFound", err)
	}
}

// TestReservedForProxy: the daemon API may not create a session with the
// proxy's label or under its id prefix (400 invalid naming the field);
// other proxy.* labels and other ids are free.
func TestReservedForProxy(t *testing.T) {
	for _, c := range []struct {
		id     string
		labels map[string]string
		field  string
	}{
		{"s", map[string]string{LabelProxy: "anthropic"}, "labels.proxy"},
		{ProxyIDPrefix + "abc", nil, "id"},
		{"s", map[string]string{"proxy.model": "m"}, ""},
		{"xp-1", nil, ""},
	} {
		err := ReservedForProxy(c.id, c.labels)
		if c.field == "" {
			if err != nil {
				t.Errorf("%q %v: %v", c.id, c.labels, err)
			}
			continue
		}
		ae, ok := api.AsAPIError(err)
		if !errors.Is(err, ErrReservedForProxy) || !errors.Is(err, ErrInvalid) || !ok || ae.Code != api.Invalid || ae.Field != c.field || !strings.HasPrefix(ae.Message, c.field+": ") || !strings.Contains(ae.Message, "reserved") {
			t.Errorf("%q %v: err %v, answers %+v", c.id, c.labels, err, ae)
		}
	}
}

// A proxied conversation's branches have distinct ids, each in the space
// reserved for the proxy, and the same key gives the same ids under the
// same secret only.
func TestProxySessionIDIsReserved(t *testing.T) {
	secret := []byte("secret")
	first, second := ProxySessionID(secret, "key", 0), ProxySessionID(secret, "key", 12)
	if len(first) != len(ProxyIDPrefix)+24 || second != first+"-b12" {
		t.Fatalf("ids %q and %q: want the prefix and 24 hex digits, then -b12", first, second)
	}
	for _, id := range []string{first, second} {
		if !errors.Is(ReservedForProxy(id, nil), ErrReservedForProxy) {
			t.Errorf("%q is not reserved for the proxy", id)
		}
	}
	if ProxySessionID(secret, "key", 0) != first || ProxySessionID([]byte("other"), "key", 0) == first || ProxySessionID(secret, "other", 0) == first {
		t.Fatal("the id does not follow the secret and the key alone")
	}
}

// The proxied sessions are found by their label: those naming a
// credential seed the proxy's quotas, and an expiry lists those idle
// since before its cut (which of them stay is quota.Expirable's test).
func TestProxiedSessionsListedForQuotasAndExpiry(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	ctx := context.Background()
	for id, labels := range map[string]map[string]string{
		"p-parent": {LabelProxy: "anthropic", LabelCredential: "c1"},
		"p-fork":   {LabelProxy: "anthropic", LabelCredential: "c1", LabelInherits: "p-parent"},
		"own":      {"proxy.model": "m"},
	} {
		if _, err := h.e.CreateSession(ctx, CreateParams{ID: id, Model: "test-model", ContextLimit: 20000, Labels: labels}); err != nil {
			t.Fatal(err)
		}
	}
	stored, err := h.e.ProxiedQuotas(ctx)
	if err != nil || len(stored) != 2 || stored[0].Credential != "c1" || stored[1].Credential != "c1" {
		t.Fatalf("quotas: %v %+v", err, stored)
	}
	ids, err := h.e.ExpirableProxied(ctx, time.Now().Add(time.Hour))
	if err != nil || !slices.Equal(ids, []string{"p-fork", "p-parent"}) && !slices.Equal(ids, []string{"p-parent", "p-fork"}) {
		t.Fatalf("all idle: %v %v", err, ids)
	}
	if ids, err = h.e.ExpirableProxied(ctx, time.Now().Add(-time.Hour)); err != nil || len(ids) != 0 {
		t.Fatalf("none idle: %v %v", err, ids)
	}
}
