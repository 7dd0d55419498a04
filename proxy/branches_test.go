package proxy

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/engine"
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
		// A compaction follows the request's acceptance: the next request
		// is sent when it has ended, whatever the scheduling.
		f.jobsDone(got)
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

// A real fork — the client edits the tool input of an answer it resends,
// right after ctxd compacted the conversation — starts one branch that
// inherits its parent's log up to the fork point, the checkpoint
// included: the fork's request goes out with the parent's summary, no
// summarizer call runs for the shared prefix, the edit goes upstream as
// the client wrote it, and the next request stays on the new branch. The
// same after a restart between the compaction and the fork (the fork
// point is read from the parent's log).
func TestForkInheritsTheParentsCheckpoint(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprintf("restart=%v", restart), func(t *testing.T) { forkInherits(t, restart) })
	}
}

func forkInherits(t *testing.T, restart bool) {
	f := newFixture(t, testConfig())
	f.up.mu.Lock()
	f.up.sized = true
	f.up.mu.Unlock()
	hdr := map[string]string{HeaderContextLimit: "6000"}
	c := newConversation().user("investigate the failing build")
	result := func(i int) string {
		var sb strings.Builder
		for w := range 250 {
			fmt.Fprintf(&sb, "word%d-%d ", i, w)
		}
		return sb.String()
	}
	parent := ""
	// The request at compactedAt crosses the threshold: compacted once
	// the upstream accepted it, with its answer or not; the answer the
	// client edits is the next one's, which follows the checkpoint.
	compactedAt := -1
	for i := 0; i < 30 && (compactedAt < 0 || i == compactedAt+1); i++ {
		id, input := fmt.Sprintf("toolu_%02d", i), fmt.Sprintf(`{"command":"step %d"}`, i)
		f.up.script(reply{stream: true, body: sse("", "", [][3]string{{id, "Bash", input}}, 100, 5)})
		before := len(f.up.summaries())
		resp, _ := f.post(c.body(), hdr)
		parent = resp.Header.Get(HeaderSessionID)
		f.jobsDone(parent) // compacted once the upstream accepted the request
		if len(f.up.summaries()) > before {
			compactedAt = i
		}
		c.assistant(assistantCall(id, "Bash", input)).results([2]string{id, result(i)})
	}
	if compactedAt < 0 {
		t.Fatal("no compaction in 30 requests")
	}
	f.settle()
	pinfo, _ := f.eng.Session(context.Background(), parent)
	if pinfo.Checkpoints == 0 {
		t.Fatalf("parent %s has no checkpoint", parent)
	}
	if restart {
		f.restart()
	}
	// The client edits the input of the newest answer it resends.
	id := fmt.Sprintf("toolu_%02d", compactedAt+1)
	edited := `{"command":"step 99 --edited"}`
	c.msgs[len(c.msgs)-2] = assistantCall(id, "Bash", edited)
	before := len(f.up.summaries())
	f.up.script(textAnswer("done"))
	resp, _ := f.post(c.body(), hdr)
	child := resp.Header.Get(HeaderSessionID)
	if child == "" || child == parent {
		t.Fatalf("the edit went to session %q (parent %q): %s", child, parent, resp.Header.Get(HeaderDiagnostic))
	}
	if n := len(f.up.summaries()) - before; n != 0 {
		t.Errorf("the fork ran %d summarizer calls: the shared prefix was compacted again", n)
	}
	cinfo, _ := f.eng.Session(context.Background(), child)
	if cinfo.Labels["proxy.branch_of"] != parent || cinfo.Labels[engine.LabelInherits] != parent || cinfo.Checkpoints != pinfo.Checkpoints {
		t.Errorf("child %s: labels %v, %d checkpoints; parent %d", child, cinfo.Labels, cinfo.Checkpoints, pinfo.Checkpoints)
	}
	pcp, _ := f.eng.Checkpoints(context.Background(), parent)
	ccp, _ := f.eng.Checkpoints(context.Background(), child)
	if len(ccp) == 0 || len(pcp) == 0 || ccp[len(ccp)-1].Summary != pcp[len(pcp)-1].Summary || ccp[len(ccp)-1].Seq != pcp[len(pcp)-1].Seq {
		t.Errorf("the child's checkpoints are not the parent's")
	}
	reqs := f.up.requests()
	out := string(reqs[len(reqs)-1].body)
	if !strings.Contains(out, "Fix the build.") || !strings.Contains(out, `step 99 --edited`) {
		t.Errorf("the fork's request lacks the parent's summary or the client's edit: %.600s", out)
	}
	if strings.Contains(out, `"command":"step `+fmt.Sprint(compactedAt+1)+`"`) {
		t.Error("the fork's request holds the answer the client edited away")
	}
	c.assistant(assistantText("done")).user("and now the docs")
	if resp, _ = f.post(c.body(), hdr); resp.Header.Get(HeaderSessionID) != child {
		t.Errorf("the next request went to %s, not the fork %s", resp.Header.Get(HeaderSessionID), child)
	}
	if st := f.p.Stats(); st.Branches != 1 || (!restart && st.MaxBranches != 2) {
		t.Errorf("stats %+v: want one fork", st)
	}
}
