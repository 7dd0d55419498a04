package layering

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// wireLiterals are member and block names of the providers' wire formats
// that only wire/ spells (docs/design.md §1 "Why the wire packages"): code
// elsewhere that reads or writes them holds wire knowledge, which a
// provider's change would then have to find outside the wire packages.
var wireLiterals = []string{"cache_control", "tool_use", "stream_options", "context_management"}

// wireLiteralsIn returns the wire literals f spells: a string literal
// that is one of wireLiterals, holds one as a JSON member name (`"tool_use"`
// in a byte pattern), or is a struct tag naming one as its JSON key. A
// sentence that names one (a log message, a quoted provider error) is
// not a literal of the wire.
func wireLiteralsIn(f *ast.File) []string {
	tags := map[*ast.BasicLit]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if fl, ok := n.(*ast.Field); ok && fl.Tag != nil {
			tags[fl.Tag] = true
		}
		return true
	})
	var found []string
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		s, err := strconv.Unquote(lit.Value)
		if err != nil {
			return true
		}
		for _, w := range wireLiterals {
			hit := s == w || strings.Contains(s, `"`+w+`"`)
			if tags[lit] {
				name, _, _ := strings.Cut(reflect.StructTag(s).Get("json"), ",")
				hit = name == w
			}
			if hit {
				found = append(found, w)
			}
		}
		return true
	})
	return found
}

// TestWireLiteralsStayInWire: no production file outside wire/ spells a
// wire literal. Test files and the test helpers (layer testSupport, which
// TestLayering keeps out of every production package: the fake providers
// must speak the wire) are not production code.
func TestWireLiteralsStayInWire(t *testing.T) {
	fset := token.NewFileSet()
	files := 0
	eachProductionFile(t, func(pkg, name, p string) error {
		if pkg == "wire" || strings.HasPrefix(pkg, "wire/") || layers[pkg] == testSupport {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		files++
		for _, w := range wireLiteralsIn(f) {
			t.Errorf("%s spells the wire literal %q: move what reads or writes it into its wire/ package (docs/design.md §1)", filepath.ToSlash(filepath.Join(pkg, name)), w)
		}
		return nil
	})
	if files < 100 {
		t.Fatalf("checked %d files: wrong directory?", files)
	}
}

// TestWireLiteralsInFindsEachForm: the check finds a wire literal as a
// string, as a JSON member name in a pattern and as a struct tag's JSON
// key, and passes a sentence that names one and a tag of another key.
func TestWireLiteralsInFindsEachForm(t *testing.T) {
	cases := []struct {
		name, src string
		want      int
	}{
		{"string", `package p; func f() string { return "tool_use" }`, 1},
		{"member", "package p; var k = []byte(`,\"cache_control\":`)", 1},
		{"tag", "package p; type T struct { C []byte `json:\"context_management,omitempty\"` }", 1},
		{"tag of another key", "package p; type T struct { C []byte `json:\"management\"` }", 0},
		{"sentence", `package p; const m = "the request's stream_options is not one ctxd can extend"`, 0},
		{"backquoted in a sentence", "package p; const m = \"`tool_use` ids must be unique\"", 0},
		{"comment", "package p\n// a \"cache_control\" member\nvar x = 1", 0},
	}
	for _, c := range cases {
		f, err := parser.ParseFile(token.NewFileSet(), c.name+".go", c.src, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if got := wireLiteralsIn(f); len(got) != c.want {
			t.Errorf("%s: found %v, want %d", c.name, got, c.want)
		}
	}
}
