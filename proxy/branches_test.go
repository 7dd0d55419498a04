package proxy

import (
	"fmt"
	"strings"
	"testing"
)

// touchingRun is one run of touchingClient: the proxy's counters, the
// compactions of every session of the run and the sessions' ids.
type touchingRun struct {
	stats       Stats
	compactions int
	summaries   int
	sessions    map[string]bool
}

// touchingClient sends requests requests of one tool loop with thinking
// enabled (a result of about 250 words each, a 6,000-token window, so
// ctxd compacts every few requests). Each answer is resent as received in
// the request that follows it; when touch is set, every older answer is
// resent touched in one of the ways real clients do (touches, a different
// one each request).
func touchingClient(t *testing.T, requests int, touch bool) touchingRun {
	f := newFixture(t, testConfig())
	f.up.mu.Lock()
	f.up.sized = true
	f.up.mu.Unlock()
	hdr := map[string]string{HeaderContextLimit: "6000"}
	c := newConversation().user("list the files, many times")
	c.thinking = `{"type":"enabled","budget_tokens":2000}`
	type turn struct{ text, id, input, result string }
	var turns []turn
	run := touchingRun{sessions: map[string]bool{}}
	for i := 0; i < requests; i++ {
		c.msgs = c.msgs[:1]
		for k, tn := range turns {
			raw := touches[0].touch(tn.text, tn.id, tn.input)
			if touch && k < len(turns)-1 {
				raw = touches[1+(i+k)%(len(touches)-1)].touch(tn.text, tn.id, tn.input)
			}
			c.assistant(raw).results([2]string{tn.id, tn.result})
		}
		id, text, input := fmt.Sprintf("toolu_%02d", i), fmt.Sprintf("Step %d:  listing the files again.", i), `{"command":"ls -la"}`
		f.up.script(reply{stream: true, body: sse("plan", text, [][3]string{{id, "Bash", input}}, 100, 5)})
		resp, _ := f.post(c.body(), hdr)
		got := resp.Header.Get(HeaderSessionID)
		if got == "" {
			t.Fatalf("request %d unmanaged: %s", i, resp.Header.Get(HeaderDiagnostic))
		}
		run.sessions[got] = true
		var sb strings.Builder
		for w := range 250 {
			fmt.Fprintf(&sb, "word%d-%d ", i, w)
		}
		turns = append(turns, turn{text, id, input, sb.String()})
	}
	f.settle()
	run.stats = f.p.Stats()
	for id := range run.sessions {
		run.compactions += len(compactions(t, f, id))
	}
	run.summaries = len(f.up.summaries())
	return run
}

// A client that touches the answers it resends (whitespace, stripped
// thinking, fields reordered or dropped, tool inputs re-encoded: touches)
// over 80 requests of a tool loop that compacts stays on one branch of one
// session and compacts exactly as often as a client that resends every
// answer as received (before matching tolerated the touches, such a client
// started a branch per request: 48 branches and 50 compactions in 80
// requests).
func TestEightyRequestsOfATouchingClientStayOnOneBranch(t *testing.T) {
	const requests = 80
	plain := touchingClient(t, requests, false)
	touched := touchingClient(t, requests, true)
	for name, r := range map[string]touchingRun{"as received": plain, "touched": touched} {
		if st := r.stats; len(r.sessions) != 1 || st.Branches != 0 || st.MaxBranches != 1 || st.Conversations != 1 || st.PassedThrough != 0 || st.ClientRuleBreaks != 0 {
			t.Errorf("%s: %d sessions, stats %+v: want one branch of one conversation, every request managed", name, len(r.sessions), st)
		}
	}
	if plain.compactions == 0 {
		t.Fatalf("no compaction in %d requests: the test does not cross the threshold", requests)
	}
	if touched.compactions != plain.compactions || touched.summaries != plain.summaries {
		t.Errorf("touched client: %d compactions, %d summaries; as received: %d, %d", touched.compactions, touched.summaries, plain.compactions, plain.summaries)
	}
	t.Logf("%d requests: %d compactions, %d summaries either way", requests, plain.compactions, plain.summaries)
}
