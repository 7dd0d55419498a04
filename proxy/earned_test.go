package proxy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/identity"
	"github.com/ctxd/ctxd/server"
)

// authError is the provider's 401 for a bad key.
const authError = `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`

func (f *fixture) sessions() []string {
	f.t.Helper()
	ids, err := f.eng.ListSessions(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	return ids
}

// TestRefusedRequestLeavesNoState: a conversation is recorded only once
// the upstream accepted a request of it: a request the upstream refuses
// (401, or any error before the answer's first byte) leaves no session,
// and a refused rewrite neither adds a branch nor marks the branch it
// would replace superseded. An accepted one records as before.
func TestRefusedRequestLeavesNoState(t *testing.T) {
	f := newFixture(t, testConfig())
	f.up.script(reply{status: 401, body: authError}, reply{status: 529, body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`})
	c := newConversation().user("hello")
	for _, want := range []int{401, 529} {
		if resp, b := f.post(c.body(), nil); resp.StatusCode != want {
			t.Fatalf("got %d %s, want %d", resp.StatusCode, b, want)
		}
		f.settle()
		if ids := f.sessions(); len(ids) != 0 {
			t.Fatalf("refused with %d: sessions %v stored", want, ids)
		}
	}
	resp, _ := f.post(c.body(), nil)
	id := resp.Header.Get(HeaderSessionID)
	f.settle()
	if info, err := f.eng.Session(context.Background(), id); err != nil || info.Messages != 2 {
		t.Fatalf("accepted: %+v %v", info, err)
	}
	// A rewrite (another answer in the client's history) refused: no new
	// branch, the old one not superseded.
	rewrite := newConversation().user("hello").assistant(assistantText("something else")).user("next")
	f.up.script(reply{status: 401, body: authError})
	if resp, _ := f.post(rewrite.body(), nil); resp.StatusCode != 401 {
		t.Fatalf("rewrite: %d", resp.StatusCode)
	}
	f.settle()
	if ids := f.sessions(); len(ids) != 1 {
		t.Fatalf("a refused rewrite left sessions %v", ids)
	}
	st, _ := f.eng.ClientState(context.Background(), id)
	if strings.Contains(string(st), "superseded_by") {
		t.Fatalf("a refused rewrite marked the branch superseded: %s", st)
	}
	if resp, _ := f.post(rewrite.body(), nil); resp.StatusCode != 200 {
		t.Fatal("rewrite accepted")
	}
	f.settle()
	if ids := f.sessions(); len(ids) != 2 {
		t.Fatalf("an accepted rewrite: sessions %v", ids)
	}
	if st, _ := f.eng.ClientState(context.Background(), id); !strings.Contains(string(st), "superseded_by") {
		t.Fatalf("an accepted rewrite did not mark the old branch: %s", st)
	}
}

// TestWindowHeaderCostsNothingUntilAccepted: a client whose credential
// the upstream refuses, with X-Ctxd-Context-Limit far under its
// conversation, makes ctxd compact nothing (not even extractively) and
// leaves no session; once the upstream accepted the credential, the header
// sets the session's window and compactions run.
func TestWindowHeaderCostsNothingUntilAccepted(t *testing.T) {
	f := newFixture(t, testConfig())
	long := func(key string) *http.Response {
		c := newConversation().user("investigate the failing build")
		for i := 0; i < 8; i++ {
			id := "toolu_" + string(rune('a'+i))
			c.assistant(assistantCall(id, "Bash", `{"command":"ls"}`)).results([2]string{id, strings.Repeat("word ", 700)})
		}
		resp, _ := f.post(c.user("go on").body(), map[string]string{"X-Api-Key": key, HeaderContextLimit: "6000"})
		f.settle()
		return resp
	}
	for i := 0; i < 3; i++ {
		f.up.script(reply{status: 401, body: authError})
		if resp := long("not-a-valid-key-000111222"); resp.StatusCode != 401 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		reqs := f.up.requests()
		if got := outgoingMessages(t, reqs[len(reqs)-1].body); len(got) != 18 {
			t.Fatalf("a refused client's request went out with %d messages of 18: ctxd compacted it", len(got))
		}
	}
	if ids := f.sessions(); len(ids) != 0 {
		t.Fatalf("a refused client left sessions %v", ids)
	}
	f.post(newConversation().user("hi").body(), nil) // the credential accepted
	resp := long(testKey)
	id := resp.Header.Get(HeaderSessionID)
	info, err := f.eng.Session(context.Background(), id)
	if err != nil || info.ContextLimit != 6000 {
		t.Fatalf("accepted: %+v %v", info, err)
	}
	if len(compactions(t, f, id)) == 0 {
		t.Fatal("an accepted client's session over its window was not compacted")
	}
}

// TestOperatorBindingsOnlyForAcceptedCredentials: with proxy.summarizer =
// "bindings", a client whose credential the upstream refuses never causes
// a call on the operator's binding (whatever its conversation's size); a
// client it accepted does.
func TestOperatorBindingsOnlyForAcceptedCredentials(t *testing.T) {
	var calls atomic.Int32
	op := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, summaryAnswer)
	}))
	defer op.Close()
	t.Setenv("CTXD_TEST_OPERATOR_KEY", "operator-key-0123456789abcdef")
	cfg := testConfig()
	cfg.Proxy.Summarizer = config.ProxySummarizerBindings
	cfg.Summarizer.Bindings = []config.Binding{{Name: "operator", Provider: "anthropic", Model: "claude-haiku-4-5", BaseURL: op.URL, APIKeyEnv: "CTXD_TEST_OPERATOR_KEY"}}
	cfg.Models["tiny-model"] = config.Model{ContextLimit: 6000, TokenFactor: 1}
	f := newFixture(t, cfg)
	long := func(key string) {
		c := newConversation().user("investigate the failing build")
		c.model = "tiny-model"
		for i := 0; i < 8; i++ {
			id := "toolu_" + string(rune('a'+i))
			c.assistant(assistantCall(id, "Bash", `{"command":"ls"}`)).results([2]string{id, strings.Repeat("word ", 700)})
		}
		resp, _ := f.post(c.user("go on").body(), map[string]string{"X-Api-Key": key})
		f.jobsDone(resp.Header.Get(HeaderSessionID))
	}
	for i := 0; i < 3; i++ {
		f.up.script(reply{status: 401, body: authError})
		long("not-a-valid-key-000111222")
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("a refused credential caused %d calls on the operator's binding", n)
	}
	f.post(newConversation().user("hi").body(), nil) // accepted: its credential may cost the operator
	long(testKey)
	if calls.Load() == 0 {
		t.Fatal("an accepted credential's compaction never reached the operator's binding (the test shows nothing)")
	}
}

// TestDeletedBranchNeverReused: after a proxied branch is deleted and the
// daemon restarted, a later rewrite never continues a stored session of
// the conversation that the proxy does not hold: the upstream gets
// exactly the client's messages.
func TestDeletedBranchNeverReused(t *testing.T) {
	f := newFixture(t, testConfig())
	hdr := map[string]string{HeaderSession: "agent-stale"}
	a := newConversation().user("one").assistant(assistantText("two")).user("three").assistant(assistantText("four")).user("five")
	resp, _ := f.post(a.body(), hdr)
	b0 := resp.Header.Get(HeaderSessionID)
	b := newConversation().user("one").assistant(assistantText("other")).user("six")
	resp, _ = f.post(b.body(), hdr)
	b1 := resp.Header.Get(HeaderSessionID)
	if b1 == b0 || b1 == "" {
		t.Fatalf("branches %q %q", b0, b1)
	}
	f.settle()
	if err := f.eng.DeleteSession(context.Background(), b0); err != nil {
		t.Fatal(err)
	}
	f.restart()
	for _, c := range []*conversation{
		newConversation().user("one").assistant(assistantText("x")).user("y"),
		newConversation().user("one").assistant(assistantText("z")).user("w"),
	} {
		resp, _ := f.post(c.body(), hdr)
		reqs := f.up.requests()
		if got := outgoingMessages(t, reqs[len(reqs)-1].body); len(got) != 3 || resp.Header.Get(HeaderSessionID) == b1 {
			t.Fatalf("the client sent 3 messages, the upstream got %d (session %s, the stale branch %s)", len(got), resp.Header.Get(HeaderSessionID), b1)
		}
	}
}

// TestQuotas: a credential at proxy.quotas.sessions gets 403 naming the
// key for a new conversation, its others still served; one over
// proxy.quotas.bytes likewise; Usage shows each credential's hash, never
// the credential.
func TestQuotas(t *testing.T) {
	cfg := testConfig()
	cfg.Proxy.Quotas.Sessions = 2
	cfg.Proxy.Quotas.Bytes = 20000
	f := newFixture(t, cfg)
	for i, first := range []string{"alpha", "bravo"} {
		if resp, _ := f.post(newConversation().user(first).body(), nil); resp.StatusCode != 200 {
			t.Fatalf("conversation %d: %d", i, resp.StatusCode)
		}
	}
	resp, b := f.post(newConversation().user("charlie").body(), nil)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "proxy.quotas.sessions") {
		t.Fatalf("a third session: %d %s", resp.StatusCode, b)
	}
	// Another credential is not counted against this one.
	if resp, _ := f.post(newConversation().user("charlie").body(), map[string]string{"X-Api-Key": "second-client-key-0099"}); resp.StatusCode != 200 {
		t.Fatalf("another credential: %d", resp.StatusCode)
	}
	big := newConversation().user("alpha").assistant(assistantText("ok")).user(strings.Repeat("y", 30000))
	resp, b = f.post(big.body(), nil)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "proxy.quotas.bytes") {
		t.Fatalf("over the bytes: %d %s", resp.StatusCode, b)
	}
	us, err := f.p.Usage(context.Background())
	if err != nil || len(us) != 2 {
		t.Fatalf("usage %+v %v", us, err)
	}
	fp := identity.Fingerprint(testSecret, http.Header{"X-Api-Key": {testKey}})
	if us[0].Credential != fp[:12] || us[0].Sessions != 2 || us[0].Bytes == 0 {
		t.Fatalf("usage %+v", us)
	}
	out, _ := json.Marshal(us)
	if strings.Contains(string(out), testKey) {
		t.Fatal("usage shows a credential")
	}
	// After a restart the counts are read back from the store.
	f.restart()
	if resp, b := f.post(newConversation().user("delta").body(), nil); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("after a restart: %d %s", resp.StatusCode, b)
	}
}

// TestSessionExpiry: Expire deletes the proxied sessions idle for
// proxy.quotas.session_expiry_hours, with their files, and nothing else.
func TestSessionExpiry(t *testing.T) {
	cfg := testConfig()
	cfg.Proxy.Quotas.SessionExpiryHours = 24
	f := newFixture(t, cfg)
	resp, _ := f.post(newConversation().user("hello").body(), nil)
	id := resp.Header.Get(HeaderSessionID)
	f.settle()
	dir := filepath.Join(f.cfg.Storage.DataDir, id)
	_ = os.MkdirAll(dir, 0o700)
	_ = os.WriteFile(filepath.Join(dir, "x.txt"), []byte("offloaded"), 0o600)
	if n, err := f.p.Expire(context.Background(), time.Now().Add(23*time.Hour)); err != nil || n != 0 {
		t.Fatalf("before its time: %d %v", n, err)
	}
	if n, err := f.p.Expire(context.Background(), time.Now().Add(25*time.Hour)); err != nil || n != 1 {
		t.Fatalf("expired: %d %v", n, err)
	}
	if ids := f.sessions(); len(ids) != 0 {
		t.Fatalf("sessions left %v", ids)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("its files are left: %v", err)
	}
	if us, _ := f.p.Usage(context.Background()); len(us) != 0 {
		t.Fatalf("usage after expiry %+v", us)
	}
	// The conversation starts again, fresh.
	if resp, _ := f.post(newConversation().user("hello").body(), nil); resp.StatusCode != 200 || resp.Header.Get(HeaderSessionID) == "" {
		t.Fatal("after expiry")
	}
}

// TestClientKeyNeverRecorded: a client credential of no known shape, echoed
// by the upstream in an error, is held on the redactor while the proxy
// holds it: last_error and the proxy's own log lines carry no part of it.
func TestClientKeyNeverRecorded(t *testing.T) {
	f := newFixture(t, testConfig())
	key := "hunter2-plain-client-credential-7f3a9c"
	hdr := map[string]string{"X-Api-Key": key}
	c := newConversation().user("hello")
	resp, _ := f.post(c.body(), hdr)
	id := resp.Header.Get(HeaderSessionID)
	f.up.script(reply{status: 400, body: `{"type":"error","error":{"type":"invalid_request_error","message":"bad request from key ` + key + `"}}`})
	c.assistant(assistantText("ok")).user("more")
	if resp, _ := f.post(c.body(), hdr); resp.StatusCode != 400 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	f.settle()
	st, _ := f.eng.ClientState(context.Background(), id)
	if !strings.Contains(string(st), "bad request from key [REDACTED]") || strings.Contains(string(st), key[:12]) {
		t.Fatalf("last_error: %s", st)
	}
	if f.p.red.Held() == 0 {
		t.Fatal("the session's credential is not held on the redactor")
	}
	if strings.Contains(f.p.red.String("echo "+key), key[8:20]) {
		t.Fatal("the held credential is not masked in part")
	}
}

// TestOverflowRecoveredOnlyWhenTheRetryIsAccepted: status counts an
// overflow as recovered only when the upstream accepted the retry; a
// retry refused for another reason (here a 529) is a failed recovery.
func TestOverflowRecoveredOnlyWhenTheRetryIsAccepted(t *testing.T) {
	f := newFixture(t, testConfig())
	c := longConversation(f, 6, 300, nil)
	f.up.script(reply{status: 400, body: overflowBody(t, "anthropic_400_prompt_too_long_with_request_id_1")},
		reply{status: 529, body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`})
	if resp, _ := f.post(c.body(), nil); resp.StatusCode != 529 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	// The outcome is counted once the retry's answer has been passed on:
	// wait for the handler to finish.
	f.settle()
	if n := f.p.Stats().Overflows; n != 0 {
		t.Fatalf("a refused retry counted as %d recovered overflows", n)
	}
	if got := gathered(t, f, server.MetricProxyOverflowRetries, map[string]string{"api": "anthropic", "outcome": "failed"}); got != 1 {
		t.Fatalf("failed recoveries metric %v", got)
	}
}

// TestAnthropicOAuthTokenStaysWithAnthropic: a request ctxd does not
// manage, carrying an Anthropic OAuth token as a bearer token and no
// anthropic-version, goes to the Anthropic upstream, never to the OpenAI
// one (which would receive the token).
func TestAnthropicOAuthTokenStaysWithAnthropic(t *testing.T) {
	var openaiHits atomic.Int32
	oa := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { openaiHits.Add(1) }))
	defer oa.Close()
	f := newFixture(t, testConfig())
	f.p.openai, _ = url.Parse(oa.URL)
	for _, path := range []string{"/v1/models", "/api/oauth/usage"} {
		req, _ := http.NewRequest("GET", f.url+path, nil)
		req.Header.Set("Authorization", "Bearer sk-ant-oat01-abcdefghijklmnop")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
	}
	if openaiHits.Load() != 0 || len(f.up.requests()) != 2 {
		t.Fatalf("openai upstream got %d, anthropic %d", openaiHits.Load(), len(f.up.requests()))
	}
}

// TestEditedToolInputIsSent: a client that edits a recorded tool call's
// input in its history (an agent's "edit and resend") has rewritten the
// answer: the upstream gets the edited input, not ctxd's record of the
// original. The same input re-encoded (spacing, key order) is no edit.
func TestEditedToolInputIsSent(t *testing.T) {
	f := newFixture(t, testConfig())
	call := [][3]string{{"toolu_1", "Bash", `{"command":"ls -la","cwd":"/"}`}}
	f.up.script(reply{stream: true, body: sse("", "", call, 100, 5)}, textAnswer("done"), reply{stream: true, body: sse("", "", call, 100, 5)})
	same := map[string]string{HeaderSession: "agent-same"}
	f.post(newConversation().user("list files").body(), same)
	f.settle()
	reencoded := newConversation().user("list files").assistant(assistantCall("toolu_1", "Bash", `{ "cwd": "/", "command": "ls -la" }`)).
		results([2]string{"toolu_1", "a b c"})
	f.post(reencoded.body(), same)
	if st := f.p.Stats(); st.Branches != 0 {
		t.Fatalf("a re-encoded input made %d branches", st.Branches)
	}
	edit := map[string]string{HeaderSession: "agent-edit"}
	f.post(newConversation().user("list files").body(), edit)
	f.settle()
	edited := newConversation().user("list files").assistant(assistantCall("toolu_1", "Bash", `{"command":"ls /tmp","cwd":"/"}`)).
		results([2]string{"toolu_1", "a b c"})
	f.post(edited.body(), edit)
	reqs := f.up.requests()
	if got := string(reqs[len(reqs)-1].body); !strings.Contains(got, `ls /tmp`) || strings.Contains(got, `ls -la`) {
		t.Fatalf("the upstream did not get the edited input: %s", got)
	}
}

// TestWindowHeaderOnlyFromAuthenticatedClients: X-Ctxd-Context-Limit is
// honoured only for a request that carries a credential the upstream
// accepted — at once when it accepted it before, once it has when the
// conversation's first request is its first — never for one without a
// credential (a Ctxd-Diagnostic says so); a value that is not a window is
// answered 400 naming the header and the range, and nothing goes upstream
// or is recorded.
func TestWindowHeaderOnlyFromAuthenticatedClients(t *testing.T) {
	f := newFixture(t, testConfig())
	window := func(id string) uint64 {
		t.Helper()
		f.settle()
		info, err := f.eng.Session(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return info.ContextLimit
	}
	for _, v := range []string{"abc", "0", "999", "100000001", "-6000", "6e3", "6000 tokens"} {
		resp, b := f.post(newConversation().user("hello "+v).body(), map[string]string{HeaderContextLimit: v})
		if resp.StatusCode != 400 || !strings.Contains(string(b), HeaderContextLimit) || !strings.Contains(string(b), "1000 to 100000000") || !strings.Contains(string(b), "invalid_request_error") {
			t.Fatalf("%q: %d %s, want 400 naming the header and the range", v, resp.StatusCode, b)
		}
	}
	if n := len(f.up.requests()); n != 0 {
		t.Fatalf("%d malformed requests went upstream", n)
	}
	if ids := f.sessions(); len(ids) != 0 {
		t.Fatalf("malformed requests left sessions %v", ids)
	}

	// No credential: the header is not honoured, and the answer says so.
	resp, _ := f.post(newConversation().user("no key").body(), map[string]string{"X-Api-Key": "", HeaderContextLimit: "6000"})
	if d := resp.Header.Get(HeaderDiagnostic); !strings.Contains(d, "not honoured") {
		t.Errorf("no credential: diagnostic %q", d)
	}
	if w := window(resp.Header.Get(HeaderSessionID)); w == 6000 {
		t.Error("the window header of a request without a credential was honoured")
	}

	// A credential the upstream has not accepted yet: the session's window
	// is the header's once its first answer is accepted.
	key := map[string]string{"X-Api-Key": "sk-ant-new-key-0123456789", HeaderContextLimit: "6000"}
	resp, _ = f.post(newConversation().user("new key").body(), key)
	if w := window(resp.Header.Get(HeaderSessionID)); w != 6000 {
		t.Errorf("accepted at the first request: window %d, want 6000", w)
	}
	// Accepted before: honoured when the session is created.
	key[HeaderContextLimit] = "7000"
	resp, _ = f.post(newConversation().user("another conversation").body(), key)
	if w := window(resp.Header.Get(HeaderSessionID)); w != 7000 {
		t.Errorf("an accepted credential: window %d, want 7000", w)
	}
}
