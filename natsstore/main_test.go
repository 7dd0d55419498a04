package natsstore_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/ctxd/ctxd/natsstore"
	"github.com/ctxd/ctxd/natsstore/natstest"
)

func TestMain(m *testing.M) { natstest.Main(m) }

var prefixes atomic.Int64

// open connects a Store to the shared 3-server cluster with a prefix of
// its own (R3 unless replicas says otherwise) and closes it after the test.
func open(t testing.TB, replicas int, edit ...func(*natsstore.Options)) *natsstore.Store {
	t.Helper()
	c, err := natstest.Shared()
	if err != nil {
		t.Fatal(err)
	}
	return openOn(t, c, fmt.Sprintf("t%d", prefixes.Add(1)), replicas, edit...)
}

func openOn(t testing.TB, c *natstest.Cluster, prefix string, replicas int, edit ...func(*natsstore.Options)) *natsstore.Store {
	t.Helper()
	o := natsstore.Options{Servers: c.URLs(), Replicas: replicas, Prefix: prefix}
	for _, f := range edit {
		f(&o)
	}
	st, err := natstest.OpenStore(c, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func sharedCluster(t testing.TB) *natstest.Cluster {
	t.Helper()
	c, err := natstest.Shared()
	if err != nil {
		t.Fatal(err)
	}
	return c
}
