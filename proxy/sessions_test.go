package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/engine"
)

// A client that rewrites its history (here: its own compaction replaced
// the first messages) gets a new branch: a new session holding its whole
// list, recorded as a rewrite on both sides.
func TestRewriteStartsBranch(t *testing.T) {
	f := newFixture(t, testConfig())
	c := newConversation().user("first task")
	resp, _ := f.post(c.body(), nil)
	first := resp.Header.Get(HeaderSessionID)
	c.assistant(assistantText("ok")).user("second task")
	if resp, _ = f.post(c.body(), nil); resp.Header.Get(HeaderSessionID) != first {
		t.Fatal("an extension started a new session")
	}
	// The client compacts on its own: a summary replaces the history.
	r := newConversation().user("Summary of the conversation so far: two tasks.").assistant(assistantText("ok")).user("third task")
	resp, _ = f.post(r.body(), nil)
	second := resp.Header.Get(HeaderSessionID)
	if second == first || !strings.HasPrefix(second, first+"-b") {
		t.Fatalf("rewrite went to %q (first %q)", second, first)
	}
	info, err := f.eng.Session(context.Background(), second)
	if err != nil || info.Labels["proxy.branch_of"] != first {
		t.Fatalf("branch labels %v, %v", info.Labels, err)
	}
	f.settle()
	st, _ := f.eng.ClientState(context.Background(), first)
	var rec record
	_ = json.Unmarshal(st, &rec)
	if rec.SupersededBy != second {
		t.Errorf("old branch record %s", st)
	}
	// The upstream got the client's rewritten history, not stale state.
	reqs := f.up.requests()
	msgs := outgoingMessages(t, reqs[len(reqs)-1].body)
	if len(msgs) != 3 || !strings.Contains(string(reqs[len(reqs)-1].body), "Summary of the conversation") {
		t.Errorf("after the rewrite the upstream got %s", reqs[len(reqs)-1].body)
	}
	// The branch goes on appending.
	r.assistant(assistantText("ok")).user("fourth task")
	if resp, _ = f.post(r.body(), nil); resp.Header.Get(HeaderSessionID) != second {
		t.Errorf("the branch's next request went to %s", resp.Header.Get(HeaderSessionID))
	}
	if st := f.p.Stats(); st.Branches != 1 || st.MaxBranches != 2 || st.Conversations != 1 {
		t.Errorf("stats %+v", f.p.Stats())
	}
}

// A side request of the same agent session (a title on a small model, no
// tools) never merges into the main conversation, and a caller with
// another credential never reaches it.
func TestSideRequestsAndCredentialsKeptApart(t *testing.T) {
	f := newFixture(t, testConfig())
	c := newConversation().user("main task")
	resp, _ := f.post(c.body(), nil)
	main := resp.Header.Get(HeaderSessionID)

	side := newConversation()
	side.model, side.tools = "claude-haiku-4-5", `[]`
	side.user("Write a 5-word title for: main task")
	resp, _ = f.post(side.body(), nil)
	if got := resp.Header.Get(HeaderSessionID); got == main || got == "" {
		t.Fatalf("side request session %q (main %q)", got, main)
	}
	c.assistant(assistantText("ok")).user("go on")
	if resp, _ = f.post(c.body(), nil); resp.Header.Get(HeaderSessionID) != main {
		t.Fatal("the main conversation lost its session after a side request")
	}
	resp, _ = f.post(c.body(), map[string]string{"X-Api-Key": "sk-ant-other"})
	if got := resp.Header.Get(HeaderSessionID); got == main || strings.HasPrefix(got, main) {
		t.Fatalf("another credential reached the session: %s", got)
	}
}

// The client's key reaches the upstream and nothing else: not a log line,
// an event, a stored byte.
func TestCredentialNeverStoredOrLogged(t *testing.T) {
	f := newFixture(t, testConfig())
	c := newConversation().user("task")
	f.up.script(reply{status: 401, body: `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`})
	f.post(c.body(), map[string]string{"Authorization": "Bearer " + testKey})
	f.post(c.body(), nil)
	if got := f.up.requests()[0].header.Get("Authorization"); got != "Bearer "+testKey {
		t.Fatalf("authorization not passed on: %q", got)
	}
	if strings.Contains(f.logs.String(), testKey) || strings.Contains(f.logs.String(), "SECRET") {
		t.Error("the key is in the logs")
	}
	ids, _ := f.eng.ListSessions(context.Background())
	for _, id := range ids {
		_ = f.eng.Events(context.Background(), id, 1, false, func(ev checkpoint.Event) error {
			b, _ := json.Marshal(ev)
			if bytes.Contains(b, []byte("SECRET")) {
				t.Errorf("the key is in event %s", b)
			}
			return nil
		})
	}
	err := f.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.DefaultIteratorOptions)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v, _ := it.Item().ValueCopy(nil)
			if bytes.Contains(v, []byte("SECRET")) || bytes.Contains(it.Item().Key(), []byte("SECRET")) {
				t.Errorf("the key is stored under %q", it.Item().Key())
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestRefusesWebPagesAndForeignHosts(t *testing.T) {
	f := newFixture(t, testConfig())
	body := newConversation().user("x").body()
	for _, hdr := range []map[string]string{{"Origin": "http://evil.example"}, {"Referer": "http://evil.example/"}} {
		resp, b := f.post(body, hdr)
		if resp.StatusCode != 403 || !strings.Contains(string(b), "permission_error") {
			t.Errorf("%v: %d %s", hdr, resp.StatusCode, b)
		}
	}
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(f.url, "http://"))
	// A foreign name, a loopback name without the listener's port (port
	// 80), or on another port: refused with the documented error.
	for _, host := range []string{"evil.example", "evil.example:" + port, "localhost", "127.0.0.1", "[::1]", "127.0.0.1:1"} {
		req, _ := http.NewRequest("POST", f.url+"/v1/messages", strings.NewReader(body))
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 403 || !strings.Contains(string(b), "permission_error") || !strings.Contains(string(b), "Host") {
			t.Errorf("Host %q: %d %s", host, resp.StatusCode, b)
		}
	}
	if n := len(f.up.requests()); n != 0 {
		t.Errorf("%d refused requests reached the upstream", n)
	}
}

// Endpoints ctxd does not manage go upstream untouched; no daemon API route
// is served on the proxy listener.
func TestOtherEndpointsForwardedUntouched(t *testing.T) {
	f := newFixture(t, testConfig())
	f.up.script(reply{status: 200, body: `{"input_tokens":12}`}, reply{status: 404, body: ``}, reply{status: 200, body: `{"data":[]}`}, reply{status: 404, body: `nope`})
	body := `{"model":"claude-opus-4-8","messages":[{"role":"user","content":"hi","cache_control":{"type":"ephemeral"}}]}`
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/messages/count_tokens?beta=true", body},
		{"HEAD", "/", ""},
		{"GET", "/v1/models", ""},
		{"GET", "/v1/status", ""},
	} {
		req, _ := http.NewRequest(c.method, f.url+c.path, strings.NewReader(c.body))
		req.Header.Set("X-Api-Key", testKey)
		req.Header.Set("X-Ctxd-Foo", "1") // ctxd's own headers never go upstream
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	reqs := f.up.requests()
	if len(reqs) != 4 {
		t.Fatalf("%d upstream requests", len(reqs))
	}
	for _, r := range reqs {
		if r.header.Get("X-Ctxd-Foo") != "" {
			t.Errorf("%s: X-Ctxd-Foo reached the upstream", r.path)
		}
	}
	if reqs[0].path != "/v1/messages/count_tokens?beta=true" || string(reqs[0].body) != body || reqs[0].header.Get("X-Api-Key") != testKey {
		t.Errorf("count_tokens: %s %s", reqs[0].path, reqs[0].body)
	}
	if reqs[3].path != "/v1/status" {
		t.Errorf("daemon route served locally? upstream saw %s", reqs[3].path)
	}
	if ids, _ := f.eng.ListSessions(context.Background()); len(ids) != 0 {
		t.Errorf("sessions %v from unmanaged endpoints", ids)
	}
}

// A non-streamed answer is recorded too.
func TestNonStreamingAnswerRecorded(t *testing.T) {
	f := newFixture(t, testConfig())
	ans := `{"id":"msg_1","type":"message","role":"assistant","model":"claude-opus-4-8","content":[{"type":"text","text":"Done."}],"stop_reason":"end_turn","usage":{"input_tokens":321,"output_tokens":4}}`
	f.up.script(reply{status: 200, body: ans})
	c := newConversation().user("x")
	c.extra = `"stream":false`
	resp, got := f.post(c.body(), nil)
	if string(got) != ans {
		t.Fatalf("client got %s", got)
	}
	f.settle()
	a, _ := f.eng.Context(context.Background(), resp.Header.Get(HeaderSessionID), engineNoPreSend)
	if len(a.Messages) != 2 || a.Messages[1].Content[0].Text != "Done." || a.Messages[1].Usage.InputTokens != 321 {
		t.Errorf("recorded %+v", a.Messages)
	}
}

// Errors: an unreachable upstream is the proxy's 502 in the provider's
// shape; an error inside a stream reaches the client and is recorded.
func TestUpstreamErrors(t *testing.T) {
	f := newFixture(t, testConfig())
	mid := sse("", "partial", nil, 10, 1)
	mid = mid[:strings.Index(mid, "event: message_delta")] + "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"
	f.up.script(reply{stream: true, body: mid})
	resp, got := f.post(newConversation().user("x").body(), nil)
	if string(got) != mid {
		t.Fatalf("client got %q", got)
	}
	id := resp.Header.Get(HeaderSessionID)
	f.settle()
	st, _ := f.eng.ClientState(context.Background(), id)
	if !strings.Contains(string(st), "overloaded_error") {
		t.Errorf("mid-stream error not recorded: %s", st)
	}
	if n := messageEvents(t, f, id); n != 1 {
		t.Errorf("a cut answer was recorded: %d messages", n)
	}

	f.up.srv.Close()
	resp, got = f.post(newConversation().user("y").body(), nil)
	if resp.StatusCode != 502 || !strings.Contains(string(got), `"type":"error"`) || strings.Contains(string(got), testKey) {
		t.Errorf("upstream down: %d %s", resp.StatusCode, got)
	}
}

// A model the catalog lacks is managed all the same: its window is unknown
// until the provider names it (or the context-limit header gives it), and
// the session says so; Claude Code's context-1m beta gives a catalog
// model a 1M window.
func TestUnknownModel(t *testing.T) {
	f := newFixture(t, testConfig())
	ctx := context.Background()
	c := newConversation().user("x")
	c.model = "claude-local-1"
	resp, _ := f.post(c.body(), nil)
	id := resp.Header.Get(HeaderSessionID)
	if id == "" {
		t.Fatalf("unknown model not managed: %s", resp.Header.Get(HeaderDiagnostic))
	}
	if in, err := f.eng.Session(ctx, id); err != nil || in.WindowSource != engine.WindowUnknown || in.ContextLimit != 0 {
		t.Errorf("unknown model: window %d (%s), %v", in.ContextLimit, in.WindowSource, err)
	}
	c2 := newConversation().user("y")
	c2.model = "claude-local-2"
	resp, _ = f.post(c2.body(), map[string]string{HeaderContextLimit: "200000"})
	if in, err := f.eng.Session(ctx, resp.Header.Get(HeaderSessionID)); err != nil || in.ContextLimit != 200000 || in.WindowSource != engine.WindowSession {
		t.Errorf("with %s: window %d (%s), %v", HeaderContextLimit, in.ContextLimit, in.WindowSource, err)
	}
	c3 := newConversation().user("z")
	c3.model = "claude-opus-4-8"
	resp, _ = f.post(c3.body(), map[string]string{"anthropic-beta": "claude-code-20250219,context-1m-2025-08-07,interleaved-thinking-2025-05-14"})
	if in, err := f.eng.Session(ctx, resp.Header.Get(HeaderSessionID)); err != nil || in.ContextLimit != 1000000 || in.WindowSource != engine.WindowWire {
		t.Errorf("context-1m beta: window %d (%s), %v", in.ContextLimit, in.WindowSource, err)
	}
}

// After a restart (all memory gone) the next request extends the recorded
// session, and the upstream gets the same context as it would have.
func TestRestartKeepsMatching(t *testing.T) {
	f := newFixture(t, testConfig())
	c := newConversation().user("task")
	f.up.script(reply{stream: true, body: sse("", "", [][3]string{{"toolu_1", "Bash", `{"command":"ls"}`}}, 100, 5)})
	resp, _ := f.post(c.body(), nil)
	id := resp.Header.Get(HeaderSessionID)
	c.assistant(assistantCall("toolu_1", "Bash", `{"command":"ls"}`)).results([2]string{"toolu_1", "a.go"})
	f.post(c.body(), nil)
	before := f.up.requests()[1].body

	f.restart()
	f.post(c.body(), nil) // the same request again, after the restart: a resend
	after := f.up.requests()[2].body
	if !bytes.Equal(before, after) {
		t.Errorf("after a restart the same request became\n%s\nnot\n%s", after, before)
	}
	c.assistant(assistantText("ok")).user("next")
	resp, _ = f.post(c.body(), nil)
	if resp.Header.Get(HeaderSessionID) != id {
		t.Fatalf("after a restart the conversation went to %s, not %s", resp.Header.Get(HeaderSessionID), id)
	}
	if f.p.Stats().Branches != 0 {
		t.Error("a restart made a branch")
	}
}

// A large tool result is offloaded: the model gets the stub.
func TestLargeToolResultOffloaded(t *testing.T) {
	cfg := testConfig()
	f := newFixture(t, cfg)
	c := newConversation().user("read the log")
	f.up.script(reply{stream: true, body: sse("", "", [][3]string{{"toolu_1", "Bash", `{"command":"cat big.log"}`}}, 100, 5)})
	f.post(c.body(), nil)
	big := strings.Repeat("log line with some words\n", 2000)
	c.assistant(assistantCall("toolu_1", "Bash", `{"command":"cat big.log"}`)).results([2]string{"toolu_1", big})
	f.post(c.body(), nil)
	out := f.up.requests()[1].body
	if bytes.Contains(out, []byte(big)) || len(out) > len(big)/2 || !bytes.Contains(out, []byte("artifact://")) {
		t.Errorf("the upstream got %d bytes for a %d-byte result", len(out), len(big))
	}
	if v := strictCheck("/v1/messages", out); v != "" {
		t.Errorf("outgoing request invalid: %s", v)
	}
}

// A client request that itself breaks a provider rule for its thinking
// setting (thinking on, and its tool loop's assistant message has no
// thinking) is forwarded as sent for the provider to judge, with a
// diagnostic; it is not a ctxd violation (Violations counts what ctxd
// produced) and is not recorded.
func TestProviderRuleViolationNotSent(t *testing.T) {
	f := newFixture(t, testConfig())
	c := newConversation().user("go")
	c.thinking = `{"type":"enabled","budget_tokens":1024}`
	c.assistant(assistantCall("toolu_1", "Bash", `{"command":"ls"}`)).results([2]string{"toolu_1", "a.go"})
	body := c.body()
	resp, _ := f.post(body, nil)
	if got := string(f.up.requests()[0].body); got != body {
		t.Errorf("the upstream got ctxd's context, not the client's request")
	}
	diag := resp.Header.Get(HeaderDiagnostic)
	if !strings.Contains(diag, "loop_thinking_missing") || !strings.Contains(diag, "client's own request") {
		t.Errorf("diagnostic %q", diag)
	}
	if s := f.p.Stats(); s.Violations != 0 || s.ClientRuleBreaks != 1 {
		t.Errorf("stats %+v: want 0 violations, 1 client rule break", s)
	}
	f.up.allowRefusals = true
	if ids, _ := f.eng.ListSessions(context.Background()); len(ids) != 0 {
		t.Errorf("the broken request was recorded: sessions %v", ids)
	}
}

// A rewrite names the branch it was forked from — the one sharing the
// longest prefix with it (branch_of) — not merely the newest branch.
func TestBranchOfNamesTheForkedBranch(t *testing.T) {
	f := newFixture(t, testConfig())
	c := newConversation().user("u1")
	resp, _ := f.post(c.body(), nil)
	b0 := resp.Header.Get(HeaderSessionID)
	c.assistant(assistantText("ok")).user("u2")
	f.post(c.body(), nil)
	c.assistant(assistantText("ok")).user("u3")
	f.post(c.body(), nil)
	// An edit at the second message: branch 1, forked from branch 0.
	e1 := newConversation().user("u1").assistant(assistantText("edited")).user("u4")
	resp, _ = f.post(e1.body(), nil)
	b1 := resp.Header.Get(HeaderSessionID)
	// An edit of branch 0 at its fourth message: it shares three messages
	// with branch 0 and one with branch 1.
	e2 := newConversation().user("u1").assistant(assistantText("ok")).user("u2").assistant(assistantText("edited too")).user("u5")
	resp, _ = f.post(e2.body(), nil)
	b2 := resp.Header.Get(HeaderSessionID)
	if b1 == b0 || b2 == b0 || b2 == b1 {
		t.Fatalf("sessions %s %s %s: want three branches", b0, b1, b2)
	}
	ctx := context.Background()
	for _, c := range []struct{ id, of string }{{b1, b0}, {b2, b0}} {
		info, err := f.eng.Session(ctx, c.id)
		if err != nil || info.Labels["proxy.branch_of"] != c.of {
			t.Errorf("%s: branch_of %q, want %q (%v)", c.id, info.Labels["proxy.branch_of"], c.of, err)
		}
		st, _ := f.eng.ClientState(ctx, c.id)
		var rec record
		_ = json.Unmarshal(st, &rec)
		if rec.BranchOf != c.of {
			t.Errorf("%s: record branch_of %q, want %q", c.id, rec.BranchOf, c.of)
		}
	}
	f.settle()
	st, _ := f.eng.ClientState(ctx, b1)
	var rec record
	_ = json.Unmarshal(st, &rec)
	if rec.SupersededBy != "" {
		t.Errorf("branch 1 superseded by %q; branch 2 was forked from branch 0", rec.SupersededBy)
	}
}
