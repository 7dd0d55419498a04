package server

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxd/ctxd/artifacts"
	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/natsstore"
	"github.com/ctxd/ctxd/natsstore/natstest"
)

// testBackend is the store the server suite runs on: "" (badger) or
// "nats" (CTXD_TEST_BACKEND=nats: an in-process 3-server JetStream
// cluster, one per test binary, R1 streams under a prefix per fixture;
// DESIGN.md §9). .ci/run runs the suite on both.
var testBackend = os.Getenv("CTXD_TEST_BACKEND")

func TestMain(m *testing.M) {
	code := m.Run()
	natstest.StopShared()
	os.Exit(code)
}

var fixtureN atomic.Int64

// openNATS returns a NATS log and artifact store under a prefix of their
// own, and what closes and removes them.
func openNATS(t testing.TB) (checkpoint.Log, artifacts.Backend, []func()) {
	t.Helper()
	c, err := natstest.Shared()
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("f%d", fixtureN.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := natsstore.Open(ctx, natsstore.Options{Servers: c.URLs(), Prefix: prefix, Replicas: 1, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	arts, err := st.Artifacts(bytes.Repeat([]byte{7}, artifacts.SecretSize))
	if err != nil {
		t.Fatal(err)
	}
	return st.Log(), arts, []func(){
		func() { _ = st.Close() },
		func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = natsstore.Remove(ctx, c.URLs(), prefix)
		},
	}
}
