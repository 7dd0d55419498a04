package natsstore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/checkpoint/logtest"
	"github.com/ctxd/ctxd/natsstore"
)

// TestLogConformance runs the checkpoint.Log suite that badger's store
// passes on the NATS log, on a 3-server cluster with R3 streams.
func TestLogConformance(t *testing.T) {
	st := open(t, 3)
	logtest.Run(t, func(t *testing.T) checkpoint.Log { return st.Log() })
}

// TestIndexesAreBounded: a node that touched more sessions than it keeps
// indexes of still serves each correctly (a dropped index is rebuilt from
// the stream).
func TestIndexesAreBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 5,000 sessions")
	}
	st := open(t, 1)
	l := st.Log()
	ctx := context.Background()
	const n = 5000
	for i := range n {
		id := fmt.Sprintf("b%d", i)
		if _, err := l.CreateSession(ctx, id, checkpoint.Meta{}); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append(ctx, id, []checkpoint.Event{{Kind: checkpoint.KindDiagnostic, Data: []byte(fmt.Sprint(i))}}); err != nil {
			t.Fatal(err)
		}
	}
	if k := natsstore.Indexes(l); k > 4096 {
		t.Fatalf("%d indexes kept, bound 4096", k)
	}
	for _, i := range []int{0, 1, n / 2, n - 1} {
		id := fmt.Sprintf("b%d", i)
		if last, err := l.LastSeq(ctx, id); err != nil || last != 1 {
			t.Fatalf("%s: last %d %v", id, last, err)
		}
		if first, err := l.AppendAt(ctx, id, 1, []checkpoint.Event{{Kind: checkpoint.KindDiagnostic}}); err != nil || first != 2 {
			t.Fatalf("%s: append at 1: %d %v", id, first, err)
		}
	}
}
