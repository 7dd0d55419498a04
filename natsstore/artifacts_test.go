package natsstore_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/ctxd/ctxd/artifacts"
)

// TestArtifacts: the object store keeps an artifact under its keyed id, a
// second node (its own connection) reads it, bad input is refused, and two
// nodes starting together agree on one secret.
func TestArtifacts(t *testing.T) {
	ctx := context.Background()
	prefix := newPrefix("art") // both nodes on the same prefix
	n1 := openOn(t, sharedCluster(t), prefix, 3)
	n2 := openOn(t, sharedCluster(t), prefix, 3)
	var s1, s2 []byte
	var e1, e2 error
	var wg sync.WaitGroup
	wg.Go(func() { s1, e1 = n1.Secret(ctx) })
	wg.Go(func() { s2, e2 = n2.Secret(ctx) })
	wg.Wait()
	if e1 != nil || e2 != nil || !bytes.Equal(s1, s2) || len(s1) != artifacts.SecretSize {
		t.Fatalf("secrets: %x %v / %x %v", s1, e1, s2, e2)
	}
	st1, err := n1.Artifacts(s1)
	if err != nil {
		t.Fatal(err)
	}
	st2, _ := n2.Artifacts(s2)
	big := bytes.Repeat([]byte("tool output line\n"), 50_000) // several chunks
	id, err := st1.Retain(ctx, big, artifacts.FormatText)
	if err != nil {
		t.Fatal(err)
	}
	if id2, err := st1.Retain(ctx, big, artifacts.FormatText); err != nil || id2 != id {
		t.Fatalf("second retain: %s %v", id2, err)
	}
	got, f, err := st2.Get(ctx, id)
	if err != nil || f != artifacts.FormatText || !bytes.Equal(got, big) {
		t.Fatalf("get from the other node: %d bytes %q %v", len(got), f, err)
	}
	if ok, err := st2.Has(ctx, id); !ok || err != nil {
		t.Fatalf("has: %v %v", ok, err)
	}
	missing := st1.IDOf([]byte("never stored"))
	if _, _, err := st2.Get(ctx, missing); !errors.Is(err, artifacts.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	if _, _, err := st2.Get(ctx, "zz"); !errors.Is(err, artifacts.ErrInvalidID) {
		t.Fatalf("bad id: %v", err)
	}
	if _, err := st1.Retain(ctx, []byte("{"), artifacts.FormatToolContentJSON); !errors.Is(err, artifacts.ErrInvalid) {
		t.Fatalf("bad JSON: %v", err)
	}
	// Another secret gives other ids: content stored under one key is not
	// readable as the other's.
	other, _ := n1.Artifacts(bytes.Repeat([]byte{7}, artifacts.SecretSize))
	if other.IDOf(big) == id {
		t.Fatal("ids do not depend on the secret")
	}
}
