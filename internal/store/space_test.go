package store

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// TestSpaceGuard: a write that would leave less than the reserve is refused
// with a *SpaceError naming the directory, deletions always pass, and Open
// refuses to start below the reserve.
func TestSpaceGuard(t *testing.T) {
	dir := t.TempDir()
	free := uint64(10 << 20)
	sp := NewSpace(dir, 4<<20, func(string) (uint64, error) { return free, nil })
	db, err := Open(filepath.Join(dir, "db"), Options{Space: sp})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c := NewCommitter(db)
	defer c.Close()
	ctx := context.Background()

	if err := c.Commit(ctx, []Write{{Key: []byte("k"), Value: make([]byte, 1<<20)}}); err != nil {
		t.Fatalf("1 MiB with 6 MiB above the reserve: %v", err)
	}
	err = c.Commit(ctx, []Write{{Key: []byte("k2"), Value: make([]byte, 7<<20)}})
	var se *SpaceError
	if !errors.Is(err, ErrNoSpace) || !errors.As(err, &se) || se.Dir != dir || !strings.Contains(err.Error(), "storage.min_free_bytes") {
		t.Fatalf("7 MiB with 6 MiB above the reserve: %v, want a SpaceError", err)
	}
	if _, low, _ := sp.State(); !low {
		t.Error("State after a refused write: not low")
	}
	free = 1 << 20
	if err := c.Commit(ctx, []Write{{Key: []byte("k3"), Value: []byte("x")}}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("a small write below the reserve: %v", err)
	}
	if err := c.Commit(ctx, []Write{{Key: []byte("k"), Delete: true}}); err != nil {
		t.Fatalf("a deletion below the reserve: %v", err)
	}
	if _, err := Open(filepath.Join(dir, "db2"), Options{Space: sp}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Open below the reserve: %v", err)
	}
	var nilSpace *Space
	if err := nilSpace.Check(1 << 40); err != nil {
		t.Fatalf("nil guard: %v", err)
	}
}

func TestFreeBytesMissingDir(t *testing.T) {
	dir := t.TempDir()
	a, err := FreeBytes(filepath.Join(dir, "not", "yet"))
	if err != nil || a == 0 {
		t.Fatalf("FreeBytes of a directory to be created: %d, %v", a, err)
	}
}
