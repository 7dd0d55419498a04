package summarizer

import (
	"encoding/json"
	"slices"
	"testing"
)

// TestEditIdentifiers: the names an edit adds, removes and changes are read
// from every agent's edit input: Claude Code Edit, Write and MultiEdit, pi
// edit and write, the editors' str_replace, and Codex apply_patch (custom
// tool input, function argument and shell heredoc); config keys from config
// files and struct tags.
func TestEditIdentifiers(t *testing.T) {
	patch := "*** Begin Patch\n*** Update File: src/server.go\n@@\n-func (s *Server) Old() {}\n+func (s *Server) Serve(ctx context.Context) error {\n+\treturn nil\n+}\n*** Add File: src/limits.go\n+const MaxConns = 8\n+type Limiter struct{}\n*** End Patch\n"
	cases := []struct {
		name                    string
		tool                    string
		input                   string
		path                    string
		added, removed, changed []string
	}{
		{"claude edit", "Edit", `{"file_path":"/r/a.py","old_string":"def load(p):\n    pass\n","new_string":"def load(p):\n    return read(p)\n\nclass Loader:\n    def fetch(self):\n        pass\n"}`,
			"/r/a.py", []string{"Loader", "fetch"}, nil, []string{"load"}},
		{"claude write", "Write", `{"file_path":"/r/b.ts","content":"export interface Todo { id: string }\nexport function useTodos() {}\nexport const STORAGE_KEY = 'k'\n"}`,
			"/r/b.ts", []string{"Todo", "useTodos", "STORAGE_KEY"}, nil, nil},
		{"claude multiedit", "MultiEdit", `{"file_path":"/r/c.go","edits":[{"old_string":"func Alpha() {}","new_string":"func Beta() {}"},{"old_string":"","new_string":"type Tee struct{}"}]}`,
			"/r/c.go", []string{"Beta", "Tee"}, []string{"Alpha"}, nil},
		{"pi edit", "edit", `{"path":"src/x.ts","oldText":"  private first(): void {\n  }","newText":"  private first(): void {\n    run()\n  }\n  async second(n: number): Promise<void> {\n  }"}`,
			"src/x.ts", []string{"second"}, nil, []string{"first"}},
		{"pi write", "write", `{"path":"src/y.rs","content":"pub fn parse() {}\npub struct Cfg {}\n"}`,
			"src/y.rs", []string{"parse", "Cfg"}, nil, nil},
		{"editor str_replace", "str_replace_editor", `{"command":"str_replace","path":"/r/m.ex","old_str":"  defp old_name(x), do: x","new_str":"  defp new_name(x), do: x\n  @timeout 500"}`,
			"/r/m.ex", []string{"new_name", "@timeout"}, []string{"old_name"}, nil},
		{"toml keys", "Edit", `{"file_path":"/r/ctxd.toml","old_string":"[compaction]\nshape = \"auto\"","new_string":"[compaction]\nshape = \"auto\"\nextractive_summary_bytes = 10240"}`,
			"/r/ctxd.toml", []string{"extractive_summary_bytes"}, nil, []string{"[compaction]", "shape"}},
		{"struct tag", "Edit", "{\"file_path\":\"/r/t.go\",\"old_string\":\"\",\"new_string\":\"\\tBytes uint64 `toml:\\\"extractive_summary_bytes\\\" json:\\\"x\\\"`\"}",
			"/r/t.go", []string{"extractive_summary_bytes"}, nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var in map[string]any
			if err := json.Unmarshal([]byte(tc.input), &in); err != nil {
				t.Fatal(err)
			}
			edits := editsOf(tc.tool, in)
			if len(edits) == 0 {
				t.Fatalf("no edit parsed from %s", tc.input)
			}
			var added, removed, changed []string
			for _, e := range edits {
				if e.path != tc.path {
					t.Errorf("path %q, want %q", e.path, tc.path)
				}
				a, r, c := identDelta(e)
				added, removed, changed = append(added, a...), append(removed, r...), append(changed, c...)
			}
			if !slices.Equal(added, tc.added) || !slices.Equal(removed, tc.removed) || !slices.Equal(changed, tc.changed) {
				t.Errorf("got +%q −%q ~%q, want +%q −%q ~%q", added, removed, changed, tc.added, tc.removed, tc.changed)
			}
		})
	}

	// Codex apply_patch, in each of the shapes Codex records it.
	for name, in := range map[string]map[string]any{
		"custom tool": {"input": patch},
		"function":    {"patch": patch},
		"shell argv":  {"command": []any{"bash", "-lc", "apply_patch <<'EOF'\n" + patch + "EOF\n"}},
	} {
		t.Run("apply_patch "+name, func(t *testing.T) {
			edits := editsOf("apply_patch", in)
			if name == "shell argv" {
				edits = editsOf("shell", in)
			}
			if len(edits) != 2 || edits[0].path != "src/server.go" || edits[1].path != "src/limits.go" || !edits[1].created {
				t.Fatalf("edits %+v", edits)
			}
			a, r, _ := identDelta(edits[0])
			if !slices.Equal(a, []string{"Serve"}) || !slices.Equal(r, []string{"Old"}) {
				t.Errorf("update: +%q −%q", a, r)
			}
			a, _, _ = identDelta(edits[1])
			if !slices.Equal(a, []string{"MaxConns", "Limiter"}) {
				t.Errorf("add: +%q", a)
			}
		})
	}
}
