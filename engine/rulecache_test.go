package engine

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/trigger"
)

// sameAsFullCheck fails unless the context's incremental §4a check answers
// as a full check of its messages does, under every Rules, and returns how
// many messages the check read.
func sameAsFullCheck(t *testing.T, h *harness, id string, a *Assembled, when string) int {
	t.Helper()
	sendable := history.Sendable(a.Messages)
	if a.Checked.Len() != len(sendable) {
		t.Fatalf("%s: checked %d messages, the context sends %d", when, a.Checked.Len(), len(sendable))
	}
	for _, r := range []Rules{a.Rules, {}, {OpenTail: true}, {Thinking: history.ThinkingOn}, {Thinking: history.ThinkingOff}} {
		if got, want := a.Checked.Violations(r), history.CheckRequest(sendable, r); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s, rules %+v: incremental %v, full %v", when, r, got, want)
		}
	}
	s, err := h.e.lock(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer s.mu.Unlock()
	return s.rules.read
}

// Rules is history.Rules, short for the table above.
type Rules = history.Rules

// The §4a check of an assembled context reads only the messages appended since
// the last context (the proxy's time to first byte, docs/decisions.md
// "Incremental §4a check and rendering") and
// answers as a full check does; a context-edit pass, a compaction and a restart
// make it read everything again, and it still answers the same.
func TestTheRuleCheckReadsOnlyWhatIsNew(t *testing.T) {
	cfg := testConfig()
	eagerEditing(&cfg)
	dir := t.TempDir()
	h := newHarness(t, cfg, dir)
	if _, err := h.e.CreateSession(context.Background(), CreateParams{ID: "s", Model: thinkingModel}); err != nil {
		t.Fatal(err)
	}
	h.append("s", user("go"))
	n := 0
	round := func() {
		n++
		h.append("s", thinkingCall(fmt.Sprintf("t%d", n), fmt.Sprintf("c%d", n)), result(fmt.Sprintf("c%d", n), words(60)))
	}
	for range 3 {
		round()
	}
	a := h.context("s")
	if got := sameAsFullCheck(t, h, "s", a, "first"); got != len(a.Messages) {
		t.Fatalf("the first check read %d of %d messages", got, len(a.Messages))
	}
	for i := range 4 {
		round()
		a = h.context("s")
		if got := sameAsFullCheck(t, h, "s", a, fmt.Sprintf("round %d", i)); got != 2 {
			t.Fatalf("round %d: the check read %d messages, want the 2 appended", i, got)
		}
	}
	// The same context again: nothing to read.
	if got := sameAsFullCheck(t, h, "s", h.context("s"), "again"); got != 0 {
		t.Fatalf("an unchanged context read %d messages", got)
	}

	// A context-edit pass (the loop's end) elides earlier results.
	h.append("s", thinkingAnswer("t-end", "done"))
	if len(h.events("s", checkpoint.KindContextEdit)) == 0 {
		t.Fatal("no context-edit pass")
	}
	a = h.context("s")
	if got := sameAsFullCheck(t, h, "s", a, "after the pass"); got != len(a.Messages) {
		t.Fatalf("after the pass the check read %d of %d messages", got, len(a.Messages))
	}
	h.append("s", user("next"))
	if got := sameAsFullCheck(t, h, "s", h.context("s"), "after the pass, appended"); got != 1 {
		t.Fatalf("read %d messages, want 1", got)
	}

	// A compaction.
	if _, err := h.e.Compact(context.Background(), "s", trigger.Manual, true); err != nil {
		t.Fatal(err)
	}
	a = h.context("s")
	if got := sameAsFullCheck(t, h, "s", a, "after the compaction"); got != len(a.Messages) {
		t.Fatalf("after the compaction the check read %d of %d messages", got, len(a.Messages))
	}
	round()
	if got := sameAsFullCheck(t, h, "s", h.context("s"), "after the compaction, appended"); got != 2 {
		t.Fatalf("read %d messages, want 2", got)
	}
	want := encodeAll(t, h.context("s"))
	h.Close()

	// A restart: the first check reads everything, the same context.
	h2 := newHarness(t, cfg, dir)
	a = h2.context("s")
	if got := encodeAll(t, a); got != want {
		t.Fatalf("context differs after a restart:\nbefore %s\nafter  %s", want, got)
	}
	if got := sameAsFullCheck(t, h2, "s", a, "after a restart"); got != len(a.Messages) {
		t.Fatalf("after a restart the check read %d of %d messages", got, len(a.Messages))
	}
	h2.append("s", thinkingCall("t-r", "c-r"), result("c-r", "ok"))
	if got := sameAsFullCheck(t, h2, "s", h2.context("s"), "after a restart, appended"); got != 2 {
		t.Fatalf("read %d messages, want 2", got)
	}
}

// A context that breaks a rule keeps breaking it as messages are
// appended, and the incremental check names the same violations as a
// full one (the violation at message 0 is in the part not read again).
func TestTheIncrementalRuleCheckKeepsAViolation(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	h.create("s", 20000)
	h.append("s", assistant("Hello, how can I help?"), user("fix it"))
	opts := ContextOptions{NoPreSend: true, Unchecked: true}
	for i := range 3 {
		a, err := h.e.Context(context.Background(), "s", opts)
		if err != nil {
			t.Fatal(err)
		}
		if len(a.Violations) != 1 || a.Violations[0].Rule != history.RuleFirstNotUser {
			t.Fatalf("request %d: violations %v", i, a.Violations)
		}
		if got := sameAsFullCheck(t, h, "s", a, fmt.Sprintf("request %d", i)); i > 0 && got != 2 {
			t.Fatalf("request %d read %d messages, want 2", i, got)
		}
		if _, err := h.e.Context(context.Background(), "s", ContextOptions{NoPreSend: true}); err == nil {
			t.Fatalf("request %d: the context was returned", i)
		}
		h.append("s", assistant(fmt.Sprintf("answer %d", i)), user(fmt.Sprintf("more %d", i)))
	}
}
