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

// A name in the shared temporary directory that a replay did not make as
// it makes its own — a symbolic link to another directory, or a directory
// open to other users — is never emptied and used, whatever it holds.
func TestReplayNeverTakesADirectoryItDidNotMake(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	victim := t.TempDir()
	for _, f := range []string{"precious.txt", lockName} {
		if err := os.WriteFile(filepath.Join(victim, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(victim, filepath.Join(tmp, "ctxd-replay-0")); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(tmp, "ctxd-replay-1")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"theirs.txt", lockName} {
		if err := os.WriteFile(filepath.Join(open, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	dir, lock, err := stableTempDir()
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if want := filepath.Join(tmp, "ctxd-replay-2"); dir != want {
		t.Fatalf("replay directory %s, want %s (the link and the open directory passed over)", dir, want)
	}
	for _, f := range []string{filepath.Join(victim, "precious.txt"), filepath.Join(open, "theirs.txt")} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s was removed: %v", f, err)
		}
	}
}
