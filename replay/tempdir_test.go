//go:build unix

package replay

import (
	"os"
	"path/filepath"
	"testing"
)

// A replay killed while it ran leaves its directory; the next replay reuses
// it (emptied), so its stubs' paths and the report stay the same, while a
// directory another replay is using is never taken.
func TestKilledReplaysDirectoryIsReused(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)

	first, lock, err := stableTempDir()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(tmp, "ctxd-replay-0"); first != want {
		t.Fatalf("first directory %s, want %s", first, want)
	}
	if err := os.WriteFile(filepath.Join(first, "left-over"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}

	// In use: the next replay takes another directory.
	busy, busyLock, err := stableTempDir()
	if err != nil {
		t.Fatal(err)
	}
	if busy == first {
		t.Fatalf("a directory in use was taken again: %s", busy)
	}
	busyLock.Close()
	os.RemoveAll(busy)

	// Killed: the process's lock is gone, its files are not.
	lock.Close()
	again, lock2, err := stableTempDir()
	if err != nil {
		t.Fatal(err)
	}
	defer lock2.Close()
	if again != first {
		t.Fatalf("after a killed replay the directory is %s, want %s reused", again, first)
	}
	if _, err := os.Stat(filepath.Join(again, "left-over")); !os.IsNotExist(err) {
		t.Fatalf("the killed replay's files were kept: %v", err)
	}
}
