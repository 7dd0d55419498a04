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
	return openOn(t, c, newPrefix("t"), replicas, edit...)
}

// newPrefix returns name with a number no other call in this test binary
// gets: tests that open several nodes on one prefix of the shared cluster
// take a new one on every run (-count=N runs each test N times on the
// same cluster, and a prefix reused would find the last run's sessions).
func newPrefix(name string) string { return fmt.Sprintf("%s%d", name, prefixes.Add(1)) }

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
