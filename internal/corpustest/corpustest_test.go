package corpustest

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// corpusRow is one file's row of testdata/corpus/README.md.
type corpusRow struct {
	license, source, sha256 string
}

// rowRE matches a README table row whose first cell names a file in
// backquotes: | `name` [(stored .gz)] | license | source | what | sha256 |.
var rowRE = regexp.MustCompile("^\\| `([^`]+)`[^|]*\\|([^|]*)\\|([^|]*)\\|.*\\| `([0-9a-f]{64})` \\|$")

// readmeRows returns the README's rows by file name.
func readmeRows(t *testing.T) map[string]corpusRow {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(RepoDir(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]corpusRow{}
	for _, line := range strings.Split(string(data), "\n") {
		m := rowRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		rows[m[1]] = corpusRow{license: strings.TrimSpace(m[2]), source: strings.TrimSpace(m[3]), sha256: m[4]}
	}
	return rows
}

// TestCorpusREADME: every file of the repository's corpus has a row in its
// README with a license, a source and the sha256 of its uncompressed
// bytes, which it has; every row names a file that is there.
func TestCorpusREADME(t *testing.T) {
	t.Setenv("CTXD_CORPUS", RepoDir())
	rows := readmeRows(t)
	if len(rows) == 0 {
		t.Fatal("no file rows in testdata/corpus/README.md")
	}
	listed := map[string]bool{}
	for _, name := range Files(t) {
		if name == "README.md" {
			continue
		}
		listed[name] = true
		row, ok := rows[name]
		if !ok {
			t.Errorf("%s: no row in testdata/corpus/README.md", name)
			continue
		}
		if row.license == "" || row.source == "" {
			t.Errorf("%s: the README row has no license or no source", name)
		}
		sum := sha256.Sum256(Read(t, name))
		if got := hex.EncodeToString(sum[:]); got != row.sha256 {
			t.Errorf("%s: sha256 %s, the README says %s", name, got, row.sha256)
		}
	}
	for name := range rows {
		if !listed[name] {
			t.Errorf("the README lists %s, which is not in testdata/corpus", name)
		}
	}
}

// TestCompressedFilesReadAsPlain: a file kept as NAME.gz is read, listed
// and given a path under its plain name, like a file kept plain.
func TestCompressedFilesReadAsPlain(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("CTXD_CORPUS", dir)
	want := []byte("{\"type\":\"user\"}\n")
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write(want); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "agent", "big.jsonl.gz"), gz.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "small.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := Read(t, "agent/big.jsonl"); !bytes.Equal(got, want) {
		t.Errorf("Read = %q, want %q", got, want)
	}
	p := Path(t, "agent/big.jsonl")
	if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, want) {
		t.Errorf("Path's file %s = %q, %v; want %q", p, got, err, want)
	}
	if got := Path(t, "small.json"); got != filepath.Join(dir, "small.json") {
		t.Errorf("Path of a plain file = %s, want the file itself", got)
	}
	if got, want := strings.Join(Files(t), " "), "agent/big.jsonl small.json"; got != want {
		t.Errorf("Files = %s, want %s", got, want)
	}
}

// recordingTB is a testing.TB whose Fatal and Skip record what happened
// and stop the goroutine, so a test can watch another test fail.
type recordingTB struct {
	testing.TB
	failed, skipped bool
	msg             string
}

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.failed, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recordingTB) Fatal(args ...any)                { r.Fatalf("%s", fmt.Sprint(args...)) }
func (r *recordingTB) Skipf(format string, args ...any) { r.skipped = true; runtime.Goexit() }
func (r *recordingTB) Skip(args ...any)                 { r.skipped = true; runtime.Goexit() }
func (r *recordingTB) SkipNow()                         { r.skipped = true; runtime.Goexit() }

// TestMissingFileFails: a file in neither form, or a corpus directory that
// is not there, fails the test that asked for it, naming it, and never
// skips it: the corpus is part of the repository.
func TestMissingFileFails(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, corpus, want string
		call               func(tb testing.TB)
	}{
		{"Read", dir, "nope.jsonl", func(tb testing.TB) { Read(tb, "nope.jsonl") }},
		{"Path", dir, "nope.jsonl", func(tb testing.TB) { Path(tb, "nope.jsonl") }},
		{"no corpus", filepath.Join(dir, "absent"), "absent", func(tb testing.TB) { Files(tb) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CTXD_CORPUS", tc.corpus)
			r := &recordingTB{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				tc.call(r)
			}()
			<-done
			if r.skipped || !r.failed {
				t.Fatalf("skipped %v, failed %v: want a failure", r.skipped, r.failed)
			}
			if !strings.Contains(r.msg, tc.want) || strings.Contains(r.msg, tc.want+".gz") {
				t.Errorf("message %q does not name %s", r.msg, tc.want)
			}
		})
	}
}
