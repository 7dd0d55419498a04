package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxd/ctxd/natsstore"
	"github.com/ctxd/ctxd/natsstore/natstest"
)

// testBackend is the store the engine suites run on: "" (badger) or
// "nats" (CTXD_TEST_BACKEND=nats: an in-process 3-server JetStream
// cluster, one per test binary, R1 streams under a prefix per harness;
// DESIGN.md §9). .ci/run runs the suite on both.
var testBackend = os.Getenv("CTXD_TEST_BACKEND")

func TestMain(m *testing.M) {
	code := m.Run()
	natstest.StopShared()
	os.Exit(code)
}

var harnessN atomic.Int64

// openNATS gives h a NATS store: a harness over the same dir (a restart)
// gets the same prefix, hence the same sessions.
func (h *harness) openNATS(dir string) {
	t := h.t
	c, err := natstest.Shared()
	if err != nil {
		t.Fatal(err)
	}
	var prefix string
	if dir != "" {
		sum := sha256.Sum256([]byte(dir))
		prefix = "d" + hex.EncodeToString(sum[:6])
	} else {
		prefix = fmt.Sprintf("h%d", harnessN.Add(1))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := natsstore.Open(ctx, natsstore.Options{Servers: c.URLs(), Prefix: prefix, Replicas: 1, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	arts, err := st.Artifacts(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	h.log, h.arts = st.Log(), arts
	h.close = append(h.close, func() { _ = st.Close() })
	if dir == "" {
		h.close = append(h.close, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = natsstore.Remove(ctx, c.URLs(), prefix)
		})
	}
}
