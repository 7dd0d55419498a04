package natstest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxd/ctxd/natsstore"
)

func TestScale(t *testing.T) {
	t.Setenv("CTXD_TEST_TIMEOUT_SCALE", "3.5")
	if got := Scale(2 * time.Second); got != 7*time.Second {
		t.Errorf("scale 3.5: %v, want 7s", got)
	}
	want := time.Second
	if raceEnabled {
		want = 2 * time.Second
	}
	for _, v := range []string{"", "0", "-1", "fast"} {
		t.Setenv("CTXD_TEST_TIMEOUT_SCALE", v)
		if got := Scale(time.Second); got != want {
			t.Errorf("CTXD_TEST_TIMEOUT_SCALE=%q: %v, want %v (the default)", v, got, want)
		}
	}
}

func TestStartupErr(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("create stream X_EVENTS: %w", context.DeadlineExceeded), true},
		{nats.ErrTimeout, true},
		{fmt.Errorf("create: %w", nats.ErrNoResponders), true},
		{jetstream.ErrJetStreamNotEnabled, true},
		{fmt.Errorf("create: %w", &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}), true},
		{&jetstream.APIError{Code: 500, ErrorCode: 10009, Description: "JetStream cluster can not handle request"}, true},
		{errors.New("stream X_EVENTS: no leader"), true},
		{fmt.Errorf("%w: prefix", natsstore.ErrInvalidOptions), false},
		{&jetstream.APIError{Code: 400, ErrorCode: 10058, Description: "stream name already in use with a different configuration"}, false},
		{fmt.Errorf("create stream F40_EVENTS: %w", &jetstream.APIError{Code: 500, ErrorCode: 10049, Description: "error creating store for stream"}), true},
		{&jetstream.APIError{Code: 500, ErrorCode: 10049, Description: "subjects overlap with an existing stream"}, false},
		{context.Canceled, false},
	} {
		if got := startupErr(c.err); got != c.want {
			t.Errorf("startupErr(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestOpenStore: a store opened on a fresh one-server cluster has a
// leader on every stream; asking for more replicas than servers (R3 on
// one, R5 on three: JetStream's answer to the latter is of a start-up
// class) fails at once rather than after the retry deadline; a bad prefix
// fails at once.
func TestOpenStore(t *testing.T) {
	c, err := Start(t.TempDir(), 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	st, err := OpenStore(c, natsstore.Options{Prefix: "open"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), Scale(10*time.Second))
	defer cancel()
	if err := waitLeaders(ctx, st, "open"); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStore(c, natsstore.Options{Prefix: "three", Replicas: 3}); err == nil || strings.Contains(err.Error(), "still failing") {
		t.Fatalf("R3 on one server: %v, want natsstore.Open's error without retries", err)
	}
	c3, err := Start(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c3.Shutdown)
	if _, err := OpenStore(c3, natsstore.Options{Prefix: "five", Replicas: 5}); err == nil || !startupErr(err) || strings.Contains(err.Error(), "still failing") {
		t.Fatalf("R5 on three servers: %v, want natsstore.Open's start-up class error without retries", err)
	}
	if _, err := OpenStore(c, natsstore.Options{Prefix: "bad.prefix"}); !errors.Is(err, natsstore.ErrInvalidOptions) {
		t.Fatalf("bad prefix: %v", err)
	}
}

// TestWarningsKeepTheServersLastWarnings: a cluster's servers log nowhere,
// but their warnings are kept for a failing test to print: a stream
// created with subjects another one holds is refused, and the refusal
// shows among the warnings, named by server; at most warnLines are kept.
func TestWarningsKeepTheServersLastWarnings(t *testing.T) {
	c, err := Start(t.TempDir(), 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	if _, ok := c.Index(c.opts[0].ServerName); !ok {
		t.Fatalf("Index does not find server 0 by its name %q", c.opts[0].ServerName)
	}
	if _, ok := c.Index("ctxd-test-0"); ok {
		t.Fatal("Index found a name of no server")
	}
	before := len(c.Warnings())
	for i := range warnLines + 5 {
		c.log.add(fmt.Sprintf("server 0: line %d", i))
	}
	w := c.Warnings()
	if len(w) != warnLines || w[len(w)-1] != fmt.Sprintf("server 0: line %d", warnLines+4) {
		t.Fatalf("kept %d lines (had %d), last %q", len(w), before, w[len(w)-1])
	}
	// A real server warning reaches the log through the server's logger.
	c.servers[0].Warnf("stream %s refused", "X_EVENTS")
	w = c.Warnings()
	if last := w[len(w)-1]; last != "server 0: stream X_EVENTS refused" {
		t.Fatalf("last warning %q", last)
	}
}
