package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzLoad: Load of arbitrary bytes never panics, and either returns a
// configuration that validates again or an error whose every problem has a
// position or a key. Seeded from the rule tests' documents and the example
// configurations.
func FuzzLoad(f *testing.F) {
	for _, s := range []string{
		"", "[context_compaction]\ntrigger = { percent = 0 }\n", "[context_compaction]\nbuffer_tokens = 5\ntrigger = {}\n",
		"[offload]\nmax_chars = 100\nkeep_head = 60\n", "[[summarizer.bindings]]\nname = \"a\"\n",
		"[models.\"gpt-4.1\"]\ncontext_limit = 0\n", "[daemon]\nlisten = \":80\"\n", "[workers]\nsize = 1\nsize = 2\n",
		"[summarizer.bindings]\n", "offload = 3\n", "[compaction.shape]\n", "a.b.c = [1, {x = 2}]\n",
		"[context_editing]\nprotect_tool_names = [\"todo\", 7]\n", "[offload\n",
	} {
		f.Add([]byte(s))
	}
	for _, glob := range []string{"../testdata/config/*/*.toml", "../ctxd.example.toml"} {
		files, _ := filepath.Glob(glob)
		for _, p := range files {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(b)
			}
		}
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(dir, "fuzz.toml")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, _, err := Load(Options{Files: []string{p}})
		if err == nil {
			// The effective config must validate again as an overlay base.
			if _, _, err := ApplyOverlay(cfg, nil, "empty"); err != nil {
				t.Fatalf("valid config fails re-validation: %v", err)
			}
			return
		}
		var cerr *Error
		if !errors.As(err, &cerr) || len(cerr.Problems) == 0 {
			t.Fatalf("error without problems: %v", err)
		}
		for _, pr := range cerr.Problems {
			if pr.Line == 0 && pr.Key == "" {
				t.Fatalf("problem with neither position nor key: %q", pr)
			}
			if pr.File != p {
				t.Fatalf("problem names file %q, want %q", pr.File, p)
			}
		}
	})
}

// FuzzLoadAgentFile: agent files of arbitrary bytes never panic and every
// problem has a position.
func FuzzLoadAgentFile(f *testing.F) {
	for _, s := range []string{"", "+++\n", "+++\n+++\n", "+++\n[limits]\ntimeout_ms = 1\n+++\nS", "+++\r\nx=1\r\n+++\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := parseAgentFile("a.md", data)
		if err == nil {
			return
		}
		var cerr *Error
		if !errors.As(err, &cerr) {
			t.Fatalf("not an *Error: %v", err)
		}
		for _, pr := range cerr.Problems {
			if pr.Line == 0 && pr.Key == "" {
				t.Fatalf("problem without position or key: %q", pr)
			}
		}
	})
}

// FuzzApplyOverlay: a session overlay is client-supplied TOML (docs/design.md §3).
// ApplyOverlay of arbitrary bytes never panics; an accepted overlay leaves
// every capability — bindings, paths, listener, storage, workers, a
// model's facts other than context_limit — exactly as the daemon's files
// set it, and chooses only a binding the daemon defines; a refused one has
// every problem located in the overlay. Seeded from the refusal and policy
// tables.
func FuzzApplyOverlay(f *testing.F) {
	for _, s := range []string{
		"", "[context_compaction]\ntrigger = { percent = 50 }\n", "[compaction]\nbinding = \"cheap\"\nshape = \"simple\"\n",
		"[offload]\nmax_chars = 100\nkeep_head = 10\nkeep_tail = 10\n", "[offload]\ndir = \"/tmp\"\n",
		"[[summarizer.bindings]]\nname = \"x\"\nprovider = \"anthropic\"\nmodel = \"m\"\nbase_url = \"http://127.0.0.1:9\"\napi_key_env = \"K\"\n",
		"summarizer.bindings = []\n", "[compaction]\nagent_file = \"/etc/shadow\"\n", "[daemon]\nlisten = \"127.0.0.1:1\"\n",
		"models.x = { context_limit = 4096, token_factor = 2.0 }\n", "[models.\"claude-sonnet-4-5\"]\ncontext_limit = 1000\n",
		"context_editing = { mode = \"auto\", protect_tool_names = [\"a\"] }\n", "[storage]\n", "[workers]\nsize = 1\n", "[offload\n",
	} {
		f.Add([]byte(s))
	}
	base, _, err := Load(Options{Files: []string{writeFuzzBase(f)}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, _, err := ApplyOverlay(base, data, OverlayName)
		if err != nil {
			var cerr *Error
			if !errors.As(err, &cerr) || len(cerr.Problems) == 0 {
				t.Fatalf("error without problems: %v", err)
			}
			for _, pr := range cerr.Problems {
				if pr.File != OverlayName || (pr.Line == 0 && pr.Key == "") {
					t.Fatalf("problem not located in the overlay: %q", pr)
				}
			}
			return
		}
		if !reflect.DeepEqual(got.Summarizer, base.Summarizer) || !reflect.DeepEqual(got.Daemon, base.Daemon) ||
			!reflect.DeepEqual(got.Storage, base.Storage) || got.Workers != base.Workers ||
			got.Compaction.AgentFile != base.Compaction.AgentFile || got.Offload.Dir != base.Offload.Dir {
			t.Fatalf("an accepted overlay changed a capability:\n%q", data)
		}
		for id, m := range got.Models {
			b, known := base.Model(id)
			if !known {
				b = Model{TokenFactor: DefaultModelTokenFactor}
			}
			if m.TokenFactor != b.TokenFactor || m.ThinkingBinding != b.ThinkingBinding || m.ServerContextEditing != b.ServerContextEditing {
				t.Fatalf("an accepted overlay changed model %q beyond its context_limit: %+v (was %+v)\n%q", id, m, b, data)
			}
		}
		if n := got.Compaction.Binding; n != "" && len(got.SummarizerBindings()) == 0 {
			t.Fatalf("binding %q accepted but names nothing", n)
		}
	})
}

// writeFuzzBase writes the daemon configuration FuzzApplyOverlay layers on.
func writeFuzzBase(f *testing.F) string {
	p := filepath.Join(f.TempDir(), "base.toml")
	src := "[compaction]\nagent_file = \"/srv/a.md\"\n[offload]\ndir = \"/srv/off\"\n" +
		"[[summarizer.bindings]]\nname = \"primary\"\nprovider = \"anthropic\"\nmodel = \"m\"\napi_key_env = \"K\"\n" +
		"[[summarizer.bindings]]\nname = \"cheap\"\nprovider = \"extractive\"\n" +
		"[daemon]\nlisten = \"127.0.0.1:7411\"\nauth_token_env = \"T\"\n[workers]\nsize = 2\n"
	if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
		f.Fatal(err)
	}
	return p
}
