// Package corpustest locates the shared corpus of real agent transcripts and
// provider error bodies for tests and benchmarks. The corpus lives outside the
// repository, at ../shared/corpus relative to the repository root, or wherever
// CTXD_CORPUS points. Where it is absent a test skips with a message, except
// under CI=true, where it fails: CI must always run on real input.
package corpustest

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// Dir returns the corpus directory. When it is absent, Dir skips tb, or fails
// it when the environment variable CI is "true".
func Dir(tb testing.TB) string {
	tb.Helper()
	dir := os.Getenv("CTXD_CORPUS")
	if dir == "" {
		dir = filepath.Join(repoRoot(), "..", "shared", "corpus")
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		msg := "corpus not found at " + dir + " (set CTXD_CORPUS)"
		if os.Getenv("CI") == "true" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	return dir
}

// Path returns the path of one corpus file, relative to the corpus directory
// (for example "pi/454tools-2compactions.jsonl"). It skips or fails tb as Dir
// does, and also when that file is missing.
func Path(tb testing.TB, rel string) string {
	tb.Helper()
	p := filepath.Join(Dir(tb), filepath.FromSlash(rel))
	if _, err := os.Stat(p); err != nil {
		msg := "corpus file missing: " + p
		if os.Getenv("CI") == "true" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	return p
}

// Read returns the bytes of one corpus file, with the skip rule of Path.
func Read(tb testing.TB, rel string) []byte {
	tb.Helper()
	b, err := os.ReadFile(Path(tb, rel))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// repoRoot is the module root: two directories above this source file.
func repoRoot() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "."
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}
