package proxy

import (
	"context"
	"testing"
	"time"

	"github.com/ctxd/ctxd/history"
)

// The answer's record comes after the client has the whole answer, end of
// body included: the record is held back until the client read
// the streamed body to its end, which a record made before the handler
// returns would never let it do. The record is then written, and the
// conversation's next request finds it (its lane waits for the record).
func TestAnswerRecordedAfterTheResponseEnds(t *testing.T) {
	f := newFixture(t, testConfig())
	clientDone := make(chan struct{})
	var recordedBeforeEnd bool
	trailHook = func() {
		select {
		case <-clientDone:
		case <-time.After(10 * time.Second):
			// Not a timing assertion: only the failure's way out.
			recordedBeforeEnd = true
		}
	}
	t.Cleanup(func() { trailHook = nil })

	stream := sse("", "", [][3]string{{"toolu_1", "Bash", `{"command":"ls"}`}}, 1234, 56)
	f.up.script(reply{stream: true, body: stream})
	c := newConversation().user("list the files")
	resp, got := f.post(c.body(), nil) // reads the body to its end
	close(clientDone)
	if string(got) != stream {
		t.Fatalf("client got %q\nwant %q", got, stream)
	}
	id := resp.Header.Get(HeaderSessionID)
	if err := f.p.WaitRecords(context.Background()); err != nil {
		t.Fatal(err)
	}
	if recordedBeforeEnd {
		t.Fatal("the client got the end of the answer only after its record was written")
	}
	a, err := f.eng.Context(context.Background(), id, engineNoPreSend)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Messages) != 2 || a.Messages[1].Role != history.RoleAssistant {
		t.Fatalf("recorded %d messages, want the request and its answer", len(a.Messages))
	}

	// The next request extends the recorded answer: same session, only
	// the new tool result is appended.
	c.assistant(assistantCall("toolu_1", "Bash", `{"command":"ls"}`)).results([2]string{"toolu_1", "a.go"})
	f.up.script(reply{stream: true, body: sse("", "Done.", nil, 1300, 5)})
	resp2, _ := f.post(c.body(), nil)
	if resp2.Header.Get(HeaderSessionID) != id {
		t.Fatalf("next request went to %s, want %s", resp2.Header.Get(HeaderSessionID), id)
	}
	f.settle()
	if s := f.p.Stats(); s.Branches != 0 {
		t.Fatalf("the next request branched: %+v", s)
	}
}
