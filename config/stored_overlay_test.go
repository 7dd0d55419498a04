package config

import (
	"slices"
	"testing"
)

// TestApplyStoredOverlayMissingBinding (docs/decisions.md "A session whose
// binding was removed"): an
// overlay stored with a session names a binding a reload removed. Applied
// as stored, its other keys still apply, compaction.binding is cleared,
// the daemon's bindings are untouched and the missing name is returned;
// applied as new (ApplyOverlay) it is still refused; any other problem is
// still an error.
func TestApplyStoredOverlayMissingBinding(t *testing.T) {
	base := overlayBaseConfig(t)
	overlay := []byte("[compaction]\nbinding = \"cheap\"\nfallback = \"none\"\n[offload]\nmax_chars = 12345\n")
	cfg, missing, _, err := ApplyStoredOverlay(base, overlay, OverlayName)
	if err != nil || missing != "" || cfg.Compaction.Binding != "cheap" {
		t.Fatalf("binding present: missing %q, binding %q, %v", missing, cfg.Compaction.Binding, err)
	}

	reloaded := base
	reloaded.Summarizer.Bindings = slices.DeleteFunc(slices.Clone(base.Summarizer.Bindings), func(b Binding) bool { return b.Name == "cheap" })
	if _, _, err := ApplyOverlay(reloaded, overlay, OverlayName); err == nil {
		t.Fatal("ApplyOverlay accepted a binding the daemon does not define")
	}
	cfg, missing, _, err = ApplyStoredOverlay(reloaded, overlay, OverlayName)
	if err != nil {
		t.Fatalf("stored overlay refused: %v", err)
	}
	if missing != "cheap" || cfg.Compaction.Binding != "" {
		t.Errorf("missing %q, compaction.binding %q; want \"cheap\", \"\"", missing, cfg.Compaction.Binding)
	}
	if cfg.Offload.MaxChars != 12345 || cfg.Compaction.Fallback != FallbackNone {
		t.Errorf("the overlay's other keys were lost: max_chars %d, fallback %q", cfg.Offload.MaxChars, cfg.Compaction.Fallback)
	}
	if !slices.Equal(bindingNames(cfg.Summarizer.Bindings), []string{"primary", "local"}) {
		t.Errorf("bindings %v, want the daemon's [primary local]", bindingNames(cfg.Summarizer.Bindings))
	}

	// Any other problem is still an error.
	for _, bad := range []string{
		"[compaction]\nbinding = \"cheap\"\n[offload]\nmax_chars = \"many\"\n",
		"[compaction]\nbinding = \"cheap\"\nagent_file = \"/etc/shadow\"\n",
	} {
		if _, _, _, err := ApplyStoredOverlay(reloaded, []byte(bad), OverlayName); err == nil {
			t.Errorf("ApplyStoredOverlay accepted %q", bad)
		}
	}
}

func bindingNames(bs []Binding) []string {
	var out []string
	for _, b := range bs {
		out = append(out, b.Name)
	}
	return out
}
