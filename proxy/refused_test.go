package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/internal/fakeprovider"
)

// TestRefusedNewConversationLeavesNoState: the provider's own refusals
// (the fake's real 429, 500 and 529 bodies), and a client that leaves
// before the upstream's first byte, leave no session: neither in the
// listing nor as messages; the provider's status and body reach the
// client unchanged. The first accepted request records the conversation.
func TestRefusedNewConversationLeavesNoState(t *testing.T) {
	fp := fakeprovider.Start(t, fakeprovider.Config{})
	f := newFixture(t, testConfig())
	f.cfg.Proxy.Upstreams.Anthropic.BaseURL = fp.URL()
	f.restart()
	listed := func() int {
		t.Helper()
		f.settle()
		page, _, err := f.eng.ListSessionPage(context.Background(), "", 100)
		if err != nil {
			t.Fatal(err)
		}
		return len(page) + len(f.sessions())
	}
	c := newConversation().user("hello")
	for _, st := range []int{429, 500, 529} {
		fp.FailNext(fakeprovider.Fault{Status: st})
		resp, b := f.post(c.body(), nil)
		if resp.StatusCode != st || !strings.Contains(string(b), `"type":"error"`) {
			t.Fatalf("fault %d: the client got %d %s", st, resp.StatusCode, b)
		}
		if id := resp.Header.Get(HeaderSessionID); id != "" {
			t.Errorf("refused %d names session %s, which it did not keep", st, id)
		}
		if n := listed(); n != 0 {
			t.Fatalf("refused %d: %d sessions listed", st, n)
		}
	}
	resp, b := f.post(c.body(), nil)
	id := resp.Header.Get(HeaderSessionID)
	f.settle()
	if info, err := f.eng.Session(context.Background(), id); resp.StatusCode != 200 || err != nil || info.Messages != 2 {
		t.Fatalf("accepted: %d %s; session %+v %v", resp.StatusCode, b, info, err)
	}

	// A client gone before the upstream's first byte.
	slowURL, arrived := stallingUpstream(t)
	g := newFixture(t, testConfig())
	g.cfg.Proxy.Upstreams.Anthropic.BaseURL = slowURL
	g.restart()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", g.url+"/v1/messages", strings.NewReader(newConversation().user("hello").body()))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", testKey)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
		}
	}()
	<-arrived
	cancel()
	<-done
	g.settle()
	if ids := g.sessions(); len(ids) != 0 {
		t.Fatalf("a client gone before the first byte left sessions %v", ids)
	}
}

// TestRefusedRequestOnAConversationLeavesNoState: on a conversation ctxd
// records, a request the upstream refuses before any byte of an answer
// (401, 403, 400, 429, 500, 529) leaves its messages nowhere: the
// session's message events, its context, its figures and the offload
// files are as before; the only record is the upstream's error (the
// branch's last_error, with the record of what was accounted for
// unchanged). The same request accepted next is recorded whole, its
// oversized result offloaded.
func TestRefusedRequestOnAConversationLeavesNoState(t *testing.T) {
	f := newFixture(t, testConfig())
	ctx := context.Background()
	c := newConversation().user("build it")
	call := [][3]string{{"t1", "Bash", `{"command":"make"}`}}
	f.up.script(reply{stream: true, body: sse("", "", call, 100, 5)})
	resp, _ := f.post(c.body(), nil)
	id := resp.Header.Get(HeaderSessionID)
	if resp.StatusCode != 200 || id == "" {
		t.Fatalf("first request: %d", resp.StatusCode)
	}
	f.settle()
	c.assistant(assistantCall("t1", "Bash", `{"command":"make"}`)).results([2]string{"t1", strings.Repeat("build output line\n", 2000)})

	type state struct {
		messages, others []string
		context          string
		n                int
		info             string
		files            []string
	}
	read := func() state {
		t.Helper()
		f.settle()
		var s state
		err := f.eng.Events(ctx, id, 1, false, func(ev checkpoint.Event) error {
			b, _ := json.Marshal(ev)
			switch ev.Kind {
			case checkpoint.KindMessage:
				s.messages = append(s.messages, string(b))
			case checkpoint.KindClientState:
			default:
				s.others = append(s.others, string(b))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		a, err := f.eng.Context(ctx, id, engineContextNoPreSend())
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(a.Messages)
		s.context = string(b)
		st, _ := f.eng.ClientState(ctx, id)
		var rec record
		_ = json.Unmarshal(st, &rec)
		s.n = rec.N
		info, err := f.eng.Session(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		s.info = fmt.Sprintf("messages %d active %d tokens %d", info.Messages, info.ActiveMessages, info.Tokens)
		_ = filepath.WalkDir(f.cfg.Storage.DataDir, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				s.files = append(s.files, p)
			}
			return nil
		})
		return s
	}
	before := read()
	if len(before.messages) != 2 || before.n != 1 {
		t.Fatalf("before: %d messages, n %d", len(before.messages), before.n)
	}
	for _, st := range []int{401, 403, 400, 429, 500, 529} {
		body := fmt.Sprintf(`{"type":"error","error":{"type":"api_error","message":"refused with %d"}}`, st)
		f.up.script(reply{status: st, body: body})
		resp, b := f.post(c.body(), nil)
		if resp.StatusCode != st || string(b) != body {
			t.Fatalf("%d: the client got %d %s", st, resp.StatusCode, b)
		}
		after := read()
		if !slices.Equal(after.messages, before.messages) || !slices.Equal(after.others, before.others) {
			t.Fatalf("%d: the log changed: %d messages, %d other events (before %d, %d)", st, len(after.messages), len(after.others), len(before.messages), len(before.others))
		}
		if after.context != before.context || after.n != before.n || after.info != before.info || !slices.Equal(after.files, before.files) {
			t.Fatalf("%d: state changed:\n%+v\nbefore:\n%+v", st, after, before)
		}
		if cs, _ := f.eng.ClientState(ctx, id); !strings.Contains(string(cs), fmt.Sprintf("refused with %d", st)) {
			t.Fatalf("%d: last_error not recorded: %s", st, cs)
		}
	}
	resp, _ = f.post(c.body(), nil)
	if resp.StatusCode != 200 {
		t.Fatalf("accepted: %d", resp.StatusCode)
	}
	after := read()
	if len(after.messages) != 4 || after.n != 3 || len(after.files) != len(before.files)+1 {
		t.Fatalf("accepted: %d messages, n %d, files %v", len(after.messages), after.n, after.files)
	}
}

// TestRefusedRequestOverTheThresholdCostsNothing: a request that takes a
// conversation over the compaction threshold, refused by the upstream
// (401 here, for a revoked key), starts no compaction, calls no
// summarizer and writes nothing to the session's log — its checks are
// deferred until the upstream accepts it, and it never does; the same
// request accepted next is compacted once accepted, and the request after
// it goes compacted.
func TestRefusedRequestOverTheThresholdCostsNothing(t *testing.T) {
	f := newFixture(t, testConfig())
	ctx := context.Background()
	hdr := map[string]string{HeaderContextLimit: "6000"}
	// Under the threshold (4200 of 6000) until the last results.
	c := longConversationUsage(f, 8, 250, hdr, func(i int) int { return 500 * (i + 1) })
	f.settle()
	ids := f.sessions()
	if len(ids) != 1 {
		t.Fatalf("sessions %v", ids)
	}
	id := ids[0]
	events := func() []string {
		t.Helper()
		f.settle()
		var out []string
		err := f.eng.Events(ctx, id, 1, false, func(ev checkpoint.Event) error {
			if ev.Kind != checkpoint.KindClientState { // the refusal's last_error
				b, _ := json.Marshal(ev)
				out = append(out, string(b))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	before, sums := events(), len(f.up.summaries())
	if len(compactions(t, f, id)) != 0 {
		t.Fatal("compacted before the request that crosses the threshold: the test shows nothing")
	}
	for range 3 {
		f.up.script(reply{status: 401, body: authError})
		if resp, _ := f.post(c.body(), hdr); resp.StatusCode != 401 {
			t.Fatalf("refused: %d", resp.StatusCode)
		}
		if got := events(); !slices.Equal(got, before) {
			t.Fatalf("the refused request wrote %d events", len(got)-len(before))
		}
		if j := f.pool.Active(id); j != nil {
			t.Fatal("the refused request left a job queued")
		}
		if n := len(f.up.summaries()) - sums; n != 0 {
			t.Fatalf("the refused request made %d summarizer calls", n)
		}
	}
	f.up.script(reply{stream: true, body: sse("", "ok", nil, 4000, 5)})
	resp, _ := f.post(c.body(), hdr)
	if resp.StatusCode != 200 || resp.Header.Get(HeaderSessionID) != id {
		t.Fatalf("accepted: %d, session %q", resp.StatusCode, resp.Header.Get(HeaderSessionID))
	}
	f.jobsDone(id)
	if cs := compactions(t, f, id); len(cs) != 1 || len(f.up.summaries()) != sums+1 {
		t.Fatalf("accepted: compactions %v, %d summarizer calls", cs, len(f.up.summaries())-sums)
	}
	c.assistant(assistantText("ok")).user("next")
	f.post(c.body(), hdr)
	reqs := f.up.requests()
	if out := outgoingMessages(t, reqs[len(reqs)-1].body); len(out) >= len(c.msgs) {
		t.Errorf("the request after the compaction went with %d messages for the client's %d", len(out), len(c.msgs))
	}
}

// TestRefusedRequestWritesNoPass: a request whose tool results set off a
// context-edit pass, refused by the upstream, writes no pass (nor
// anything else); accepted, its pass is written with it.
func TestRefusedRequestWritesNoPass(t *testing.T) {
	cfg := testConfig()
	cfg.ContextEditing.Enabled = true
	cfg.ContextEditing.MaxTotalToolResultChars = 10500
	cfg.ContextEditing.MinCharsPerPass = 4000
	cfg.ContextEditing.KeepRecentTurns = 1
	f := newFixture(t, cfg)
	ctx := context.Background()
	hdr := map[string]string{HeaderContextLimit: "200000"}
	// Four results of ~2,500 characters sent: under the limit; the next
	// request's fifth takes the history over it.
	c := longConversation(f, 5, 250, hdr)
	f.settle()
	ids := f.sessions()
	if len(ids) != 1 {
		t.Fatalf("sessions %v", ids)
	}
	id := ids[0]
	kinds := func() (all []string, passes int) {
		t.Helper()
		f.settle()
		err := f.eng.Events(ctx, id, 1, false, func(ev checkpoint.Event) error {
			if ev.Kind == checkpoint.KindContextEdit {
				passes++
			}
			if ev.Kind != checkpoint.KindClientState {
				b, _ := json.Marshal(ev)
				all = append(all, string(b))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return all, passes
	}
	before, passes := kinds()
	if passes != 0 {
		t.Fatalf("%d passes before the request: the test shows nothing", passes)
	}
	f.up.script(reply{status: 401, body: authError})
	if resp, _ := f.post(c.body(), hdr); resp.StatusCode != 401 {
		t.Fatalf("refused: %d", resp.StatusCode)
	}
	if got, passes := kinds(); passes != 0 || !slices.Equal(got, before) {
		t.Fatalf("the refused request wrote %d events, %d passes", len(got)-len(before), passes)
	}
	if resp, _ := f.post(c.body(), hdr); resp.StatusCode != 200 {
		t.Fatalf("accepted: %d", resp.StatusCode)
	}
	if _, passes := kinds(); passes != 1 {
		info, _ := f.eng.Session(ctx, id)
		b, _ := json.Marshal(info)
		t.Fatalf("the accepted request wrote %d passes, want 1: %s", passes, b)
	}
}

// stallingUpstream starts an upstream that answers nothing: each request
// is signalled on arrived (when nobody waits, dropped) and held until its
// client goes or the test ends. It returns the upstream's URL.
func stallingUpstream(t *testing.T) (url string, arrived <-chan struct{}) {
	t.Helper()
	got, quit := make(chan struct{}, 1), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case got <- struct{}{}:
		default:
		}
		select {
		case <-r.Context().Done():
		case <-quit:
		}
	}))
	t.Cleanup(up.Close)
	t.Cleanup(func() { close(quit) })
	return up.URL, got
}
