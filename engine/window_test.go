package engine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/trigger"
)

// loadConfig is the configuration of the TOML src over the defaults, as a
// daemon loads it from a file.
func loadConfig(t *testing.T, src string) config.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ctxd.toml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := config.Load(config.Options{Files: []string{path}})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Offload.Enabled = false
	cfg.ContextEditing.Enabled = false
	return cfg
}

// TestWindowSources: the window a session gets and where it came from —
// the wire's 1M beta over the catalog, never over an operator's entry; a
// model nothing knows is managed with an unknown window when proxied and
// refused on the daemon API without a limit; the session's own limit wins.
func TestWindowSources(t *testing.T) {
	ctx := context.Background()
	cfg := loadConfig(t, "[models.\"claude-sonnet-4-6\"]\ncontext_limit = 30000\n")
	h := newHarness(t, cfg, t.TempDir())
	defer h.Close()
	cases := []struct {
		p      CreateParams
		limit  uint64
		source string
	}{
		{CreateParams{ID: "wire", Model: "claude-opus-4-8", WireContextLimit: ContextLimit1M, Provider: ProviderAnthropic}, ContextLimit1M, WindowWire},
		{CreateParams{ID: "catalog", Model: "claude-opus-4-8-20260101", Provider: ProviderAnthropic}, 200000, WindowCatalog},
		{CreateParams{ID: "config", Model: "claude-sonnet-4-6", WireContextLimit: ContextLimit1M, Provider: ProviderAnthropic}, 30000, WindowConfig},
		{CreateParams{ID: "own", Model: "claude-opus-4-8", ContextLimit: 50000, WireContextLimit: ContextLimit1M}, 50000, WindowSession},
		{CreateParams{ID: "unknown", Model: "gpt-9-mystery", Provider: ProviderOpenAI}, 0, WindowUnknown},
		{CreateParams{ID: "unknown-1m", Model: "claude-mystery", WireContextLimit: ContextLimit1M, Provider: ProviderAnthropic}, ContextLimit1M, WindowWire},
		{CreateParams{ID: "codex", Model: "gpt-6.2-sol", Provider: ProviderOpenAI}, 500000, WindowCatalog},
	}
	for _, tc := range cases {
		in, err := h.e.CreateSession(ctx, tc.p)
		if err != nil {
			t.Fatalf("%s: %v", tc.p.ID, err)
		}
		if in.ContextLimit != tc.limit || in.WindowSource != tc.source {
			t.Errorf("%s: window %d (%s), want %d (%s)", tc.p.ID, in.ContextLimit, in.WindowSource, tc.limit, tc.source)
		}
	}
	in, _ := h.e.Session(ctx, "config")
	if in.Shape != "simple" {
		t.Errorf("a partial entry lost the catalog's thinking binding: shape %q", in.Shape)
	}
	in, _ = h.e.Session(ctx, "unknown")
	if in.Threshold != 0 {
		t.Errorf("unknown window: threshold %d, want 0", in.Threshold)
	}
	// The unknown session takes messages and assembles a context.
	h.append("unknown", user("hello"))
	if a := h.context("unknown"); len(a.Messages) != 1 || a.WindowSource != WindowUnknown {
		t.Errorf("unknown window: context %+v", a)
	}
	// Its pre-send check shows no placeholder threshold and says what it
	// waits for.
	if _, err := h.e.Context(ctx, "unknown", ContextOptions{}); err != nil {
		t.Fatal(err)
	}
	if in, _ := h.e.Session(ctx, "unknown"); in.LastCheck == nil || in.LastCheck.Threshold != 0 || !strings.Contains(in.LastCheck.Reason, "the window is unknown") {
		t.Errorf("unknown window: last check %+v", in.LastCheck)
	}
	if got := h.e.WindowSources(); got[WindowWire] != 2 || got[WindowCatalog] != 2 || got[WindowConfig] != 1 || got[WindowSession] != 1 || got[WindowUnknown] != 1 {
		t.Errorf("window sources for status: %v", got)
	}
	if _, err := h.e.CreateSession(ctx, CreateParams{ID: "api", Model: "gpt-9-mystery"}); err == nil || !strings.Contains(err.Error(), "context_limit") {
		t.Errorf("daemon API, unknown model, no limit: %v", err)
	}
}

// TestSessionKeepsItsSettingsAcrossConfigs: a session stores its model
// settings and window when it is created; a restart with another
// configuration — its model's entry removed, or changed — serves it with
// them, and Info.SettingsDiff says what differs (doctor shows it).
func TestSessionKeepsItsSettingsAcrossConfigs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	h := newHarness(t, loadConfig(t, "[models.\"local-7b\"]\ncontext_limit = 50000\nthinking_binding = true\n[models.\"claude-opus-4-8\"]\ncontext_limit = 40000\n"), dir)
	for _, id := range []string{"a", "b", "c"} {
		model := map[string]string{"a": "local-7b", "b": "claude-opus-4-8", "c": "never-configured-1"}[id]
		var limit uint64
		if id == "c" {
			limit = 30000 // the session's own window, as a proxied client's header gives it
		}
		if _, err := h.e.CreateSession(ctx, CreateParams{ID: id, Model: model, Provider: ProviderAnthropic, ContextLimit: limit}); err != nil {
			t.Fatal(err)
		}
		h.append(id, user("the first task"), assistant("done"))
	}
	h.Close()

	// Restart: local-7b is gone, claude-opus-4-8 back to the catalog's.
	h = newHarness(t, testConfig(), dir)
	defer h.Close()
	a, err := h.e.Session(ctx, "a")
	if err != nil {
		t.Fatalf("a session whose model left the configuration is unreadable: %v", err)
	}
	if a.ContextLimit != 50000 || a.WindowSource != WindowConfig || a.Shape != "simple" {
		t.Errorf("a: window %d (%s), shape %s; want its stored 50000 (config), simple", a.ContextLimit, a.WindowSource, a.Shape)
	}
	if len(a.SettingsDiff) != 1 || !strings.Contains(a.SettingsDiff[0], "no entry for model \"local-7b\"") {
		t.Errorf("a: diff %q", a.SettingsDiff)
	}
	if ctxA := h.context("a"); len(ctxA.Messages) != 2 {
		t.Errorf("a: %d messages served", len(ctxA.Messages))
	}
	b, err := h.e.Session(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if b.ContextLimit != 40000 || len(b.SettingsDiff) != 1 || !strings.Contains(b.SettingsDiff[0], "context_limit: the session's 40000 tokens (config), the current configuration's 200000 tokens (catalog)") {
		t.Errorf("b: window %d, diff %q", b.ContextLimit, b.SettingsDiff)
	}
	// A model no configuration ever had an entry for: nothing differs.
	if c, err := h.e.Session(ctx, "c"); err != nil || c.ContextLimit != 30000 || len(c.SettingsDiff) != 0 {
		t.Errorf("c, a model never configured: window %d, diff %q, %v; want its own 30000 and no difference", c.ContextLimit, c.SettingsDiff, err)
	}
	// A PATCH of the model stores the new model's settings.
	m := "claude-sonnet-4-6"
	if in, err := h.e.UpdateSession(ctx, "b", Patch{Model: &m}); err != nil || in.ContextLimit != 200000 || len(in.SettingsDiff) != 0 {
		t.Errorf("patched model: %+v, %v", in, err)
	}
}

// Session shows when a session prepares its summary and whether idle
// compaction is on: the derived mark for a known window with the
// extractive summarizer (not the client's key), nothing for an unknown
// window, nothing when prepare_percent is off.
func TestSessionShowsPrepareMarkAndIdle(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		percent uint64
		limit   uint64
		mark    uint64
		idle    bool
	}{
		{"derived", 0, 200000, 120000, true},
		{"off", config.PrepareOff, 200000, 0, true},
	} {
		cfg := testConfig()
		cfg.ContextCompaction.PreparePercent = tc.percent
		h := newHarness(t, cfg, t.TempDir())
		if _, err := h.e.CreateSession(ctx, CreateParams{ID: "s", Model: "test-model", ContextLimit: tc.limit}); err != nil {
			t.Fatal(err)
		}
		in, err := h.e.Session(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		if in.PrepareMark != tc.mark || in.IdleCompaction != tc.idle {
			t.Errorf("%s: prepare mark %d, idle %v; want %d, %v (threshold %d)", tc.name, in.PrepareMark, in.IdleCompaction, tc.mark, tc.idle, in.Threshold)
		}
	}
}

// A first request's estimate before its session exists is its bytes at
// the given rate, and the threshold that of a session created now.
func TestColdEstimate(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	est, threshold, err := h.e.ColdEstimate(CreateParams{Model: "test-model", ContextLimit: 20000}, 30000, 3)
	if err != nil || est != 10000 || threshold != trigger.Threshold(20000, h.e.Config().ContextCompaction.Trigger) {
		t.Fatalf("estimate %d, threshold %d, %v", est, threshold, err)
	}
	if _, _, err := h.e.ColdEstimate(CreateParams{Model: "test-model", ContextLimit: 10}, 30000, 3); err == nil {
		t.Fatal("a window under the minimum is not refused")
	}
}
