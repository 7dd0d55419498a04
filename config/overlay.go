package config

import (
	"errors"
	"slices"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// OverlayName labels a session's overlay in problems and Sources
// (`config: session overlay:3:1: summarizer.bindings: not allowed in a
// session overlay`).
const OverlayName = "session overlay"

// overlayKeys is the allow-list of docs/design.md §3 ("a session overlay
// carries policy, never capabilities"): the only keys a session's overlay
// may set, as dotted key paths where "*" stands for any model id. A key
// under an allowed key (context_compaction.trigger.percent) is allowed;
// a table above one (`[offload]`, `[models."gpt-4.1"]`) may be written as a
// header. Everything else — credentials, URLs, file and directory paths,
// listeners, storage, the worker pool, the bindings themselves — comes only
// from the daemon's own files.
//
// docs/config.md lists these keys in its overlay table; TestOverlayKeysDoc
// keeps the two equal.
var overlayKeys = []string{
	"context_compaction.auto",
	"context_compaction.trigger",
	"context_compaction.buffer_tokens",
	"context_compaction.max_summary_bytes",
	"context_compaction.keep_recent_tokens",
	"context_compaction.prepare_percent",
	"context_compaction.idle",
	"compaction.shape",
	"compaction.binding",
	"compaction.keep_first_request",
	"compaction.fallback",
	"compaction.extractive_summary_bytes",
	"offload.enabled",
	"offload.max_chars",
	"offload.keep_head",
	"offload.keep_tail",
	"offload.exclude",
	"context_editing.enabled",
	"context_editing.mode",
	"context_editing.keep_recent_turns",
	"context_editing.min_chars_to_elide",
	"context_editing.max_total_tool_result_chars",
	"context_editing.min_chars_per_pass",
	"context_editing.protect_tool_names",
	"context_editing.artifact_read_tools",
	"context_editing.clear_tool_inputs",
	"models.*.context_limit",
}

// OverlayKeys returns the keys a session overlay may set (docs/design.md §3), in
// table order, as dotted paths; `models."<id>".context_limit` stands for
// every model id. A key below one of them is allowed too.
func OverlayKeys() []string {
	out := make([]string, len(overlayKeys))
	for i, k := range overlayKeys {
		out[i] = strings.Replace(k, ".*.", `."<id>".`, 1)
	}
	return out
}

// overlayAllows classifies key segments segs of an overlay: allowed (an
// allowed key or below one), or a table on the way to one (a header such as
// [offload]), or refused.
func overlayAllows(segs []string) (allowed, above bool) {
	for _, k := range overlayKeys {
		pat := strings.Split(k, ".")
		n := min(len(pat), len(segs))
		match := true
		for i := 0; i < n; i++ {
			if pat[i] != "*" && pat[i] != segs[i] {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		if len(segs) >= len(pat) {
			return true, false
		}
		above = true
	}
	return false, above
}

// refuseInOverlay records a problem when the overlay being scanned sets
// segs, a key or table an overlay may not set, and reports whether it did.
func (d *doc) refuseInOverlay(segs []string, at pos) bool {
	if !d.overlay {
		return false
	}
	if ok, above := overlayAllows(segs); ok || above {
		return false
	}
	d.problem(at, keyPath(segs...), "not allowed in a session overlay")
	d.broken = true
	return true
}

// SummarizerBindings returns the bindings a compaction tries, in order
// (docs/design.md §3, §5.5): summarizer.bindings starting at the one
// compaction.binding names (the ones before it are skipped, the ones after
// it remain the fallback), or all of them when compaction.binding is "".
// nil means none is configured: the summarizer's default, the embedded
// extractive binding. Load and ApplyOverlay have checked that the name
// exists.
func (c Config) SummarizerBindings() []Binding {
	bs := c.Summarizer.Bindings
	if c.Compaction.Binding == "" {
		return bs
	}
	for i, b := range bs {
		if b.Name == c.Compaction.Binding {
			return bs[i:]
		}
	}
	return bs
}

// ApplyStoredOverlay is ApplyOverlay for an overlay a session was created
// with, read again later (a restart, a reload): the daemon's files may
// since have dropped the binding its compaction.binding names. That alone
// is not a problem of the overlay — the session must stay readable — so
// the overlay's other keys apply, the returned Config's
// compaction.binding is "" and missing is the name no binding has any
// more (the caller decides what a compaction does: docs/design.md §5.5). Every
// other problem is an error, as in ApplyOverlay.
func ApplyStoredOverlay(base Config, data []byte, name string) (cfg Config, missing string, warnings []Warning, err error) {
	cfg, warnings, err = ApplyOverlay(base, data, name)
	if err == nil {
		return cfg, "", warnings, nil
	}
	cerr, ok := errors.AsType[*Error](err)
	if !ok || len(cerr.Problems) == 0 {
		return Config{}, "", warnings, err
	}
	for _, p := range cerr.Problems {
		if p.Key != "compaction.binding" {
			return Config{}, "", warnings, err
		}
	}
	var named struct {
		Compaction struct {
			Binding string `toml:"binding"`
		} `toml:"compaction"`
	}
	if toml.Unmarshal(data, &named) != nil || named.Compaction.Binding == "" {
		return Config{}, "", warnings, err
	}
	missing = named.Compaction.Binding
	// Apply it again with a stand-in binding of that name, then put the
	// daemon's bindings back.
	stand := base
	stand.Summarizer.Bindings = append(slices.Clone(base.Summarizer.Bindings), Binding{Name: missing, Provider: ProviderExtractive})
	cfg, warnings, err = ApplyOverlay(stand, data, name)
	if err != nil {
		return Config{}, "", warnings, err
	}
	cfg.Summarizer = base.Summarizer
	cfg.Compaction.Binding = ""
	return cfg, missing, warnings, nil
}
