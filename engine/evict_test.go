package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/summarizer"
	"github.com/ctxd/ctxd/wire/anthropic"
	"strings"
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
		h.e.evictLocked("")
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
	h.e.evictLocked("")
	h.e.opts.MaxLoadedSessions = DefaultMaxLoadedSessions
	h.e.mu.Unlock()
	if after := render(); after != before {
		t.Fatalf("rendering changed after a reload:\n%s\n%s", before, after)
	}
}

// With storage.session_memory_bytes at 400 KB, sessions of ~100 KB each are
// dropped least recently used first once their memory passes the budget,
// whatever their count; a session larger than the budget alone stays
// loaded while it is used and serves its context; a reloaded session
// accounts the same memory as before.
func TestEvictionByMemory(t *testing.T) {
	cfg := testConfig()
	cfg.Storage.SessionMemoryBytes = 400_000
	h := newHarness(t, cfg, "")
	text := strings.Repeat("word ", 20_000) // 100 KB
	for i := range 8 {
		id := fmt.Sprintf("s%d", i)
		h.create(id, 1_000_000)
		h.append(id, user(text+id), assistant("ok"))
	}
	loaded := func() (n int, mem int64) {
		h.e.mu.Lock()
		defer h.e.mu.Unlock()
		for _, s := range h.e.sessions {
			mem += s.memBytes.Load()
		}
		return len(h.e.sessions), mem
	}
	n, mem := loaded()
	if n >= 8 || mem > 400_000+150_000 {
		t.Fatalf("%d sessions loaded holding %d bytes; budget 400 KB", n, mem)
	}
	h.e.mu.Lock()
	_, newest := h.e.sessions["s7"]
	_, oldest := h.e.sessions["s0"]
	h.e.mu.Unlock()
	if !newest || oldest {
		t.Fatalf("s7 loaded %v, s0 loaded %v: not least recently used first", newest, oldest)
	}

	// Over the budget alone.
	h.create("big", 1_000_000)
	h.append("big", user(strings.Repeat("word ", 120_000)), assistant("ok"))
	if a := h.context("big"); len(a.Messages) != 2 {
		t.Fatalf("big: %d messages", len(a.Messages))
	}
	h.e.mu.Lock()
	s := h.e.sessions["big"]
	h.e.mu.Unlock()
	if s == nil {
		t.Fatal("the session in use was evicted")
	}
	before := s.memBytes.Load()
	if before < 600_000 {
		t.Fatalf("big accounts %d bytes for a 600 KB message", before)
	}
	h.e.mu.Lock()
	h.e.opts.MaxLoadedSessions = 0
	h.e.evictLocked("")
	h.e.opts.MaxLoadedSessions = DefaultMaxLoadedSessions
	h.e.mu.Unlock()
	h.context("big")
	h.e.mu.Lock()
	s = h.e.sessions["big"]
	h.e.mu.Unlock()
	if s == nil || s.memBytes.Load() != before {
		t.Fatalf("reloaded: %v, memory %d, before %d", s != nil, s.memBytes.Load(), before)
	}
}
