package engine

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/history"
)

// A client_state record is written with its messages, survives a restart,
// and bad input leaves nothing stored.
func TestAppendWithClientState(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, testConfig(), dir)
	h.create("s1", 200000)
	ctx := context.Background()
	if st, err := h.e.ClientState(ctx, "s1"); err != nil || st != nil {
		t.Fatalf("fresh session: %s, %v", st, err)
	}
	res, err := h.e.AppendWith(ctx, "s1", []history.Message{user("hi")}, AppendOptions{ClientState: json.RawMessage(`{"n":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Messages) != 1 {
		t.Fatalf("stored %d messages", len(res.Messages))
	}
	// State alone, no messages.
	if _, err := h.e.AppendWith(ctx, "s1", nil, AppendOptions{ClientState: json.RawMessage(`{"n":2}`)}); err != nil {
		t.Fatal(err)
	}
	before := h.e.Config()
	_, err = h.e.AppendWith(ctx, "s1", []history.Message{user("x")}, AppendOptions{ClientState: json.RawMessage(`{bad`)})
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad state: %v", err)
	}
	if len(h.events("s1", checkpoint.KindClientState)) != 2 || len(h.context("s1").Messages) != 1 {
		t.Fatal("bad input changed the log")
	}
	h.Close()
	h2 := newHarness(t, before, dir)
	st, err := h2.e.ClientState(ctx, "s1")
	if err != nil || string(st) != `{"n":2}` {
		t.Fatalf("after restart: %s, %v", st, err)
	}
}
