package api

import (
	"go/build"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestStandardLibraryOnly keeps api free of every non-standard import,
// ctxd's own packages included (docs/design.md §1): agents and ctxctl depend on
// it alone. Standard packages import only standard packages, so checking
// the direct imports of the non-test files covers the whole graph.
func TestStandardLibraryOnly(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			first, _, _ := strings.Cut(path, "/")
			if strings.Contains(first, ".") {
				t.Errorf("%s imports %q: api may import the standard library only", f, path)
				continue
			}
			pkg, err := build.Import(path, wd, build.FindOnly)
			if err != nil {
				t.Errorf("%s imports %q: %v", f, path, err)
				continue
			}
			if !pkg.Goroot {
				t.Errorf("%s imports %q, which is not in GOROOT", f, path)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no imports checked: wrong directory?")
	}
}
