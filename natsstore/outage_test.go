package natsstore_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/artifacts"
	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/syncbuf"
	"github.com/ctxd/ctxd/natsstore"
	"github.com/ctxd/ctxd/natsstore/natstest"
)

// waitFor polls cond for up to a minute (a loaded machine reconnects
// slowly).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestOutageIsUnavailableAndLoggedOnce (docs/decisions.md "Status, doctor
// and a NATS outage"): with every server
// of the cluster down, each operation fails at once — long before its
// generous time limit — with an error wrapping checkpoint.ErrUnavailable
// that names the backend ("storage: nats: no servers available") and the
// servers without their credentials; the outage is logged once however
// many requests it refuses, its end once; after it, operations work again.
// Status reports the connection state and the stream and bucket names
// (point 6).
func TestOutageIsUnavailableAndLoggedOnce(t *testing.T) {
	c, err := natstest.Start(t.TempDir(), 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	var logs syncbuf.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	// The configured URL carries a user and password: neither may appear
	// in an error, a log line or the status.
	withUser := strings.Replace(c.URLs()[0], "nats://", "nats://ops:hunter2@", 1)
	st := openOn(t, c, "outage", 1, func(o *natsstore.Options) {
		o.Logger = logger
		o.Servers = []string{withUser}
	})
	l := st.Log()
	ctx := context.Background()
	if _, err := l.CreateSession(ctx, "s1", checkpoint.Meta{}); err != nil {
		t.Fatal(err)
	}
	msg := []checkpoint.Event{{Kind: checkpoint.KindMessage, Message: &history.Message{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: "hi"}}}}}
	if _, err := l.Append(ctx, "s1", msg); err != nil {
		t.Fatal(err)
	}
	s := st.Status()
	if s.State != "connected" || s.ConnectedServer == "" || s.EventsStream != "OUTAGE_EVENTS" || s.JobsStream != "OUTAGE_JOBS" ||
		s.MetaBucket != "OUTAGE_META" || s.ArtifactsBucket != "OUTAGE_ARTIFACTS" || len(s.Servers) != 1 || s.Replicas != 1 {
		t.Errorf("status while connected: %+v", s)
	}
	arts, err := st.Artifacts(bytes.Repeat([]byte{1}, artifacts.SecretSize))
	if err != nil {
		t.Fatal(err)
	}
	id, err := arts.Retain(ctx, []byte("kept"), artifacts.FormatText)
	if err != nil {
		t.Fatal(err)
	}

	c.Kill(0)
	waitFor(t, "the client to notice the outage", func() bool { return st.Status().State != "connected" })
	ops := map[string]func(context.Context) error{
		"append": func(ctx context.Context) error { _, err := l.Append(ctx, "s1", msg); return err },
		"meta":   func(ctx context.Context) error { _, err := l.GetMeta(ctx, "s1"); return err },
		"create": func(ctx context.Context) error { _, err := l.CreateSession(ctx, "s2", checkpoint.Meta{}); return err },
		"range": func(ctx context.Context) error {
			return l.Range(ctx, "s1", 1, func(checkpoint.Event) error { return nil })
		},
		"list":     func(ctx context.Context) error { _, err := l.CountSessions(ctx); return err },
		"artifact": func(ctx context.Context) error { _, _, err := arts.Get(ctx, id); return err },
	}
	for round := range 3 {
		for name, op := range ops {
			// A generous limit: the answer must not be the limit running out.
			octx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			err := op(octx)
			expired := octx.Err() != nil
			cancel()
			switch {
			case err == nil:
				t.Fatalf("round %d, %s: succeeded with every server down", round, name)
			case !errors.Is(err, checkpoint.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) || expired:
				t.Fatalf("round %d, %s: %v; want checkpoint.ErrUnavailable at once, not a time limit", round, name, err)
			case !strings.Contains(err.Error(), "storage: nats: no servers available") || !strings.Contains(err.Error(), "nats://127.0.0.1:"):
				t.Errorf("round %d, %s: %q does not name the backend and its servers", round, name, err)
			case strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "ops:"):
				t.Errorf("round %d, %s: %q shows the credentials", round, name, err)
			}
		}
	}
	// The connection's handlers run on their own goroutine: wait for the
	// line, then check there is only one.
	waitFor(t, "the outage to be logged", func() bool { return strings.Count(logs.String(), "connection to the cluster lost") > 0 })
	s = st.Status()
	if s.State == "connected" || s.ConnectedServer != "" || s.DownSince.IsZero() {
		t.Errorf("status during the outage: %+v", s)
	}
	if got := strings.Count(logs.String(), "connection to the cluster lost"); got != 1 {
		t.Errorf("the outage was logged %d times, want once:\n%s", got, logs.String())
	}

	if err := c.Restart(0); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(time.Minute); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the client to reconnect", func() bool { return st.Status().State == "connected" })
	waitFor(t, "an append to work again", func() bool {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := l.Append(actx, "s1", msg)
		return err == nil
	})
	waitFor(t, "the end of the outage to be logged", func() bool { return strings.Count(logs.String(), "connection to the cluster is back") > 0 })
	if got := strings.Count(logs.String(), "connection to the cluster is back"); got != 1 {
		t.Errorf("the end of the outage was logged %d times, want once:\n%s", got, logs.String())
	}
	if strings.Contains(logs.String(), "hunter2") {
		t.Errorf("the log shows the password:\n%s", logs.String())
	}
	for _, u := range st.Status().Servers {
		if strings.Contains(u, "hunter2") || strings.Contains(u, "ops") {
			t.Errorf("status server %q shows the credentials", u)
		}
	}

	// A second outage is logged again, once.
	c.Kill(0)
	waitFor(t, "the second outage", func() bool { return st.Status().State != "connected" })
	for range 3 {
		if _, err := l.GetMeta(ctx, "s1"); !errors.Is(err, checkpoint.ErrUnavailable) {
			t.Fatalf("second outage: %v", err)
		}
	}
	waitFor(t, "the second outage to be logged", func() bool { return strings.Count(logs.String(), "connection to the cluster lost") > 1 })
	if got := strings.Count(logs.String(), "connection to the cluster lost"); got != 2 {
		t.Errorf("two outages logged %d times, want twice", got)
	}
}
