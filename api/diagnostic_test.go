package api

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

// diagConstants returns the value of every Diag* constant of types.go.
func diagConstants(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "types.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if !strings.HasPrefix(n.Name, "Diag") || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok {
					v, _ := strconv.Unquote(lit.Value)
					out[n.Name] = v
				}
			}
		}
	}
	return out
}

// TestDiagnosticVocabularyDocumented: every level and code of the one
// diagnostic vocabulary is in docs/api.md, and no two constants share a
// value.
func TestDiagnosticVocabularyDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	consts := diagConstants(t)
	if len(consts) < 15 {
		t.Fatalf("found %d Diag constants in types.go, want at least 15", len(consts))
	}
	seen := map[string]string{}
	for name, v := range consts {
		if !strings.Contains(string(doc), "`"+v+"`") {
			t.Errorf("%s = %q is not in docs/api.md", name, v)
		}
		if other, ok := seen[v]; ok {
			t.Errorf("%s and %s are both %q", name, other, v)
		}
		seen[v] = name
	}
}
