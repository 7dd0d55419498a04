package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/natsstore/natstest"
)

// TestStatusAndDoctorShowNATS (docs/decisions.md "Status, doctor and a
// NATS outage"), on a real daemon of a
// one-server NATS fleet (the configuration refuses credentials in a server
// URL; natsstore's TestOutageIsUnavailableAndLoggedOnce shows they are cut
// from errors, logs and status all the same):
//   - ctxctl status and doctor show the backend, the servers without the
//     credentials, the connection state and the stream and bucket names;
//   - with the server stopped, a request is answered 503 unavailable naming
//     the storage backend ("storage: nats: no servers available"), not a
//     time limit; status says the connection is down and doctor exits 1;
//   - the daemon logs the outage once however many requests it refuses.
func TestStatusAndDoctorShowNATS(t *testing.T) {
	c, err := natstest.Start(t.TempDir(), 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	plain := c.URLs()[0]
	d := startDaemonConfig(t, fmt.Sprintf("[storage]\nbackend = \"nats\"\n[storage.nats]\nservers = [%q]\nreplicas = 1\n", plain))
	ctx := context.Background()
	if _, err := d.client.CreateSession(ctx, api.CreateSessionRequest{ID: "s1", Model: "claude-sonnet-4-5"}); err != nil {
		t.Fatal(err)
	}

	code, stdout, stderr := d.run(t, "status")
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, stderr)
	}
	want := "storage:   nats, connected to " + plain + "; servers " + plain + "; streams CTXD_EVENTS, CTXD_JOBS; buckets CTXD_META (key-value), CTXD_ARTIFACTS (objects); R1"
	if !strings.Contains(stdout, want+"\n") {
		t.Errorf("status lacks %q:\n%s", want, stdout)
	}
	code, stdout, stderr = d.run(t, "status", "--json")
	var st api.Status
	if code != 0 || json.Unmarshal([]byte(stdout), &st) != nil || st.Storage == nil || st.Storage.NATS == nil {
		t.Fatalf("status --json: exit %d %s %s", code, stdout, stderr)
	}
	if n := st.Storage.NATS; st.Storage.Backend != api.StorageNATS || n.State != "connected" || n.MetaBucket != "CTXD_META" || n.Replicas != 1 {
		t.Errorf("status --json storage: %+v", n)
	}
	// The fleet's compaction queue, as the cluster has it, instead of the
	// local pool's unused bound.
	if j := st.Storage.NATS.Jobs; j == nil || j.AckWaitMS != 30000 || j.Queued != 0 || j.Held != 0 || st.Queue.Capacity != 0 {
		t.Errorf("status --json: fleet jobs %+v, queue %+v", j, st.Queue)
	}
	if _, out, _ := d.run(t, "status"); !strings.Contains(out, "queue:     fleet: 0 waiting, 0 held by nodes, ") || !strings.Contains(out, "a dead node's job moves after 30s without its progress signal\n") {
		t.Errorf("status lacks the fleet's queue:\n%s", out)
	}
	code, stdout, _ = d.run(t, "doctor")
	if code != 0 || !strings.Contains(stdout, "  storage: nats, connected to "+plain) {
		t.Errorf("doctor: exit %d:\n%s", code, stdout)
	}

	c.Kill(0)
	// The daemon notices at once (the connection is reset); a loaded
	// machine may take a moment.
	deadline := time.Now().Add(time.Minute)
	for {
		s, err := d.client.Status(ctx)
		if err != nil {
			t.Fatalf("status during the outage: %v", err)
		}
		if s.Storage.NATS.State != "connected" {
			if s.Sessions != -1 {
				t.Errorf("sessions during the outage: %d, want -1 (unknown)", s.Sessions)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the daemon still reports a connection a minute after the server stopped")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := range 4 {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		_, err := d.client.AppendMessages(rctx, "s1", api.AppendMessagesRequest{Messages: []api.Message{{Role: api.RoleUser, Content: []api.Block{{Type: api.BlockText, Text: "hi"}}}}})
		cancel()
		ae, ok := errors.AsType[*api.Error](err)
		if !ok || ae.Code != api.Unavailable || api.HTTPStatus(ae.Code) != http.StatusServiceUnavailable {
			t.Fatalf("append %d during the outage: %v; want 503 unavailable", i, err)
		}
		if !strings.Contains(ae.Message, "storage: nats: no servers available") || !strings.Contains(ae.Message, plain) {
			t.Errorf("append %d: message %q does not name the storage backend and its servers", i, ae.Message)
		}
	}
	code, stdout, _ = d.run(t, "status")
	if code != 0 || !strings.Contains(stdout, "sessions:  unknown (the storage is unreachable)") ||
		!strings.Contains(stdout, "storage:   nats, RECONNECTING since ") || !strings.Contains(stdout, "no servers available, requests are refused (503 unavailable)") ||
		!strings.Contains(stdout, "queue:     fleet queue unknown (the cluster did not answer)") {
		t.Errorf("status during the outage: exit %d:\n%s", code, stdout)
	}
	code, stdout, _ = d.run(t, "doctor")
	if code != 1 || !strings.Contains(stdout, "  storage: nats, RECONNECTING") {
		t.Errorf("doctor during the outage: exit %d, want 1:\n%s", code, stdout)
	}
	// The connection's handler logs on its own goroutine: wait for the
	// line, then check there is only one.
	deadline = time.Now().Add(time.Minute)
	for !strings.Contains(d.logs.String(), "connection to the cluster lost") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	logs := d.logs.String()
	if n := strings.Count(logs, "connection to the cluster lost"); n != 1 {
		t.Errorf("the outage was logged %d times, want once:\n%s", n, logs)
	}
}
