package offload

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestStagedWritesFillSpareFiles: the commit of a staged offload leaves a
// spare file for the next one, which fills it: the file holds the whole
// text under its name, mode FileMode whatever the umask, nothing else is
// in the directory (the spare has no name), and a path that exists
// already is replaced, as the temporary file's rename replaces it.
func TestStagedWritesFillSpareFiles(t *testing.T) {
	old := syscall.Umask(0o077 | 0o200) // would make a created file read-only
	defer syscall.Umask(old)
	dir := t.TempDir()
	o := New(smallCfg(), dir, newArtifacts(t), nil)
	stage := func(id, text string) string {
		t.Helper()
		_, rec, fail, p := o.Stage(bg, "s", toolMsg(id, "bash", text))
		if rec == nil || fail != nil || p == nil {
			t.Fatalf("not staged: %+v %+v", rec, fail)
		}
		if err := p.Finish(bg); err != nil {
			t.Fatal(err)
		}
		return rec.Path
	}
	first := stage("c1", strings.Repeat("first ", 100))
	if f := takeSpare(o.dir); f == nil {
		t.Fatal("no spare file after a staged offload's commit")
	} else {
		refillPut(o.dir, f)
	}
	for _, tc := range []struct{ name, id, text string }{
		{"new", "c2", strings.Repeat("second ", 100)},
		{"existing path", "c1", strings.Repeat("again ", 100)},
	} {
		path := stage(tc.id, tc.text)
		b, err := os.ReadFile(path)
		if err != nil || string(b) != tc.text {
			t.Fatalf("%s: %s holds %d bytes (%v), want the text's %d", tc.name, path, len(b), err, len(tc.text))
		}
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != FileMode {
			t.Fatalf("%s: mode %v (%v), want %v", tc.name, fi.Mode().Perm(), err, FileMode)
		}
	}
	var names []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, filepath.Base(p))
		}
		return nil
	})
	if len(names) != 2 || filepath.Base(first) != names[0] && filepath.Base(first) != names[1] {
		t.Fatalf("files in the offload directory: %v, want the two results'", names)
	}
}

// refillPut gives back a spare taken by a test.
func refillPut(dir string, f *os.File) {
	spares.mu.Lock()
	defer spares.mu.Unlock()
	spares.files = append(spares.files, spareFile{dir: dir, f: f})
}
