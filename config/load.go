package config

import (
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
)

// SystemPath is the system configuration layer (docs/design.md §3).
const SystemPath = "/etc/ctxd/config.toml"

// UserPath returns the user configuration layer (docs/design.md §3):
// $XDG_CONFIG_HOME/ctxd/config.toml, or ~/.config/ctxd/config.toml when
// XDG_CONFIG_HOME is unset or not absolute (per the XDG spec), or "" when
// neither variable helps. getenv is os.Getenv outside tests.
func UserPath(getenv func(string) string) string {
	if x := getenv("XDG_CONFIG_HOME"); filepath.IsAbs(x) {
		return filepath.Join(x, "ctxd", "config.toml")
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".config", "ctxd", "config.toml")
	}
	return ""
}

// Options says which files Load reads. Tests point every path at temporary
// files; ctxctl and ctxd use SystemPath and UserPath(os.Getenv).
type Options struct {
	// SystemPath is the system layer; "" skips it, and so does a file that
	// does not exist.
	SystemPath string
	// UserPath is the user layer; "" skips it, and so does a file that does
	// not exist.
	UserPath string
	// Files are the --config files, lowest first. Each must exist.
	Files []string
}

// Load builds the effective configuration (docs/design.md §3): built-in defaults,
// then the system layer, the user layer and each of opts.Files in order. An
// omitted table inherits from the layer below; an authored table replaces it
// and takes defaults for the keys it omits; an authored [models."<id>"]
// entry overrides the keys it sets and keeps the rest of the entry below
// it (the catalog's, a lower layer's); an authored [[summarizer.bindings]] array
// replaces the lower one. Config.Sources says which layer set each table.
//
// Load reads only the files named in opts and has no other side effects. A
// relative compaction.agent_file is resolved against the directory of the
// file that sets it; Load does not read it (see LoadAgentFile).
//
// On failure it returns the zero Config and an *Error listing every problem:
// unreadable files, syntax errors, unknown keys or tables, wrong types,
// out-of-range values and combinations that cannot hold. Warnings (a
// deprecated alias, a key with no effect) are returned either way.
func Load(opts Options) (Config, []Warning, error) {
	st := newState(Defaults())
	for _, f := range []string{opts.SystemPath, opts.UserPath} {
		if f == "" {
			continue
		}
		data, err := os.ReadFile(f)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		st.file(f, data, err)
	}
	for _, f := range opts.Files {
		data, err := os.ReadFile(f)
		st.file(f, data, err)
	}
	return st.finish()
}

// ApplyOverlay applies the TOML overlay a session sends when it is created
// (docs/design.md §3) on top of base, a Config returned by Load, with the same
// rules as a file layer, restricted to policy: a key outside OverlayKeys
// (a binding's definition, a path, a listener, storage, workers) is a
// problem "not allowed in a session overlay" naming it, and the keys an
// overlay cannot set keep base's values even in a table it authors. An
// authored [models."<id>"] entry changes that model's context_limit and
// keeps the rest of its entry (the rule of every layer). name labels the overlay in Sources and in
// problems (OverlayName). base is not modified.
//
// On failure it returns the zero Config and an *Error listing every problem
// of the overlay.
func ApplyOverlay(base Config, data []byte, name string) (Config, []Warning, error) {
	base.Models = maps.Clone(base.Models)
	base.ModelSources = maps.Clone(base.ModelSources)
	base.Sources = maps.Clone(base.Sources)
	if base.Models == nil {
		base.Models = map[string]Model{}
	}
	if base.Sources == nil {
		base.Sources = map[string]string{}
	}
	st := newState(base)
	st.layer(name, data, false)
	// An overlay may author [compaction] or [offload] for their policy
	// keys; the paths in those tables stay the daemon's (an authored table
	// would otherwise reset them to their defaults), and so do the tables
	// an overlay may not author at all.
	st.cfg.Compaction.AgentFile = base.Compaction.AgentFile
	st.cfg.Offload.Dir = base.Offload.Dir
	st.cfg.Summarizer = base.Summarizer
	st.cfg.Daemon = base.Daemon
	st.cfg.Storage = base.Storage
	st.cfg.Workers = base.Workers
	return st.finish()
}

// state is the configuration being layered.
type state struct {
	cfg Config
	// docs maps a Sources key to the document that set it; tables set by
	// defaults or by an earlier ApplyOverlay base have none.
	docs     map[string]*doc
	order    []string
	problems []Problem
	warnings []Warning
}

func newState(base Config) *state {
	return &state{cfg: base, docs: map[string]*doc{}}
}

// file layers one file that was read with err.
func (s *state) file(name string, data []byte, err error) {
	s.order = append(s.order, name)
	if err != nil {
		msg := "cannot read: " + err.Error()
		var pe *fs.PathError
		if errors.As(err, &pe) {
			msg = "cannot read: " + pe.Err.Error()
		}
		s.problems = append(s.problems, Problem{File: name, Message: msg})
		return
	}
	s.layer(name, data, true)
}

// layer applies one TOML source. isFile says relative paths in it are
// relative to its directory.
func (s *state) layer(name string, data []byte, isFile bool) {
	if !isFile {
		s.order = append(s.order, name)
	}
	d := newDoc(name, data, reflect.TypeFor[Config](), !isFile)

	dec := Defaults()
	dec.Models = map[string]Model{}
	dec.Summarizer.Bindings = nil
	_, authoredTrigger := d.pos["context_compaction.trigger"]
	if authoredTrigger {
		// An authored trigger replaces the default one whole.
		dec.ContextCompaction.Trigger = Trigger{}
	}
	d.decode(&dec)
	s.problems = append(s.problems, d.problems...)

	for _, t := range tables {
		if !d.tables[t] {
			continue
		}
		copyTable(&s.cfg, &dec, t)
		s.cfg.Sources[t] = name
		s.docs[t] = d
	}
	for _, id := range d.models {
		s.mergeModel(d, dec.Models[id], id, name)
	}

	if d.tables[TableContextCompaction] {
		s.foldLegacyBufferTokens(d, authoredTrigger)
	}
	if d.tables[TableCompaction] && isFile {
		if a := s.cfg.Compaction.AgentFile; a != "" && !filepath.IsAbs(a) {
			s.cfg.Compaction.AgentFile = filepath.Join(filepath.Dir(name), a)
		}
	}
}

// foldLegacyBufferTokens turns the legacy context_compaction.buffer_tokens
// alias into trigger = { buffer_tokens = N } (docs/design.md §3).
func (s *state) foldLegacyBufferTokens(d *doc, authoredTrigger bool) {
	const key = "context_compaction.buffer_tokens"
	cc := &s.cfg.ContextCompaction
	p, legacy := d.pos[key]
	n := cc.BufferTokens
	cc.BufferTokens = 0
	if !legacy {
		return
	}
	switch {
	case authoredTrigger:
		s.problems = append(s.problems, Problem{File: d.file, Line: p.line, Col: p.col, Key: key,
			Message: "set together with trigger: buffer_tokens is the legacy alias of trigger = { buffer_tokens = N }; keep only trigger"})
	case n == 0 && d.reliable(TableContextCompaction):
		s.problems = append(s.problems, Problem{File: d.file, Line: p.line, Col: p.col, Key: key,
			Message: "must be > 0 (tokens left free below the context limit)"})
	case n > 0:
		cc.Trigger = Trigger{BufferTokens: n}
		s.warnings = append(s.warnings, Warning{File: d.file, Line: p.line, Col: p.col, Key: key,
			Message: "deprecated alias: write trigger = { buffer_tokens = N } instead"})
	}
}

// copyTable copies top-level table t from src to dst.
func copyTable(dst, src *Config, t string) {
	switch t {
	case TableContextCompaction:
		dst.ContextCompaction = src.ContextCompaction
	case TableCompaction:
		dst.Compaction = src.Compaction
	case TableOffload:
		dst.Offload = src.Offload
	case TableContextEditing:
		dst.ContextEditing = src.ContextEditing
	case TableSummarizer:
		dst.Summarizer = src.Summarizer
	case TableDaemon:
		dst.Daemon = src.Daemon
	case TableStorage:
		dst.Storage = src.Storage
	case TableWorkers:
		dst.Workers = src.Workers
	case TableProxy:
		dst.Proxy = src.Proxy
	}
}

// finish validates the layered configuration and returns Load's results.
func (s *state) finish() (Config, []Warning, error) {
	s.validate()
	sortProblems(s.problems, s.order)
	sortProblems(s.warnings, s.order)
	if len(s.problems) > 0 {
		return Config{}, s.warnings, &Error{Problems: s.problems, AgentFile: s.cfg.Compaction.AgentFile}
	}
	return s.cfg, s.warnings, nil
}

// mergeModel applies the authored [models."<id>"] entry m of document d
// (layer name) over the entry below it: only the keys d sets change, the
// others keep the catalog's or a lower layer's value (docs/design.md §3;
// docs/decisions.md "A model entry overrides only the keys it sets"). An
// entry for a model nothing below knows starts from the defaults (booleans
// false, token_factor 1.0) and must set context_limit (validate). Each
// field's source is recorded in ModelSources.
func (s *state) mergeModel(d *doc, m Model, id, name string) {
	base, known := s.cfg.Model(id)
	src := ModelFieldSources{}
	if known {
		src = s.cfg.modelSources(id)
	} else {
		base = Model{TokenFactor: DefaultModelTokenFactor}
		src = ModelFieldSources{ContextLimit: SourceDefault, ThinkingBinding: SourceDefault,
			ServerContextEditing: SourceDefault, ServerCompaction: SourceDefault, TokenFactor: SourceDefault}
	}
	set := func(key string) bool {
		_, ok := d.pos[keyPath("models", id, key)]
		return ok
	}
	if set("context_limit") {
		base.ContextLimit, src.ContextLimit = m.ContextLimit, name
	}
	if set("thinking_binding") {
		base.ThinkingBinding, src.ThinkingBinding = m.ThinkingBinding, name
	}
	if set("server_context_editing") {
		base.ServerContextEditing, src.ServerContextEditing = m.ServerContextEditing, name
	}
	if set("server_compaction") {
		base.ServerCompaction, src.ServerCompaction = m.ServerCompaction, name
	}
	if set("token_factor") {
		base.TokenFactor, src.TokenFactor = m.TokenFactor, name
	}
	if m.Price != nil {
		// [models."<id>".price]: the keys it sets over the price below.
		p := Price{}
		if base.Price != nil {
			p = *base.Price
		}
		for _, f := range []struct {
			key      string
			dst, src *float64
		}{{"input", &p.Input, &m.Price.Input}, {"cache_write_5m", &p.CacheWrite5m, &m.Price.CacheWrite5m},
			{"cache_write_1h", &p.CacheWrite1h, &m.Price.CacheWrite1h}, {"cache_read", &p.CacheRead, &m.Price.CacheRead},
			{"output", &p.Output, &m.Price.Output}} {
			if _, ok := d.pos[keyPath("models", id, "price", f.key)]; ok {
				*f.dst = *f.src
			}
		}
		base.Price = &p
	}
	if s.cfg.Models == nil {
		s.cfg.Models = map[string]Model{}
	}
	s.cfg.Models[id] = base
	if s.cfg.ModelSources == nil {
		s.cfg.ModelSources = map[string]ModelFieldSources{}
	}
	s.cfg.ModelSources[id] = src
	s.cfg.Sources[modelSourceKey(id)] = name
	s.docs[modelSourceKey(id)] = d
}
