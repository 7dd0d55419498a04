package config

import (
	"errors"
	"os"
	"path/filepath"
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
