package config

import (
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestModelCatalogDoc: docs/config.md's model table lists exactly the
// built-in catalog, each model with the catalog's figures.
func TestModelCatalogDoc(t *testing.T) {
	b, err := os.ReadFile("../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "<!-- model-catalog:begin -->")
	table, _, ok2 := strings.Cut(table, "<!-- model-catalog:end -->")
	if !ok || !ok2 {
		t.Fatal("docs/config.md has no <!-- model-catalog:begin/end --> table")
	}
	yesNo := func(v bool) string {
		if v {
			return "yes"
		}
		return "no"
	}
	row := regexp.MustCompile("(?m)^\\| `([^`]+)` \\| (.*) \\|$")
	catalog := Catalog()
	seen := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(table, -1) {
		id := m[1]
		seen[id] = true
		e, ok := catalog[id]
		if !ok {
			t.Errorf("docs/config.md lists %s, which the catalog lacks", id)
			continue
		}
		want := fmt.Sprintf("%d | %s | %s | %s | %s", e.ContextLimit, yesNo(e.ThinkingBinding), yesNo(e.ServerContextEditing),
			yesNo(e.ServerCompaction), strconv.FormatFloat(e.TokenFactor, 'g', -1, 64))
		if m[2] != want {
			t.Errorf("docs/config.md row of %s: %q, the catalog: %q", id, m[2], want)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(catalog)) {
		if !seen[id] {
			t.Errorf("the catalog has %s, which docs/config.md does not list", id)
		}
	}
}
