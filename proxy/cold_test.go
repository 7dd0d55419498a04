package proxy

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// coldConversation is a conversation ctxd has not seen whose first
// request is over coldBytes: rounds of ~25 KB tool results.
func coldConversation(rounds int) *conversation {
	c := newConversation().user("investigate the failing build")
	for i := range rounds {
		id := fmt.Sprintf("toolu_cold%02d", i)
		c.assistant(assistantCall(id, "Bash", `{"command":"make"}`)).results([2]string{id, strings.Repeat(fmt.Sprintf("build output line %d\n", i), 1200)})
	}
	return c.user("go on")
}

// TestColdFirstRequestGoesOnAnEstimate: the large first request of a
// conversation ctxd has not seen goes upstream byte for byte as the
// client sent it (a bounded estimate of its size, nothing parsed or
// written before the upstream answers); refused, it leaves no session;
// accepted, the conversation is recorded whole, counted, and its next
// request extends the recorded branch.
func TestColdFirstRequestGoesOnAnEstimate(t *testing.T) {
	f := newFixture(t, testConfig())
	c := coldConversation(12)
	body := c.body()
	if len(body) < coldBytes {
		t.Fatalf("the test's body is %d bytes, under coldBytes", len(body))
	}
	n := len(c.msgs)
	f.up.script(reply{status: 401, body: authError})
	if resp, _ := f.post(body, nil); resp.StatusCode != 401 || resp.Header.Get(HeaderSessionID) != "" {
		t.Fatalf("refused: %d, session %q named", resp.StatusCode, resp.Header.Get(HeaderSessionID))
	}
	f.settle()
	if ids := f.sessions(); len(ids) != 0 {
		t.Fatalf("a refused cold request left sessions %v", ids)
	}
	reqs := f.up.requests()
	if string(reqs[len(reqs)-1].body) != body {
		t.Fatal("the refused cold request did not go upstream as the client sent it")
	}

	resp, _ := f.post(body, nil)
	id := resp.Header.Get(HeaderSessionID)
	if resp.StatusCode != 200 || id == "" {
		t.Fatalf("accepted: %d, session %q", resp.StatusCode, id)
	}
	reqs = f.up.requests()
	if string(reqs[len(reqs)-1].body) != body {
		t.Fatal("the accepted cold request did not go upstream as the client sent it")
	}
	f.settle()
	info, err := f.eng.Session(context.Background(), id)
	if err != nil || info.Messages != uint64(n+1) || info.Tokens == 0 {
		t.Fatalf("recorded: %+v %v (want %d messages with the answer, counted)", info, err, n+1)
	}

	c.assistant(assistantText("ok")).user("and now?")
	resp, _ = f.post(c.body(), nil)
	f.settle()
	if got := resp.Header.Get(HeaderSessionID); resp.StatusCode != 200 || got != id {
		t.Fatalf("next request: %d, session %q, want %q", resp.StatusCode, got, id)
	}
	if ids := f.sessions(); len(ids) != 1 {
		t.Fatalf("sessions %v", ids)
	}
	if info, _ := f.eng.Session(context.Background(), id); info.Messages != uint64(n+3) {
		t.Fatalf("after the next request: %d messages, want %d", info.Messages, n+3)
	}
}

// TestColdRequestOverTheThresholdIsManaged: from a credential the
// upstream accepted, a cold request whose estimate reaches the window's
// threshold is managed in full before it goes (ctxd's rendering, a
// pre-send compaction may be due); and a cold request refused as too long
// is managed then and retried compacted.
func TestColdRequestOverTheThresholdIsManaged(t *testing.T) {
	f := newFixture(t, testConfig())
	f.post(newConversation().user("hi").body(), map[string]string{HeaderSession: "warm-up"}) // the credential accepted
	body := coldConversation(12).body()
	hdr := map[string]string{HeaderSession: "over", HeaderContextLimit: "20000"}
	if resp, _ := f.post(body, hdr); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	reqs := f.up.requests()
	if string(reqs[len(reqs)-1].body) == body {
		t.Fatal("a cold request over the threshold went out unmanaged")
	}

	g := newFixture(t, testConfig())
	g.up.script(reply{status: 400, body: overflowBody(t, "anthropic_400_prompt_too_long_with_request_id_1")}, textAnswer("fixed"))
	resp, got := g.post(body, nil)
	if resp.StatusCode != 200 || !strings.Contains(string(got), "fixed") {
		t.Fatalf("overflow: the client got %d %s", resp.StatusCode, got)
	}
	g.settle()
	id := resp.Header.Get(HeaderSessionID)
	if cs := compactions(t, g, id); len(cs) != 1 || cs[0]["reason"] != "overflow" {
		t.Fatalf("compactions %v", cs)
	}
	var sent []seen
	for _, r := range g.up.requests() {
		if !r.summary {
			sent = append(sent, r)
		}
	}
	if len(sent) != 2 || string(sent[0].body) != body || len(outgoingMessages(t, sent[1].body)) >= len(outgoingMessages(t, sent[0].body)) {
		t.Fatalf("%d requests sent; the retry is not the compacted one", len(sent))
	}
}
