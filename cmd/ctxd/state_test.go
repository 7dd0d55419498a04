package main

import (
	"context"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxd/ctxd/api"
)

// TestLastCheckSurvivesRestart: after a restart, a session still
// says why compaction did or did not fire (what ctxctl doctor prints),
// rebuilt from the log.
func TestLastCheckSurvivesRestart(t *testing.T) {
	e := newEnv(t, baseConfig)
	p := e.start(t)
	c := e.client()
	ctx := context.Background()
	if _, err := c.CreateSession(ctx, api.CreateSessionRequest{ID: "s", Model: "local", ContextLimit: 10000}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AppendMessages(ctx, "s", api.AppendMessagesRequest{Messages: []api.Message{
		userText("hello"), assistantText("hi", &api.Usage{InputTokens: 1200, OutputTokens: 30}),
	}}); err != nil {
		t.Fatal(err)
	}
	before, err := c.GetSession(ctx, "s")
	if err != nil || before.LastCheck == nil {
		t.Fatalf("before the restart: %+v, %v", before.LastCheck, err)
	}
	if code := p.signalAndWait(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d", code)
	}
	e.start(t)
	after, err := c.GetSession(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	lc := after.LastCheck
	if lc == nil {
		t.Fatal("no last check after a restart: doctor cannot say why compaction did not fire")
	}
	if lc.Fired || lc.Tokens.Value != before.LastCheck.Tokens.Value || lc.Threshold != 7000 ||
		!strings.Contains(lc.Reason, "below the threshold of 7000") || !strings.Contains(lc.Reason, "rebuilt from the log") {
		t.Errorf("last check after a restart = %+v, want the same figure below the threshold, rebuilt from the log", lc)
	}
}
