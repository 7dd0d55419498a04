package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/summarizer"
	"github.com/ctxd/ctxd/wire/anthropic"
	"sync"
	"testing"
)

// With a bound of 4 loaded sessions, 24 sessions appended to concurrently
// keep every message in order, memory holds at most the bound plus the
// sessions in use, and a reloaded session assembles the same context.
func TestEvictionLosesNothing(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	h.e.opts.MaxLoadedSessions = 4
	const sessions, rounds = 24, 30
	for i := range sessions {
		h.create(fmt.Sprintf("s%d", i), 200000)
	}
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	for i := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("s%d", i)
			for r := range rounds {
				if _, err := h.e.Append(context.Background(), id, []history.Message{user(fmt.Sprintf("%s prompt %d", id, r)), assistant(fmt.Sprintf("%s answer %d", id, r))}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := h.e.Loaded(); n > 8 {
		t.Fatalf("%d sessions loaded, bound 4", n)
	}
	for i := range sessions {
		id := fmt.Sprintf("s%d", i)
		a := h.context(id)
		if len(a.Messages) != 2*rounds {
			t.Fatalf("%s: %d messages, want %d", id, len(a.Messages), 2*rounds)
		}
		for r := range rounds {
			if got, want := a.Messages[2*r].Content[0].Text, fmt.Sprintf("%s prompt %d", id, r); got != want {
				t.Fatalf("%s message %d = %q, want %q", id, 2*r, got, want)
			}
		}
		// Reloading gives the same bytes.
		before := encodeAll(t, a)
		h.e.mu.Lock()
		h.e.opts.MaxLoadedSessions = 0
		h.e.evictLocked()
		h.e.opts.MaxLoadedSessions = 4
		if _, loaded := h.e.sessions[id]; loaded {
			t.Fatalf("%s was not evicted", id)
		}
		h.e.mu.Unlock()
		if after := encodeAll(t, h.context(id)); after != before {
			t.Fatalf("%s: context differs after a reload", id)
		}
	}
}

// A tool call sent with spaced JSON is kept in the stored (compact) form in
// memory too: every format renders the same bytes before and after a reload.
func TestReloadRendersTheSameProviderBytes(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	h.create("s", 200000)
	spaced := history.Message{Role: history.RoleAssistant, Content: []history.Block{
		{Type: history.BlockToolCall, ID: "g1", Name: "grep", Input: json.RawMessage("{\n  \"pattern\": \"x\" }")}}}
	r := result("g1", "x found")
	r.ToolName = "grep"
	h.append("s", user("find x"), spaced, r)
	render := func() string {
		a := h.context("s")
		b1, _ := json.Marshal(summarizer.RenderOpenAI(a.System, a.Tools, a.Messages))
		b2, _ := json.Marshal(anthropic.Render(a.System, a.Tools, a.Messages))
		return string(b1) + string(b2)
	}
	before := render()
	h.e.mu.Lock()
	h.e.opts.MaxLoadedSessions = 0
	h.e.evictLocked()
	h.e.opts.MaxLoadedSessions = DefaultMaxLoadedSessions
	h.e.mu.Unlock()
	if after := render(); after != before {
		t.Fatalf("rendering changed after a reload:\n%s\n%s", before, after)
	}
}
