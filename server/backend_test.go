package server

import (
	"bytes"
	"os"
	"testing"

	"github.com/ctxd/ctxd/artifacts"
	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/natsstore/natstest"
)

// testBackend is the store the server suite runs on: "" (badger) or
// "nats" (CTXD_TEST_BACKEND=nats: an in-process 3-server JetStream
// cluster, one per test binary, R1 streams under a prefix per fixture;
// docs/design.md §9). .ci/run runs the suite on both.
var testBackend = os.Getenv("CTXD_TEST_BACKEND")

func TestMain(m *testing.M) { natstest.Main(m) }

// openNATS returns a NATS log and artifact store under a prefix of their
// own, and what closes and removes them.
func openNATS(t testing.TB) (checkpoint.Log, artifacts.Backend, []func()) {
	t.Helper()
	f := natstest.OpenFixture(t, "", bytes.Repeat([]byte{7}, artifacts.SecretSize), quietLogger())
	return f.Store.Log(), f.Artifacts, f.Close
}
