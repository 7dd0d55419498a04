package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/natsstore/natstest"
)

// TestFleetDaemons runs two ctxd processes as one fleet on a 3-server
// JetStream cluster ([storage] backend = "nats", R3): a session created on
// one is listed, appended to and served by the other with the same bytes;
// after one node is killed (SIGKILL) the other serves the whole session
// and goes on appending.
func TestFleetDaemons(t *testing.T) {
	c, err := natstest.Start(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	cfg := baseConfig + natsStorage(c, "daemons")
	a, b := newEnv(t, cfg), newEnv(t, cfg)
	pa := a.start(t)
	b.start(t)
	// The start line names the backend, the cluster and the prefix.
	pa.waitLog(t, "ctxd started")
	if line := pa.stderr.String(); !strings.Contains(line, "backend=nats") || !strings.Contains(line, "nats_prefix=daemons") || !strings.Contains(line, "nats_replicas=3") {
		t.Errorf("the start line does not name the fleet's backend:\n%s", line)
	}
	ca, cb := a.client(), b.client()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	if _, err := ca.CreateSession(ctx, api.CreateSessionRequest{ID: "fleet", Model: "local-model", ContextLimit: 100000, System: "You are terse."}); err != nil {
		t.Fatal(err)
	}
	list, err := cb.ListSessions(ctx)
	if err != nil || len(list) != 1 || list[0].ID != "fleet" {
		t.Fatalf("node b lists %+v, %v", list, err)
	}
	for i := range 6 {
		cl := []*api.Client{ca, cb}[i%2]
		res, err := cl.AppendMessages(ctx, "fleet", api.AppendMessagesRequest{Messages: []api.Message{userText(fmt.Sprintf("step %d", i)), assistantText(fmt.Sprintf("done %d", i), nil)}})
		if err != nil {
			t.Fatal(err)
		}
		if want := uint64(2*i + 2); res.LastSeq != want {
			t.Fatalf("append %d: last seq %d, want %d", i, res.LastSeq, want)
		}
		ra, err := ca.ContextRaw(ctx, "fleet", "anthropic")
		if err != nil {
			t.Fatal(err)
		}
		rb, err := cb.ContextRaw(ctx, "fleet", "anthropic")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ra, rb) {
			t.Fatalf("after append %d the nodes serve different bytes:\n%s\n%s", i, ra, rb)
		}
	}
	before, err := cb.ContextRaw(ctx, "fleet", "anthropic")
	if err != nil {
		t.Fatal(err)
	}
	pa.kill9(t)
	after, err := cb.ContextRaw(ctx, "fleet", "anthropic")
	if err != nil || !bytes.Equal(before, after) {
		t.Fatalf("node b after node a died: %v\n%s\n%s", err, before, after)
	}
	if res, err := cb.AppendMessages(ctx, "fleet", api.AppendMessagesRequest{Messages: []api.Message{userText("after the crash")}}); err != nil || res.LastSeq != 13 {
		t.Fatalf("append on node b after node a died: %+v %v", res, err)
	}
}

// TestFleetRefusesUnreachableCluster: a node whose cluster does not answer
// does not start, and says which configuration to look at.
func TestFleetRefusesUnreachableCluster(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	e := newEnv(t, baseConfig+fmt.Sprintf("\n[storage]\nbackend = \"nats\"\n[storage.nats]\nservers = [\"nats://%s\"]\n", addr))
	out, err := refusedOutput(t, e.command())
	if err == nil || !strings.Contains(string(out), "storage.nats") {
		t.Fatalf("ctxd with an unreachable cluster: %v\n%s", err, out)
	}
}

// TestProxyBehindBalancerMustListen: a node whose proxy is meant for a
// load balancer (proxy.auth = "frontend", a routable-capable address) does
// not start when its proxy port is taken — it would otherwise serve the
// daemon API without a proxy, and the balancer would send agents to it —
// and says which key to change; with the port free it starts, listening.
func TestProxyBehindBalancerMustListen(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg := "[workers]\nsize = 1\nqueue = 4\n[proxy]\nauth = \"frontend\"\nlisten = %q\n"
	e := newEnv(t, fmt.Sprintf(cfg, taken.Addr().String()))
	out, err := refusedOutput(t, e.command())
	if err == nil || !strings.Contains(string(out), "proxy.listen "+taken.Addr().String()) {
		t.Fatalf("ctxd with its proxy port taken: %v\n%s", err, out)
	}
	e2 := newEnv(t, fmt.Sprintf(cfg, "127.0.0.1:0"))
	e2.start(t)
	st, err := e2.client().Status(context.Background())
	if err != nil || st.Proxy == nil || st.Proxy.Listen == "" {
		t.Fatalf("status %+v %v: the proxy is not listening", st, err)
	}
}
