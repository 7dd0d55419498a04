package engine

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestDiagnosticEventsUseTheAPIVocabulary: the diagnostic events the engine
// writes take their level and code from api's constants (api.DiagLevel*,
// api.Diag*), never a string literal of their own ("warning" and "warn"
// once differed between the events and the API).
func TestDiagnosticEventsUseTheAPIVocabulary(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	found := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			kv, ok := n.(*ast.KeyValueExpr)
			if !ok {
				return true
			}
			key, ok := kv.Key.(*ast.BasicLit)
			if !ok || (key.Value != `"level"` && key.Value != `"code"`) {
				return true
			}
			found++
			if lit, ok := kv.Value.(*ast.BasicLit); ok {
				t.Errorf("%s: diagnostic %s is the literal %s: use api's constant", fset.Position(kv.Pos()), key.Value, lit.Value)
			}
			return true
		})
	}
	if found < 10 {
		t.Fatalf("found %d level and code fields: wrong directory?", found)
	}
}
