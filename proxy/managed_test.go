package proxy

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/wire"
)

// TestManagedConversationStaysManaged: a client that breaks a provider
// rule in the middle of a conversation ctxd manages (here an empty text
// block in its new message, after a compaction made ctxd's context differ
// from the client's history) gets ctxd's context with its new message as
// sent, not its own bytes: every request after stays managed on the same
// session, and the messages on the wire only ever extend the previous
// request's (no recorded rewrite happens after the compaction), the
// refused message aside, which is never recorded (docs/design.md §10 "A
// managed conversation stays managed").
func TestManagedConversationStaysManaged(t *testing.T) {
	f := newFixture(t, testConfig())
	f.up.allowRefusals = true // the provider may refuse the empty text block
	hdr := map[string]string{HeaderContextLimit: "6000"}
	c := longConversationUsage(f, 8, 250, hdr, func(i int) int { return 500 * (i + 1) })
	f.up.script(crossingAnswer(4500))
	resp, _ := f.post(c.body(), hdr)
	id := resp.Header.Get(HeaderSessionID)
	// Compacted once the upstream accepted the request that crossed the
	// threshold: the next request is sent compacted.
	f.jobsDone(id)
	cs := len(compactions(t, f, id))
	if cs != 1 {
		t.Fatalf("%d compactions before the rule break, want 1", cs)
	}
	c.assistant(assistantText("ok")).user("go on")
	f.post(c.body(), hdr)
	f.settle()
	sent := func() []string {
		reqs := f.up.requests()
		return normalizedMessages(t, reqs[len(reqs)-1].body)
	}
	prev := sent()
	if len(prev) >= len(c.msgs) {
		t.Fatalf("the compaction did not shorten the context: %d messages for the client's %d", len(prev), len(c.msgs))
	}
	stored := messageEvents(t, f, id)
	broken := `{"role":"user","content":[{"type":"text","text":""},{"type":"text","text":"and now?"}]}`
	c.assistant(assistantText("ok"))
	c.msgs = append(c.msgs, broken)
	resp, _ = f.post(c.body(), hdr)
	f.settle()
	if resp.Header.Get(HeaderSessionID) != id {
		t.Fatalf("the rule break: session %q, want %s", resp.Header.Get(HeaderSessionID), id)
	}
	if d := resp.Header.Get(HeaderDiagnostic); !strings.Contains(d, "empty_text") || !strings.Contains(d, "not recorded") {
		t.Errorf("diagnostic %q", d)
	}
	got := sent()
	if len(got) != len(prev)+2 || !slices.Equal(got[:len(prev)], prev) {
		t.Fatalf("the rule break's request does not extend ctxd's context:\nprevious %q\ngot %q", prev, got)
	}
	if got[len(got)-1] != string(wire.Normalize([]byte(broken))) {
		t.Errorf("the client's new message was not sent as it came: %s", got[len(got)-1])
	}
	if n := messageEvents(t, f, id); n != stored {
		t.Errorf("%d messages recorded by the refused request", n-stored)
	}
	// The client fixes its message and goes on: managed, on the same
	// session, each request extending the last one ctxd recorded.
	c.msgs[len(c.msgs)-1] = `{"role":"user","content":[{"type":"text","text":"and now?"}]}`
	base := got[:len(got)-1]
	for i := range 3 {
		f.up.script(textAnswer("step " + string(rune('a'+i))))
		resp, _ = f.post(c.body(), hdr)
		f.settle()
		if resp.StatusCode != 200 || resp.Header.Get(HeaderSessionID) != id {
			t.Fatalf("request %d after the break: status %d, session %q", i, resp.StatusCode, resp.Header.Get(HeaderSessionID))
		}
		got = sent()
		if len(got) <= len(base) || !slices.Equal(got[:len(base)], base) {
			t.Fatalf("request %d after the break: the wire's messages do not extend the previous request's:\nprevious %q\ngot %q", i, base, got)
		}
		base = got
		c.assistant(assistantText("step " + string(rune('a'+i)))).user("next")
	}
	if n := len(compactions(t, f, id)); n != cs {
		t.Errorf("%d compactions after the break: the test's premise (no recorded rewrite) does not hold", n-cs)
	}
	if s := f.p.Stats(); s.PassedThrough != 0 || s.Branches != 0 || s.ClientRuleBreaks != 1 {
		t.Errorf("stats: %d passed through, %d branches, %d client rule breaks; want 0, 0, 1", s.PassedThrough, s.Branches, s.ClientRuleBreaks)
	}
	if info, err := f.eng.Session(context.Background(), id); err != nil || info.Messages == 0 {
		t.Fatalf("session: %+v %v", info, err)
	}
}
