package doccheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// root is the repository root, two directories above this package.
var root = filepath.Join("..", "..")

// sourceFiles returns the repository's Go and Markdown files, relative to
// root, leaving out testdata (recorded agent files quote other projects).
func sourceFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") || strings.HasSuffix(name, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// designSections returns the section numbers docs/design.md has ("1",
// "4a", "5.1", "8b").
func designSections(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#{2,3} (\d+[a-z]?(?:\.\d+)?)\.? `).FindAllStringSubmatch(string(b), -1) {
		out[m[1]] = true
	}
	return out
}

// citation matches a cited design section: "docs/design.md §5.2", and within docs/design.md a bare "§8b".
var citation = regexp.MustCompile(`docs/design\.md ?§ ?(\d+[a-z]?(?:\.\d+)?)`)

// TestDesignCitationsExist: every design section the code and the
// documents cite is a section of docs/design.md, so that the citations
// can be rewritten to docs/design.md mechanically and none dangles.
func TestDesignCitationsExist(t *testing.T) {
	sections := designSections(t)
	for _, want := range []string{"1", "2", "3", "4", "4a", "5", "5.1", "5.2", "5.3", "5.4", "5.5", "5.6", "6", "7", "8", "8a", "8b", "9", "10"} {
		if !sections[want] {
			t.Errorf("docs/design.md has no section §%s", want)
		}
	}
	bare := regexp.MustCompile(`§ ?(\d+[a-z]?(?:\.\d+)?)`)
	for _, f := range sourceFiles(t) {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		re := citation
		if f == filepath.Join("docs", "design.md") {
			re = bare
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			if !sections[m[1]] {
				t.Errorf("%s cites §%s, which docs/design.md does not have", f, m[1])
			}
		}
	}
}

// TestDocumentLinksResolve: every relative link of the README and docs/
// names a file of the repository and, with a #fragment, a heading of that
// file.
func TestDocumentLinksResolve(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	files := []string{"README.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		rel, _ := filepath.Rel(root, d)
		files = append(files, rel)
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			file := f
			if path != "" {
				file = filepath.Join(filepath.Dir(f), path)
			}
			data, err := os.ReadFile(filepath.Join(root, file))
			if err != nil {
				if _, serr := os.Stat(filepath.Join(root, file)); serr == nil {
					continue // a directory
				}
				t.Errorf("%s links to %s: %v", f, target, err)
				continue
			}
			if frag != "" && !anchors(string(data))[frag] {
				t.Errorf("%s links to %s: %s has no heading with that anchor", f, target, file)
			}
		}
	}
}

// trackerTag matches what only the project's tracker can explain: an
// issue's number after the word, a tracker handle (H and two digits), or
// a finding credited to a test person. The pattern is written so that
// this file does not match it.
var trackerTag = regexp.MustCompile(`(?i:\bissues? \d+)|\bH\d{2}\b|(?i:\bte[s]ters?\b)`)

// TestNoTrackerTagsInCode: the Go files say what a comment or a test
// holds in plain words, citing docs/design.md or docs/decisions.md; a
// reader of the repository cannot follow an issue number or a tracker
// handle.
func TestNoTrackerTagsInCode(t *testing.T) {
	files := 0
	for _, f := range sourceFiles(t) {
		if !strings.HasSuffix(f, ".go") {
			continue
		}
		files++
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := trackerTag.FindString(line); m != "" {
				t.Errorf("%s:%d: %q names the tracker; say the point itself (cite docs/design.md §N or a docs/decisions.md entry)", f, i+1, m)
			}
		}
	}
	if files < 100 {
		t.Fatalf("found %d Go files under %s; the walk is wrong", files, root)
	}
}

// anchors returns the anchors GitHub gives the headings of a Markdown
// document: lower case, punctuation dropped, spaces as hyphens, "-1", "-2"
// after repeats.
func anchors(doc string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	drop := regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
	inFence := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		a := strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(title), ""), " ", "-")
		n := seen[a]
		seen[a]++
		if n > 0 {
			a += "-" + strconv.Itoa(n)
		}
		out[a] = true
	}
	return out
}
