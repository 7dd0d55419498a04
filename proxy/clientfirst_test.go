package proxy

import (
	"strings"
	"testing"
)

// TestClientFirstAssistantForwardedAsSent: a conversation's first request
// whose own first message is the assistant's breaks a provider rule
// (first_message_not_user) of the client's making: it goes upstream as the
// client sent it, for the provider to answer, counted as a client's rule
// break, never as ctxd's violation, and logged below error.
func TestClientFirstAssistantForwardedAsSent(t *testing.T) {
	f := newFixture(t, testConfig())
	f.up.allowRefusals = true
	body := `{"model":"claude-opus-4-8","max_tokens":10,"messages":[{"role":"assistant","content":"x"}]}`
	f.up.script(textAnswer("ok"))
	resp, _ := f.post(body, nil)
	f.settle()
	reqs := f.up.requests()
	if len(reqs) != 1 || string(reqs[0].body) != body {
		t.Fatalf("the upstream did not get the client's body: %d requests", len(reqs))
	}
	if id := resp.Header.Get(HeaderSessionID); id != "" {
		t.Errorf("the request named session %q", id)
	}
	if s := f.p.Stats(); s.Violations != 0 || s.ClientRuleBreaks != 1 {
		t.Errorf("%d violations, %d client rule breaks; want 0, 1", s.Violations, s.ClientRuleBreaks)
	}
	if logs := f.logs.String(); strings.Contains(logs, "level=ERROR") {
		t.Errorf("an error was logged:\n%s", logs)
	}
}
