package natsstore_test

import (
	"testing"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/checkpoint/logtest"
)

// TestLogConformance runs the checkpoint.Log suite that badger's store
// passes on the NATS log, on a 3-server cluster with R3 streams.
func TestLogConformance(t *testing.T) {
	st := open(t, 3)
	logtest.Run(t, func(t *testing.T) checkpoint.Log { return st.Log() })
}
