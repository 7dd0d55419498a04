package layering

import (
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// module is the module path of the repository.
const module = "github.com/ctxd/ctxd/"

// root is the repository root, two directories above this package.
var root = filepath.Join("..", "..")

// Layers of docs/design.md §1, lowest first: a package may import only
// packages of a lower layer (it may skip layers, never import its own
// layer or one above). Layer 0 imports no package of ctxd.
const (
	layerBase         = iota // api, wire/sse and the leaf helpers: import no package of ctxd
	layerModel               // history, config: the message model and the configuration; badger
	layerWireBase            // what the wire APIs share: the dialect interface, matching
	layerWireProvider        // what one provider's APIs share (wire/openai), on the wire base
	layerWire                // one package per provider wire API
	layerStores              // the append-only log, artifacts, the worker pool
	layerRules               // compaction's rules and parts, importers, the fleet backend
	layerEngine              // a session's life
	layerServices            // the daemon API, the proxy, the dashboard, in-process replay
	layerCommands            // cmd/…
	testSupport              // test helpers: only tests and other test helpers import them
)

// layers places every package of the module (its path below the module).
// A new package fails TestLayering until it is placed here.
var layers = map[string]int{
	"api":               layerBase,
	"internal/rawjson":  layerBase,
	"wire/sse":          layerBase,
	"wire/overflow":     layerBase,
	"internal/bearer":   layerBase,
	"internal/bodybuf":  layerBase,
	"internal/netlimit": layerBase,
	"internal/peeruid":  layerBase,
	"internal/redact":   layerBase,
	"internal/syncbuf":  layerBase,

	"history":        layerModel,
	"config":         layerModel,
	"internal/store": layerModel, // its errors carry api codes

	"wire":        layerWireBase,
	"wire/openai": layerWireProvider, // what Chat and Responses share; reads wire's plain-text form

	"wire/anthropic":        layerWire,
	"wire/openai/chat":      layerWire,
	"wire/openai/responses": layerWire,

	"artifacts":  layerStores,
	"checkpoint": layerStores,
	"workers":    layerStores,

	"trigger":     layerRules,
	"contextedit": layerRules,
	"offload":     layerRules,
	"recall":      layerRules,
	"ledger":      layerRules,
	"summarizer":  layerRules,
	"transcript":  layerRules,
	"natsstore":   layerRules,
	"identity":    layerRules, // who a proxied request is, which conversation
	"quota":       layerRules, // [proxy.quotas]: counts by credential hash
	"clientcred":  layerRules, // the clients' credentials held in memory, those accepted

	"engine":            layerEngine,
	"internal/accuracy": layerEngine, // beside the engine: replay's estimate figures

	"server":    layerServices,
	"proxy":     layerServices,
	"ui":        layerServices,
	"replay":    layerServices,
	"mcpserver": layerServices,

	"cmd/ctxd":     layerCommands,
	"cmd/ctxctl":   layerCommands,
	"cmd/ctxbench": layerCommands,

	"checkpoint/logtest":    testSupport,
	"natsstore/natstest":    testSupport,
	"internal/agenttest":    testSupport,
	"internal/corpustest":   testSupport,
	"internal/doccheck":     testSupport,
	"internal/facttest":     testSupport,
	"internal/fakeprovider": testSupport,
	// serve runs the fake by hand, for trying agents through ctxd offline.
	"internal/fakeprovider/serve": testSupport,
	"internal/layering":           testSupport,
	"internal/strict":             testSupport,
	"internal/wirereplay":         testSupport,
}

// onlyImportedBy lists packages that only the named packages may import
// (docs/design.md §1): the fleet backend is chosen by the daemon alone.
var onlyImportedBy = map[string][]string{
	"natsstore": {"cmd/ctxd", "natsstore/natstest"},
}

// eachProductionFile calls f with each non-test Go file of the module: its
// package directory (relative to root, slash-separated), its name and its
// path. Hidden, underscore, testdata and bin directories are skipped.
func eachProductionFile(t *testing.T, f func(pkg, name, path string) error) {
	t.Helper()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		return f(filepath.ToSlash(rel), name, p)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// imports returns, per package directory of the module (relative to root,
// slash-separated), the module's packages its non-test files import.
func imports(t *testing.T) map[string]map[string]bool {
	t.Helper()
	out := map[string]map[string]bool{}
	fset := token.NewFileSet()
	eachProductionFile(t, func(pkg, _, p string) error {
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		if out[pkg] == nil {
			out[pkg] = map[string]bool{}
		}
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return err
			}
			if dep, ok := strings.CutPrefix(path, module); ok {
				out[pkg][dep] = true
			}
		}
		return nil
	})
	return out
}

// TestLayering holds the layering of docs/design.md §1 for every package:
// each is placed in a layer, imports only packages of lower layers, never
// a test helper, and the packages of onlyImportedBy only from where they
// may be.
func TestLayering(t *testing.T) {
	graph := imports(t)
	if len(graph) < 20 || graph["engine"] == nil {
		t.Fatalf("found %d packages: wrong directory?", len(graph))
	}
	for _, pkg := range slices.Sorted(maps.Keys(graph)) {
		if pkg == "." {
			continue
		}
		own, ok := layers[pkg]
		if !ok {
			t.Errorf("package %s has no layer: place it in internal/layering's table (docs/design.md §1)", pkg)
			continue
		}
		for _, dep := range slices.Sorted(maps.Keys(graph[pkg])) {
			l, ok := layers[dep]
			switch {
			case !ok:
				t.Errorf("%s imports %s, which has no layer", pkg, dep)
			case l == testSupport && own != testSupport:
				t.Errorf("%s imports the test helper %s: only tests import it", pkg, dep)
			case own != testSupport && l >= own:
				t.Errorf("%s (layer %d) imports %s (layer %d): an import of the same layer or one above; move the rule down or the caller up (docs/design.md §1)", pkg, own, dep, l)
			}
			if who, ok := onlyImportedBy[dep]; ok && !slices.Contains(who, pkg) {
				t.Errorf("%s imports %s, which only %s may import", pkg, dep, strings.Join(who, ", "))
			}
		}
	}
	for pkg := range layers {
		if graph[pkg] == nil {
			t.Errorf("the layer table names %s, which has no Go files", pkg)
		}
	}
}

// TestLayeringCatchesAnUpwardImport: the rule TestLayering applies refuses
// an engine that imports the server, and a layer-0 package that imports
// anything of ctxd.
func TestLayeringCatchesAnUpwardImport(t *testing.T) {
	up := func(pkg, dep string) bool {
		own, l := layers[pkg], layers[dep]
		return own != testSupport && l >= own
	}
	for _, c := range [][2]string{{"engine", "server"}, {"api", "history"}, {"wire/anthropic", "wire/openai/chat"}, {"history", "config"}, {"summarizer", "engine"}} {
		if !up(c[0], c[1]) {
			t.Errorf("%s importing %s passes the rule", c[0], c[1])
		}
	}
	if up("engine", "checkpoint") || up("proxy", "wire/anthropic") {
		t.Error("a downward import is refused")
	}
}
