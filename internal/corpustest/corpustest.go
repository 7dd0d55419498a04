// Package corpustest gives tests and benchmarks the corpus of real agent
// transcripts and provider error bodies. The corpus is part of the
// repository, under testdata/corpus (its README.md names each file's source
// and license), so a plain clone runs every test that reads it; the
// environment variable CTXD_CORPUS points the tests at another copy of the
// same files instead. A file missing from the corpus fails the test: it is
// never a reason to skip.
//
// Files over 2 MB are kept gzip-compressed as NAME.gz (docs/decisions.md,
// "Test data"); every function here takes the uncompressed name and
// decompresses where needed, so a test never knows which files are
// compressed.
package corpustest

import (
	"bytes"
	"compress/gzip"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// gzSuffix marks a corpus file stored gzip-compressed.
const gzSuffix = ".gz"

// Dir returns the corpus directory: $CTXD_CORPUS when set, else the
// repository's testdata/corpus. It fails tb when that is not a directory.
func Dir(tb testing.TB) string {
	tb.Helper()
	dir := os.Getenv("CTXD_CORPUS")
	if dir == "" {
		dir = RepoDir()
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		tb.Fatalf("corpus not found at %s (testdata/corpus is part of the repository; CTXD_CORPUS overrides it)", dir)
	}
	return dir
}

// RepoDir returns the path of the repository's own copy of the corpus
// (testdata/corpus under the module root), whatever CTXD_CORPUS says.
func RepoDir() string {
	return filepath.Join(repoRoot(), "testdata", "corpus")
}

// Path returns the path of one corpus file given its name relative to the
// corpus directory (for example "pi/454tools-2compactions.jsonl"). A file
// kept compressed is decompressed into a temporary file that lives as long
// as tb. It fails tb when the file is in neither form.
func Path(tb testing.TB, rel string) string {
	tb.Helper()
	p := filepath.Join(Dir(tb), filepath.FromSlash(rel))
	if _, err := os.Stat(p); err == nil {
		return p
	}
	data := Read(tb, rel)
	out := filepath.Join(tb.TempDir(), filepath.Base(p))
	if err := os.WriteFile(out, data, 0o600); err != nil {
		tb.Fatalf("corpus file %s: %v", rel, err)
	}
	return out
}

// Read returns the bytes of one corpus file (uncompressed), named as for
// Path. It fails tb when the file is in neither form or does not
// decompress.
func Read(tb testing.TB, rel string) []byte {
	tb.Helper()
	data, err := readFile(Dir(tb), rel)
	if err != nil {
		tb.Fatalf("corpus file %s: %v", rel, err)
	}
	return data
}

// Files returns the name of every file of the corpus (README.md included),
// relative to the corpus directory with forward slashes and without the
// compression suffix, sorted: each is a name Read accepts. It fails tb when
// the directory cannot be walked or holds no file.
func Files(tb testing.TB) []string {
	tb.Helper()
	dir := Dir(tb)
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		names = append(names, strings.TrimSuffix(filepath.ToSlash(rel), gzSuffix))
		return nil
	})
	if err != nil {
		tb.Fatalf("corpus %s: %v", dir, err)
	}
	if len(names) == 0 {
		tb.Fatalf("corpus %s holds no file", dir)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// readFile reads rel under dir, or rel.gz decompressed when rel is absent.
func readFile(dir, rel string) ([]byte, error) {
	p := filepath.Join(dir, filepath.FromSlash(rel))
	data, err := os.ReadFile(p)
	if err == nil || !os.IsNotExist(err) {
		return data, err
	}
	gz, gzErr := os.ReadFile(p + gzSuffix)
	if gzErr != nil {
		if os.IsNotExist(gzErr) {
			return nil, err // name the file the test asked for
		}
		return nil, gzErr
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(zr)
}

// repoRoot is the module root: two directories above this source file.
func repoRoot() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "."
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}
