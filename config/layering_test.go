package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestLayeringAuthoredTableTakesDefaultsForOmittedKeys is the rule of
// docs/design.md §3 shown with two files: the upper file authors
// [context_compaction] with only auto = false, so keep_recent_tokens is the
// default again, not the lower file's 100.
func TestLayeringAuthoredTableTakesDefaultsForOmittedKeys(t *testing.T) {
	lower := writeTemp(t, "lower.toml", "[context_compaction]\nkeep_recent_tokens = 100\n")
	upper := writeTemp(t, "upper.toml", "[context_compaction]\nauto = false\n")
	cfg, _, err := Load(Options{Files: []string{lower, upper}})
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.ContextCompaction.KeepRecentTokens; got != 16384 {
		t.Errorf("keep_recent_tokens = %d, want 16384", got)
	}
	if cfg.ContextCompaction.Auto {
		t.Error("auto = true, want false from the upper file")
	}
	if got := cfg.Sources[TableContextCompaction]; got != upper {
		t.Errorf("Sources[context_compaction] = %q, want %q", got, upper)
	}
}

func TestLayeringOmittedTableInherits(t *testing.T) {
	lower := writeTemp(t, "lower.toml", "[context_compaction]\nkeep_recent_tokens = 100\n[workers]\nsize = 2\n")
	upper := writeTemp(t, "upper.toml", "[workers]\nqueue = 8\n")
	cfg, _, err := Load(Options{Files: []string{lower, upper}})
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.ContextCompaction.KeepRecentTokens; got != 100 {
		t.Errorf("keep_recent_tokens = %d, want 100 inherited from the lower file", got)
	}
	if cfg.Workers != (Workers{Size: DefaultWorkersSize, Queue: 8}) {
		t.Errorf("workers = %+v, want size default, queue 8", cfg.Workers)
	}
	want := map[string]string{TableContextCompaction: lower, TableWorkers: upper, TableOffload: SourceDefault}
	for table, src := range want {
		if cfg.Sources[table] != src {
			t.Errorf("Sources[%s] = %q, want %q", table, cfg.Sources[table], src)
		}
	}
}

func TestLayeringOrderSystemUserFiles(t *testing.T) {
	dir := t.TempDir()
	sys := filepath.Join(dir, "etc.toml")
	xdg := filepath.Join(dir, "xdg")
	user := UserPath(func(k string) string {
		if k == "XDG_CONFIG_HOME" {
			return xdg
		}
		return ""
	})
	if user != filepath.Join(xdg, "ctxd", "config.toml") {
		t.Fatalf("UserPath = %q", user)
	}
	if err := os.MkdirAll(filepath.Dir(user), 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(sys, "[workers]\nsize = 1\n[storage]\nsync_writes = false\n[compaction]\nshape = \"simple\"\n")
	write(user, "[workers]\nsize = 2\n[storage]\ndata_dir = \"/var/lib/ctxd\"\n")
	cli := writeTemp(t, "cli.toml", "[workers]\nsize = 3\n")

	cfg, _, err := Load(Options{SystemPath: sys, UserPath: user, Files: []string{cli}})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Workers.Size != 3 || cfg.Sources[TableWorkers] != cli {
		t.Errorf("workers.size = %d from %s, want 3 from --config", cfg.Workers.Size, cfg.Sources[TableWorkers])
	}
	if !reflect.DeepEqual(cfg.Storage, Storage{DataDir: "/var/lib/ctxd", SyncWrites: true, MinFreeBytes: DefaultMinFreeBytes, SessionMemoryBytes: DefaultSessionMemoryBytes}) || cfg.Sources[TableStorage] != user {
		t.Errorf("storage = %+v from %s, want the user table whole (sync_writes back to its default)", cfg.Storage, cfg.Sources[TableStorage])
	}
	if cfg.Compaction.Shape != ShapeSimple || cfg.Sources[TableCompaction] != sys {
		t.Errorf("compaction = %+v from %s, want the system table", cfg.Compaction, cfg.Sources[TableCompaction])
	}

	// Missing system and user files are skipped; a missing --config is not.
	if _, _, err := Load(Options{SystemPath: filepath.Join(dir, "none"), UserPath: filepath.Join(dir, "none2")}); err != nil {
		t.Errorf("missing optional layers: %v", err)
	}
	_, _, err = Load(Options{Files: []string{filepath.Join(dir, "absent.toml")}})
	if ps := problemsOf(t, err); len(ps) != 1 || ps[0].Line != 0 || !strings.Contains(ps[0].Message, "cannot read") {
		t.Errorf("missing --config: %v", err)
	}
}

// TestLayeringModelEntryOverridesOnlyItsKeys: an authored [models."<id>"]
// entry changes the keys it sets and keeps the rest of the entry below it
// (a lower layer's, the catalog's), each field's source recorded; other
// entries stay; an entry for a model nothing below knows takes defaults.
func TestLayeringModelEntryOverridesOnlyItsKeys(t *testing.T) {
	lower := writeTemp(t, "lower.toml", "[models.\"claude-sonnet-4-5\"]\ncontext_limit = 1000000\ntoken_factor = 1.4\nthinking_binding = false\n")
	upper := writeTemp(t, "upper.toml", "[models.\"claude-sonnet-4-5\"]\ncontext_limit = 500000\n[models.local]\ncontext_limit = 8192\n[models.\"claude-opus-4-8\"]\ncontext_limit = 30000\n")
	cfg, _, err := Load(Options{Files: []string{lower, upper}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cfg.Models["claude-sonnet-4-5"], (Model{ContextLimit: 500000, ServerContextEditing: true, TokenFactor: 1.4}); got != want {
		t.Errorf("claude-sonnet-4-5 = %+v, want %+v (upper's limit, lower's factor and thinking_binding, the catalog's rest)", got, want)
	}
	if got, want := cfg.ModelSources["claude-sonnet-4-5"], (ModelFieldSources{ContextLimit: upper, ThinkingBinding: lower,
		ServerContextEditing: SourceCatalog, ServerCompaction: SourceCatalog, TokenFactor: lower}); got != want {
		t.Errorf("claude-sonnet-4-5 sources = %+v, want %+v", got, want)
	}
	// What the docs suggest for a small window keeps the model's thinking
	// binding, server compaction and factor.
	want := compacting(claude(200000))
	want.ContextLimit = 30000
	if got := cfg.Models["claude-opus-4-8"]; got != want {
		t.Errorf("claude-opus-4-8 = %+v, want %+v", got, want)
	}
	if got := cfg.Models["local"]; got != (Model{ContextLimit: 8192, TokenFactor: DefaultModelTokenFactor}) {
		t.Errorf("local = %+v", got)
	}
	if src := cfg.ModelSources["local"]; src.ContextLimit != upper || src.TokenFactor != SourceDefault || src.ThinkingBinding != SourceDefault {
		t.Errorf("local sources = %+v", src)
	}
	if got := cfg.Models["claude-opus-4-5"]; got != claude(200000) {
		t.Errorf("catalog entry changed: %+v", got)
	}
	if src, ok := cfg.ModelSourcesOf("claude-opus-4-5-20251101"); !ok || src.ContextLimit != SourceCatalog || src.TokenFactor != SourceCatalog {
		t.Errorf("a catalog entry's sources = %+v, %v", src, ok)
	}
	if cfg.Sources[`models.claude-sonnet-4-5`] != upper || cfg.Sources[`models.local`] != upper || cfg.Sources[`models."gpt-4.1"`] != SourceDefault {
		t.Errorf("model sources wrong: %v", cfg.Sources)
	}
	// A dated id authored on its own starts from its undated catalog entry.
	dated := writeTemp(t, "dated.toml", "[models.\"claude-opus-4-8-20260101\"]\ncontext_limit = 40000\n")
	cfg, _, err = Load(Options{Files: []string{dated}})
	if err != nil {
		t.Fatal(err)
	}
	want.ContextLimit = 40000
	if got := cfg.Models["claude-opus-4-8-20260101"]; got != want {
		t.Errorf("dated entry = %+v, want %+v", got, want)
	}
}

func TestLayeringBindingsArrayReplaces(t *testing.T) {
	lower := writeTemp(t, "lower.toml", "[[summarizer.bindings]]\nname = \"a\"\nprovider = \"extractive\"\n[[summarizer.bindings]]\nname = \"b\"\nprovider = \"extractive\"\n")
	upper := writeTemp(t, "upper.toml", "[[summarizer.bindings]]\nname = \"c\"\nprovider = \"anthropic\"\nmodel = \"claude-haiku-4-5\"\napi_key_env = \"ANTHROPIC_API_KEY\"\n")
	cfg, _, err := Load(Options{Files: []string{lower, upper}})
	if err != nil {
		t.Fatal(err)
	}
	if b := cfg.Summarizer.Bindings; len(b) != 1 || b[0].Name != "c" {
		t.Errorf("bindings = %+v, want only c", b)
	}
	cfg, _, err = Load(Options{Files: []string{lower}})
	if err != nil || len(cfg.Summarizer.Bindings) != 2 {
		t.Errorf("lower alone: %+v, %v", cfg.Summarizer.Bindings, err)
	}
}

func TestLayeringProblemsNameTheirLayer(t *testing.T) {
	lower := writeTemp(t, "lower.toml", "[workers]\nsize = 0\n")
	upper := writeTemp(t, "upper.toml", "[offload]\nkeep_head = 99999\n")
	_, _, err := Load(Options{Files: []string{lower, upper}})
	ps := problemsOf(t, err)
	if len(ps) != 2 || ps[0].File != lower || ps[0].Key != "workers.size" || ps[1].File != upper || ps[1].Key != "offload.keep_head" {
		t.Errorf("problems:\n%s", dump(ps))
	}
	// A bad table that a higher layer replaces is no longer in effect.
	fixed := writeTemp(t, "fixed.toml", "[workers]\nsize = 1\n")
	if _, _, err := Load(Options{Files: []string{lower, fixed}}); err != nil {
		t.Errorf("replaced table still reported: %v", err)
	}
}

func TestLayeringAgentFileRelativeToItsConfig(t *testing.T) {
	p := writeTemp(t, "c.toml", "[compaction]\nagent_file = \"compaction.md\"\n")
	cfg, _, err := Load(Options{Files: []string{p}})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(filepath.Dir(p), "compaction.md"); cfg.Compaction.AgentFile != want {
		t.Errorf("agent_file = %q, want %q", cfg.Compaction.AgentFile, want)
	}
}

func TestApplyOverlay(t *testing.T) {
	base, _, err := Load(Options{Files: []string{writeTemp(t, "c.toml", "[workers]\nsize = 2\n[context_compaction]\nkeep_recent_tokens = 100\n")}})
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := ApplyOverlay(base, []byte("[context_compaction]\ntrigger = { percent = 50 }\n[models.mine]\ncontext_limit = 4096\n"), "session s1")
	if err != nil {
		t.Fatal(err)
	}
	if got.ContextCompaction.Trigger.Percent != 50 || got.ContextCompaction.KeepRecentTokens != 16384 {
		t.Errorf("overlay table: %+v", got.ContextCompaction)
	}
	if got.Workers.Size != 2 || got.Sources[TableContextCompaction] != "session s1" || got.Sources["models.mine"] != "session s1" {
		t.Errorf("overlay layering: workers %+v sources %v", got.Workers, got.Sources)
	}
	if _, ok := base.Models["mine"]; ok || base.Sources[TableContextCompaction] == "session s1" {
		t.Error("ApplyOverlay modified its base")
	}

	_, _, err = ApplyOverlay(base, []byte("[context_editing]\nmode = \"remote\"\nbogus = 1\n"), "session s2")
	ps := problemsOf(t, err)
	if len(ps) != 2 || ps[0].String() != `session s2:2:1: context_editing.mode: must be one of "local", "server", "auto" (got "remote")` || ps[1].Key != "context_editing.bogus" {
		t.Errorf("overlay problems:\n%s", dump(ps))
	}
}

func TestModelLookupToleratesDateSuffixes(t *testing.T) {
	cfg := Defaults()
	cfg.Models["my-model"] = Model{ContextLimit: 4096, TokenFactor: 1}
	tests := []struct {
		id    string
		limit uint64
		ok    bool
	}{
		{"claude-sonnet-4-5", 200000, true},
		{"claude-sonnet-4-5-20250929", 200000, true},
		{"claude-opus-4-1-20250805", 200000, true},
		{"claude-opus-4-1@20250805", 200000, true},
		{"claude-sonnet-4-20250514", 200000, true},
		{"gpt-4o-2024-08-06", 128000, true},
		{"gpt-4o-mini-2024-07-18", 128000, true},
		{"gpt-4.1-nano-2025-04-14", 1047576, true},
		{"my-model-20260101", 4096, true},
		{"o1-preview", 0, false},
		{"gpt-4o-2024-08", 0, false},
		{"claude-sonnet-4-5-latest", 0, false},
		{"unknown-model", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			m, ok := cfg.Model(tt.id)
			if ok != tt.ok || m.ContextLimit != tt.limit {
				t.Errorf("Model(%q) = %+v, %v; want limit %d, %v", tt.id, m, ok, tt.limit, tt.ok)
			}
		})
	}
}

func TestCatalogEntriesAreValid(t *testing.T) {
	for id, m := range Catalog() {
		if m.ContextLimit == 0 || !(m.TokenFactor > 0) {
			t.Errorf("catalog %s: %+v", id, m)
		}
		if strings.HasPrefix(id, "claude-") && (m.TokenFactor != 1.35 || !m.ThinkingBinding || !m.ServerContextEditing || m.ContextLimit != 200000) {
			t.Errorf("catalog %s: %+v, want Claude defaults", id, m)
		}
	}
}
