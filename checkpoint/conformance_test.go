package checkpoint_test

import (
	"testing"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/checkpoint/logtest"
	"github.com/ctxd/ctxd/internal/store"
)

// TestStoreConformance runs the checkpoint.Log suite shared with the NATS
// log (docs/design.md §9) on badger.
func TestStoreConformance(t *testing.T) {
	logtest.Run(t, func(t *testing.T) checkpoint.Log {
		db, err := store.OpenInMemory()
		if err != nil {
			t.Fatal(err)
		}
		st := checkpoint.Open(db, checkpoint.Options{})
		t.Cleanup(func() {
			st.Close()
			db.Close()
		})
		return st
	})
}
