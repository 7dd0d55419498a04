package main

import (
	"context"
	"encoding/json"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxd/ctxd/api"
)

// TestOverlayBindingRemovedByReload (docs/decisions.md "A session whose binding
// was removed"): a session whose overlay names a binding that a SIGHUP removed
// used to be only deletable. It stays readable (session, context, checkpoints)
// before and after a restart, and writable (PATCH, append); a compaction uses
// the extractive fallback with a binding_missing diagnostic naming the binding,
// or, with fallback "none", fails naming it.
func TestOverlayBindingRemovedByReload(t *testing.T) {
	const withBinding = baseConfig + `
[[summarizer.bindings]]
name = "gone-soon"
provider = "extractive"
`
	e := newEnv(t, withBinding)
	p := e.start(t)
	c := e.client()
	ctx := context.Background()
	for _, s := range []struct{ id, overlay string }{
		{"fb", "[context_compaction]\nkeep_recent_tokens = 100\n[compaction]\nbinding = \"gone-soon\"\n"},
		{"none", "[context_compaction]\nkeep_recent_tokens = 100\n[compaction]\nbinding = \"gone-soon\"\nfallback = \"none\"\n"},
	} {
		if _, err := c.CreateSession(ctx, api.CreateSessionRequest{ID: s.id, Model: "gpt-4o", Config: s.overlay}); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			msgs := []api.Message{userText(strings.Repeat("question ", 50) + string(rune('a'+i))), assistantText(strings.Repeat("answer ", 50), nil)}
			if _, err := c.AppendMessages(ctx, s.id, api.AppendMessagesRequest{Messages: msgs}); err != nil {
				t.Fatal(err)
			}
		}
	}

	e.writeConfig(t, baseConfig)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitLog(t, "configuration reloaded")
	// A new session cannot name it any more.
	if _, err := c.CreateSession(ctx, api.CreateSessionRequest{ID: "new", Model: "gpt-4o", Config: "[compaction]\nbinding = \"gone-soon\"\n"}); api.ErrorCode(err) != api.Invalid {
		t.Errorf("create naming the removed binding: %v, want invalid", err)
	}

	readable := func(when string) {
		t.Helper()
		for _, id := range []string{"fb", "none"} {
			if _, err := c.GetSession(ctx, id); err != nil {
				t.Errorf("%s: show %s: %v", when, id, err)
			}
			if r, err := c.Context(ctx, id); err != nil || len(r.Messages) == 0 {
				t.Errorf("%s: context %s: %v", when, id, err)
			}
			if _, err := c.Checkpoints(ctx, id); err != nil {
				t.Errorf("%s: checkpoints %s: %v", when, id, err)
			}
		}
	}
	readable("after the reload")
	system := "be brief"
	if _, err := c.PatchSession(ctx, "fb", api.PatchSessionRequest{System: &system}); err != nil {
		t.Errorf("PATCH after the reload: %v", err)
	}
	if _, err := c.AppendMessages(ctx, "fb", api.AppendMessagesRequest{Messages: []api.Message{userText("still writable")}}); err != nil {
		t.Errorf("append after the reload: %v", err)
	}

	res, err := c.Compact(ctx, "fb", api.CompactRequest{Wait: true})
	if err != nil || res.Status != api.CompactDone || res.Checkpoint == nil || !res.Checkpoint.Fallback {
		t.Fatalf("compact fb: %+v, %v; want done by the fallback", res, err)
	}
	diag := ""
	if err := c.StreamEvents(ctx, "fb", api.EventsOptions{}, func(ev api.Event) error {
		if ev.Kind == api.EventDiagnostic && strings.Contains(string(ev.Data), "binding_missing") {
			diag = string(ev.Data)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var d struct{ Code, Binding, Message string }
	if diag == "" || json.Unmarshal([]byte(diag), &d) != nil || d.Binding != "gone-soon" || !strings.Contains(d.Message, `"gone-soon"`) {
		t.Errorf("binding_missing diagnostic: %q", diag)
	}

	_, err = c.Compact(ctx, "none", api.CompactRequest{Wait: true})
	if err == nil || !strings.Contains(err.Error(), `"gone-soon"`) || !strings.Contains(err.Error(), "no longer defines") {
		t.Errorf("compact with fallback none: %v; want an error naming the binding", err)
	}

	if code := p.signalAndWait(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	p = e.start(t)
	readable("after a restart")
	if _, err := c.Compact(ctx, "none", api.CompactRequest{Wait: true}); err == nil || !strings.Contains(err.Error(), `"gone-soon"`) {
		t.Errorf("compact with fallback none after a restart: %v", err)
	}
	if code := p.signalAndWait(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("exit code %d", code)
	}
}
