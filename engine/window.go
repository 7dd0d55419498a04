package engine

import (
	"encoding/json"
	"fmt"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/trigger"
)

// window is a session's resolved model entry and context window.
type window struct {
	model config.Model
	// limit is the window in tokens; MaxContextLimit while unknown.
	limit  uint64
	source string
	// entryLimit and entrySource are the window the model's entry gave
	// (stored, configured, wire or catalog), before the session's own
	// context_limit and the learned window; 0 and WindowUnknown for none.
	entryLimit  uint64
	entrySource string
	// fieldSources are model's field sources (config.ModelSources, or the
	// stored ones).
	fieldSources config.ModelFieldSources
	// diff says what the session's stored settings differ in from the
	// current configuration's entry of its model.
	diff []string
}

// resolveWindow derives a session's model entry and window
// (docs/decisions.md "Model entries and context windows"), first found:
//
//   - the session's own context_limit (meta.ContextLimit);
//   - the settings stored with the session when it was created, whatever
//     the current configuration says (doctor shows the difference);
//   - the configuration's entry: an operator's context_limit, else the
//     window the first request implied (context-1m-*), else the catalog's;
//   - for a model nothing knows: the wire's window, else none yet
//     (WindowUnknown: managed, compacting at the provider's first
//     overflow, which names the window).
//
// A window the provider named in an overflow error that is smaller than
// the one found replaces it (WindowLearned). Errors: a window outside
// MinContextLimit..=MaxContextLimit.
//
// A window learned from the largest request the provider accepted
// (learnedWindow.Accepted) is a lower bound: accepted, the largest request
// accepted since in tokens, raises it, up to the window it replaced.
func resolveWindow(cfg config.Config, meta checkpoint.Meta, extra sessionExtra, accepted uint64) (window, error) {
	cur, known := cfg.Model(meta.Model)
	curSrc, _ := cfg.ModelSourcesOf(meta.Model)
	curWindow, curWindowSrc := uint64(0), WindowUnknown
	if known {
		curWindow, curWindowSrc = cur.ContextLimit, windowSourceOf(curSrc.ContextLimit)
		if curWindowSrc == WindowCatalog && extra.WireLimit > 0 {
			curWindow, curWindowSrc = extra.WireLimit, WindowWire
		}
	} else if extra.WireLimit > 0 {
		curWindow, curWindowSrc = extra.WireLimit, WindowWire
	}
	var w window
	st := extra.Settings
	switch {
	case st != nil:
		w.model, w.fieldSources = st.Model, st.Sources
		w.limit, w.source = st.Window, st.WindowSource
		if st.WindowSource == WindowUnknown {
			// None was known at creation: the configuration's now, if any.
			w.limit, w.source = curWindow, curWindowSrc
		}
		w.diff = settingsDiff(meta.Model, *st, cur, curSrc, known, curWindow, curWindowSrc)
	case known:
		w.model, w.fieldSources = cur, curSrc
		w.limit, w.source = curWindow, curWindowSrc
	default:
		w.model = unknownModel(extra.Provider)
		w.fieldSources = config.ModelFieldSources{ContextLimit: config.SourceDefault, ThinkingBinding: config.SourceDefault,
			ServerContextEditing: config.SourceDefault, ServerCompaction: config.SourceDefault, TokenFactor: config.SourceDefault}
		w.limit, w.source = curWindow, curWindowSrc
	}
	w.entryLimit, w.entrySource = w.limit, w.source
	if meta.ContextLimit > 0 {
		w.limit, w.source = meta.ContextLimit, WindowSession
	}
	if l := extra.Learned; l != nil && l.Limit > 0 && (w.limit == 0 || l.Limit < w.limit) {
		learned := l.Limit
		if l.Accepted && accepted > learned && accepted <= MaxContextLimit {
			learned = accepted
		}
		if w.limit == 0 || learned < w.limit {
			w.limit, w.source = learned, WindowLearned
		}
	}
	if w.limit == 0 {
		w.limit, w.source = MaxContextLimit, WindowUnknown
	}
	if w.entryLimit == 0 {
		w.entrySource = WindowUnknown
	}
	if w.limit < MinContextLimit || w.limit > MaxContextLimit {
		return window{}, invalidField("context_limit", "%d tokens is outside %d..=%d", w.limit, MinContextLimit, MaxContextLimit)
	}
	w.model.ContextLimit = w.limit
	return w, nil
}

// windowSourceOf maps a config field source to a window source.
func windowSourceOf(src string) string {
	switch src {
	case config.SourceCatalog:
		return WindowCatalog
	case config.OverlayName:
		return WindowSession
	case config.SourceDefault, "":
		return WindowUnknown
	}
	return WindowConfig
}

// unknownModel is the entry of a model nothing knows, by the wire API
// family of its session: an Anthropic model binds thinking to the prefix
// and counts about 1.35 o200k tokens per token (the catalog's Claude
// entries); any other counts as o200k.
func unknownModel(provider string) config.Model {
	if provider == ProviderAnthropic {
		return config.Model{ThinkingBinding: true, TokenFactor: 1.35}
	}
	return config.Model{TokenFactor: config.DefaultModelTokenFactor}
}

// Wire API families of CreateParams.Provider.
const (
	ProviderAnthropic = "anthropic"
	ProviderOpenAI    = "openai"
)

// settingsDiff lists what a session's stored settings differ in from the
// current configuration's entry of its model, in words for doctor.
func settingsDiff(model string, st storedSettings, cur config.Model, curSrc config.ModelFieldSources, known bool, curWindow uint64, curWindowSrc string) []string {
	if !known && !fromEntry(st) {
		// Nothing configured the model when the session was made either:
		// the session is served as it always was.
		return nil
	}
	if !known {
		return []string{fmt.Sprintf("the current configuration has no entry for model %q: the session is served with the settings stored when it was created (the entry's window then: %s; a window learned since or set for the session still applies)", model, windowText(st.Window, st.WindowSource))}
	}
	var out []string
	if st.Window != curWindow && st.WindowSource != WindowUnknown {
		out = append(out, fmt.Sprintf("context_limit: the session's %s, the current configuration's %s", windowText(st.Window, st.WindowSource), windowText(curWindow, curWindowSrc)))
	}
	add := func(key string, a, b any, srcA, srcB string) {
		if a != b {
			out = append(out, fmt.Sprintf("%s: the session's %v (%s), the current configuration's %v (%s)", key, a, srcA, b, srcB))
		}
	}
	add("thinking_binding", st.Model.ThinkingBinding, cur.ThinkingBinding, st.Sources.ThinkingBinding, curSrc.ThinkingBinding)
	add("server_context_editing", st.Model.ServerContextEditing, cur.ServerContextEditing, st.Sources.ServerContextEditing, curSrc.ServerContextEditing)
	add("server_compaction", st.Model.ServerCompaction, cur.ServerCompaction, st.Sources.ServerCompaction, curSrc.ServerCompaction)
	add("token_factor", st.Model.TokenFactor, cur.TokenFactor, st.Sources.TokenFactor, curSrc.TokenFactor)
	return out
}

// fromEntry reports whether a session's stored settings came from a
// model entry (the configuration's or the catalog's), not only from the
// defaults of a model nothing knew and the session's own window.
func fromEntry(st storedSettings) bool {
	if st.WindowSource == WindowConfig || st.WindowSource == WindowCatalog {
		return true
	}
	s := st.Sources
	for _, src := range []string{s.ThinkingBinding, s.ServerContextEditing, s.ServerCompaction, s.TokenFactor} {
		if src != config.SourceDefault && src != "" {
			return true
		}
	}
	return false
}

func windowText(limit uint64, source string) string {
	if source == WindowUnknown || limit == 0 {
		return "unknown"
	}
	return fmt.Sprintf("%d tokens (%s)", limit, source)
}

// storeSettings returns meta with the session's resolved settings stored
// in its Extra (sessionExtra.Settings), for a session being created or
// whose model changed. w is the window resolved for meta.
func storeSettings(meta checkpoint.Meta, w window) checkpoint.Meta {
	var extra sessionExtra
	if len(meta.Extra) > 0 {
		_ = json.Unmarshal(meta.Extra, &extra)
	}
	// The session's own and the learned window live in their own fields;
	// the stored one is what the model's entry gave.
	st := storedSettings{Model: w.model, Sources: w.fieldSources, Window: w.entryLimit, WindowSource: w.entrySource}
	st.Model.ContextLimit = w.entryLimit
	extra.Settings = &st
	meta.Extra, _ = json.Marshal(extra)
	return meta
}

// WindowSources counts the sessions in memory by where their context
// window came from (Window*), for status. Sessions not loaded are not
// read: their listing rows carry their source (ListSessionPage).
func (e *Engine) WindowSources() map[string]int {
	e.mu.Lock()
	list := make([]*session, 0, len(e.sessions))
	for _, s := range e.sessions {
		list = append(list, s)
	}
	e.mu.Unlock()
	out := map[string]int{}
	for _, s := range list {
		s.mu.Lock()
		if !s.evicted && s.win.source != "" {
			out[s.win.source]++
		}
		s.mu.Unlock()
	}
	return out
}

// ColdEstimate is, for a caller deciding before a session exists whether
// its first request needs a pre-send compaction (the proxy's cold first
// request, docs/design.md §10), a bounded estimate of the request, in
// tokens — its JSON's bytes at bytesPerToken, which leans high, times the
// model's token factor (provider tokens ÷ o200k tokens) — and the
// compaction threshold of a session created now with p's model, context
// limit, wire limit and provider, under the daemon's configuration (no
// overlay: an agent file's or a label's are read when the session is).
// Errors: a window outside MinContextLimit..=MaxContextLimit.
func (e *Engine) ColdEstimate(p CreateParams, bytes int, bytesPerToken float64) (estimate, threshold uint64, err error) {
	cfg := e.Config()
	provider := p.Provider
	if provider != ProviderAnthropic && provider != ProviderOpenAI {
		provider = ""
	}
	w, err := resolveWindow(cfg, checkpoint.Meta{Model: p.Model, ContextLimit: p.ContextLimit}, sessionExtra{WireLimit: p.WireContextLimit, Provider: provider}, 0)
	if err != nil {
		return 0, 0, err
	}
	factor := w.model.TokenFactor
	if factor <= 0 {
		factor = 1
	}
	return uint64(float64(bytes) / bytesPerToken * factor), trigger.Threshold(w.limit, cfg.ContextCompaction.Trigger), nil
}
