package proxy

import (
	"context"
	"testing"

	"github.com/ctxd/ctxd/history"
)

// A client's resend after a failed upstream answer (a 529, a 502) is the
// same turn: the answer that succeeds is recorded once, with its usage;
// a further resend records nothing (issue 15, a tester's finding: the
// retried answer was lost).
func TestRetryAfterUpstreamErrorRecordsTheAnswer(t *testing.T) {
	for _, status := range []int{529, 502} {
		f := newFixture(t, testConfig())
		c := newConversation().user("fix the bug")
		f.up.script(reply{status: status, body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`},
			reply{stream: true, body: sse("", "Fixed.", nil, 4321, 17)})
		resp, _ := f.post(c.body(), nil)
		if resp.StatusCode != status {
			t.Fatalf("first answer: status %d, want %d", resp.StatusCode, status)
		}
		id := resp.Header.Get(HeaderSessionID)
		resp, got := f.post(c.body(), nil) // the client's retry
		if resp.StatusCode != 200 || resp.Header.Get(HeaderSessionID) != id {
			t.Fatalf("retry: status %d session %s (want %s): %s", resp.StatusCode, resp.Header.Get(HeaderSessionID), id, got)
		}
		f.settle()
		a, err := f.eng.Context(context.Background(), id, engineNoPreSend)
		if err != nil {
			t.Fatal(err)
		}
		if len(a.Messages) != 2 {
			t.Fatalf("status %d: %d messages recorded, want the prompt and the retried answer", status, len(a.Messages))
		}
		m := a.Messages[1]
		if m.Role != history.RoleAssistant || m.Content[0].Text != "Fixed." || m.Usage == nil || m.Usage.InputTokens != 4321 || m.Usage.OutputTokens != 17 {
			t.Errorf("status %d: recorded %+v usage %+v", status, m.Content, m.Usage)
		}
		// A second resend of the answered request records nothing more.
		f.post(c.body(), nil)
		f.settle()
		if n := messageEvents(t, f, id); n != 2 {
			t.Errorf("status %d: %d messages after a second resend, want 2", status, n)
		}
		// And the conversation goes on on the same branch.
		c.assistant(assistantText("Fixed.")).user("thanks")
		resp, _ = f.post(c.body(), nil)
		f.settle()
		if resp.Header.Get(HeaderSessionID) != id || f.p.Stats().Branches != 0 {
			t.Errorf("status %d: next turn on %s (want %s), %d branches", status, resp.Header.Get(HeaderSessionID), id, f.p.Stats().Branches)
		}
	}
}
