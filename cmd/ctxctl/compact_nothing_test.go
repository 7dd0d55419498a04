package main

import (
	"context"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/api"
)

// `ctxctl compact` on a session with no checkpoint gives that session's
// reason (not "no message since the last checkpoint"), --json carries it,
// and repeating it neither fails nor opens the circuit.
func TestCompactNothingSaysWhy(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	if _, err := d.client.CreateSession(ctx, api.CreateSessionRequest{ID: "small", Model: "gpt-4o"}); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := d.run(t, "compact", "small")
	if code != 0 || !strings.Contains(stdout, "nothing to compact in session small: the session has no messages yet") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	msgs := []api.Message{
		{Role: api.RoleUser, Content: []api.Block{{Type: api.BlockText, Text: "hello"}}},
		{Role: api.RoleAssistant, Content: []api.Block{{Type: api.BlockText, Text: "hi"}}},
	}
	if _, err := d.client.AppendMessages(ctx, "small", api.AppendMessagesRequest{Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		code, stdout, stderr = d.run(t, "compact", "--json", "small")
		var r api.CompactResponse
		if err := jsonUnmarshal(stdout, &r); err != nil || code != 0 {
			t.Fatalf("exit %d, %v, stderr %q", code, err, stderr)
		}
		if r.Status != api.CompactNothing || !strings.Contains(r.Reason, "retention budget") {
			t.Fatalf("response %+v", r)
		}
	}
	s, err := d.client.GetSession(ctx, "small")
	if err != nil {
		t.Fatal(err)
	}
	if s.Circuit.Open || s.Circuit.Failures != 0 {
		t.Fatalf("circuit %+v after repeated nothing-to-compact", s.Circuit)
	}
}
