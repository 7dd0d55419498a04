package engine

import (
	"os"
	"testing"

	"github.com/ctxd/ctxd/natsstore/natstest"
)

// testBackend is the store the engine suites run on: "" (badger) or
// "nats" (CTXD_TEST_BACKEND=nats: an in-process 3-server JetStream
// cluster, one per test binary, R1 streams under a prefix per harness;
// docs/design.md §9). .ci/run runs the suite on both.
var testBackend = os.Getenv("CTXD_TEST_BACKEND")

func TestMain(m *testing.M) { natstest.Main(m) }

// openNATS gives h a NATS store: a harness over the same dir (a restart)
// gets the same prefix, hence the same sessions.
func (h *harness) openNATS(dir string) {
	f := natstest.OpenFixture(h.t, dir, testSecret, quietLogger())
	h.log, h.arts = f.Store.Log(), f.Artifacts
	h.close = append(h.close, f.Close...)
}
