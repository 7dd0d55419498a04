package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/ledger"
)

// agentRequests are the upstream's requests that are not summarizer calls.
func agentRequests(f *fixture) []seen {
	var out []seen
	for _, s := range f.up.requests() {
		if !s.summary {
			out = append(out, s)
		}
	}
	return out
}

func requestEntries(t *testing.T, f *fixture, id string) ([]ledger.Entry, []ledger.Entry, ledger.Totals) {
	t.Helper()
	f.settle()
	all, tot, err := f.eng.Ledger(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var reqs, sums []ledger.Entry
	for _, e := range all {
		switch e.Kind {
		case ledger.KindRequest:
			reqs = append(reqs, e)
		case ledger.KindSummarizer:
			sums = append(sums, e)
		}
	}
	return reqs, sums, tot
}

// TestLedgerEntryPerRequestAcrossRestart: every answered request is a
// ledger entry with the usage the upstream reported, the compaction's
// summarizer call is an entry of its own on the client's credential, the
// request after it names the compaction, and a restart keeps them all.
func TestLedgerEntryPerRequestAcrossRestart(t *testing.T) {
	f := newFixture(t, testConfig())
	hdr := map[string]string{HeaderContextLimit: "6000"}
	c := longConversationUsage(f, 8, 250, hdr, func(i int) int { return 500 * (i + 1) })
	// The ninth request crosses the threshold: compacted once the
	// upstream accepted it, and the tenth is sent compacted.
	f.up.script(crossingAnswer(4500))
	resp, _ := f.post(c.body(), hdr)
	id := resp.Header.Get(HeaderSessionID)
	f.jobsDone(id)
	c.assistant(assistantText("ok")).user("next")
	f.post(c.body(), hdr)
	reqs, sums, tot := requestEntries(t, f, id)
	// Every request is managed (X-Ctxd-Context-Limit is taken from the
	// first; nothing compacts before the upstream authenticated the
	// credential) and has its entry.
	if len(reqs) != len(agentRequests(f)) || len(reqs) != 10 {
		t.Fatalf("%d request entries for %d agent requests", len(reqs), len(agentRequests(f)))
	}
	for i, e := range reqs[:8] {
		if e.Reported.Input != uint64(500*(i+1)) || e.Reported.Output != 5 || e.Mode != ledger.ModeEnforce || e.Cost <= 0 {
			t.Errorf("entry %d: %+v", i, e)
		}
	}
	if len(sums) != 1 || sums[0].Credential != ledger.CredentialClient || sums[0].Reported.CacheRead != 4000 || sums[0].Reported.Output != 40 || sums[0].Model != "claude-opus-4-8" {
		t.Fatalf("summarizer entries %+v; the session's log:%s", sums, sessionLog(f, id))
	}
	last := reqs[len(reqs)-1]
	if !slices.Contains(last.Rewrites, ledger.CauseCompaction) || last.SentTokens >= last.ClientTokens {
		t.Fatalf("the request after the compaction: %+v", last)
	}
	if tot.Summarizer != sums[0].Cost || tot.Requests != 10 {
		t.Fatalf("totals %+v", tot)
	}
	f.restart()
	reqs2, sums2, tot2 := requestEntries(t, f, id)
	info, err := f.eng.Session(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs2) != len(reqs) || len(sums2) != 1 || tot2.Saved != tot.Saved || info.Ledger == nil || info.Ledger.Requests != 10 {
		t.Fatalf("after a restart: %d entries, totals %+v, info %+v", len(reqs2), tot2, info.Ledger)
	}
}

// TestRewriteIsEnteredOnTheRequestItShaped: a compaction that the request
// crossing the threshold sets off, and that ends while that request's
// answer is still streaming, is a rewrite of the next request's context,
// not of the request sent before it: the ledger names it on the next
// entry (whose cache writes it causes) and not on the request's own.
func TestRewriteIsEnteredOnTheRequestItShaped(t *testing.T) {
	f := newFixture(t, testConfig())
	hdr := map[string]string{HeaderContextLimit: "6000"}
	c := longConversationUsage(f, 8, 250, hdr, func(i int) int { return 500 * (i + 1) })
	// The ninth request crosses the threshold; its answer is held until
	// the compaction the upstream's acceptance set off is stored.
	f.up.script(reply{stream: true, body: sse("", "ok", nil, 4500, 5), hold: func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ids, err := f.eng.ListSessions(ctx)
		if err != nil || len(ids) != 1 {
			t.Errorf("sessions %v %v", ids, err)
			return
		}
		errStored := errors.New("stored")
		err = f.eng.Events(ctx, ids[0], 1, true, func(ev checkpoint.Event) error {
			if ev.Kind == checkpoint.KindCheckpoint {
				return errStored
			}
			return nil
		})
		if !errors.Is(err, errStored) {
			t.Errorf("no checkpoint while the answer was held: %v", err)
		}
	}})
	resp, _ := f.post(c.body(), hdr)
	id := resp.Header.Get(HeaderSessionID)
	c.assistant(assistantText("ok")).user("next")
	f.post(c.body(), hdr)
	reqs, _, _ := requestEntries(t, f, id)
	if len(reqs) != 10 {
		t.Fatalf("%d request entries, want 10", len(reqs))
	}
	if ninth := reqs[8]; slices.Contains(ninth.Rewrites, ledger.CauseCompaction) {
		t.Errorf("the request sent before the compaction names it: %+v", ninth)
	}
	if tenth := reqs[9]; !slices.Contains(tenth.Rewrites, ledger.CauseCompaction) || tenth.SentTokens >= tenth.ClientTokens {
		t.Errorf("the request sent compacted does not name the compaction: %+v", tenth)
	}
}

// TestCutStreamIsEntered: an answer whose stream ends before message_stop
// is not recorded as an answer, but the provider bills its request: the
// ledger enters it, marked cut, with the usage its message_start reported.
func TestCutStreamIsEntered(t *testing.T) {
	f := newFixture(t, testConfig())
	c := newConversation().user("investigate the failing build")
	full := sse("", "the build fails because", nil, 1234, 5)
	cut := full[:strings.Index(full, "event: content_block_delta")]
	f.up.script(reply{stream: true, body: cut})
	resp, _ := f.post(c.body(), nil)
	id := resp.Header.Get(HeaderSessionID)
	reqs, _, tot := requestEntries(t, f, id)
	if len(reqs) != 1 || !reqs[0].Cut || reqs[0].Reported.Input != 1234 || reqs[0].Cost <= 0 || tot.Requests != 1 {
		t.Fatalf("entries of a cut stream %+v, totals %+v", reqs, tot)
	}
	// The next, whole answer is entered as usual.
	f.up.script(reply{stream: true, body: sse("", "ok", nil, 1300, 5)})
	f.post(c.body(), nil)
	reqs, _, _ = requestEntries(t, f, id)
	if len(reqs) != 2 || reqs[1].Cut || reqs[1].Reported.Input != 1300 {
		t.Fatalf("entries after a whole answer %+v", reqs)
	}
}

// TestClientLeavingMidStreamIsEntered: a client that leaves while the
// answer streams (an agent interrupted) leaves a request the provider
// bills: the reverse proxy aborts the response, and the ledger still
// enters the request, marked cut, with message_start's usage.
func TestClientLeavingMidStreamIsEntered(t *testing.T) {
	f := newFixture(t, testConfig())
	c := newConversation().user("investigate the failing build")
	full := sse("", "the build fails because", nil, 4321, 5)
	start := full[:strings.Index(full, "event: content_block_delta")]
	f.up.script(reply{stream: true, body: start, after: func(r *http.Request) {
		// The stream stays open until ctxd drops it, the client gone.
		<-r.Context().Done()
	}})
	req, _ := http.NewRequest("POST", f.url+"/v1/messages?beta=true", strings.NewReader(c.body()))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", testKey)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	id := resp.Header.Get(HeaderSessionID)
	// Read up to the answer's start, then leave.
	got := ""
	buf := make([]byte, 4096)
	for !strings.Contains(got, "content_block_start") {
		n, err := resp.Body.Read(buf)
		got += string(buf[:n])
		if err != nil {
			t.Fatalf("the stream ended before its start: %v (%q)", err, got)
		}
	}
	_ = resp.Body.Close()
	reqs, _, _ := requestEntries(t, f, id)
	if len(reqs) != 1 || !reqs[0].Cut || reqs[0].Reported.Input != 4321 {
		t.Fatalf("entries after the client left mid-stream: %+v", reqs)
	}
	// The request is in the session's log: the next one extends it.
	f.up.script(reply{stream: true, body: sse("", "ok", nil, 4400, 5)})
	resp2, _ := f.post(c.body(), nil)
	if got := resp2.Header.Get(HeaderSessionID); got != id {
		t.Errorf("the resend went to session %q, not %q", got, id)
	}
}

// TestCachelessUpstreamClaimsNoCacheSaving: an upstream that reports no
// prompt-cache use (this fixture's: input tokens only) gets no phantom
// cache saving through the proxy: every entry is uncached, the request
// ctxd did not send is priced as uncached input of the client's size, no
// cache write gets a cause, and the saving is the input ctxd kept out of
// the requests at the input price, less the summarizer.
func TestCachelessUpstreamClaimsNoCacheSaving(t *testing.T) {
	f := newFixture(t, testConfig())
	hdr := map[string]string{HeaderContextLimit: "6000"}
	c := longConversationUsage(f, 8, 250, hdr, func(i int) int { return 500 * (i + 1) })
	// The ninth request crosses the threshold: compacted once the
	// upstream accepted it, and the tenth is sent compacted.
	f.up.script(crossingAnswer(4500))
	resp, _ := f.post(c.body(), hdr)
	id := resp.Header.Get(HeaderSessionID)
	f.jobsDone(id)
	c.assistant(assistantText("ok")).user("next")
	f.post(c.body(), hdr)
	reqs, _, tot := requestEntries(t, f, id)
	if len(reqs) != 10 {
		t.Fatalf("%d request entries", len(reqs))
	}
	p, ok := ledger.PriceOf(f.eng.Config(), "claude-opus-4-8")
	if !ok {
		t.Fatal("claude-opus-4-8 has no price")
	}
	var kept uint64
	for i, e := range reqs {
		if !e.Uncached || e.Counterfactual.CacheRead+e.Counterfactual.CacheWrite() != 0 || len(e.Causes) != 0 || e.Counterfactual.Input != e.ClientTokens {
			t.Fatalf("entry %d of a cache-less upstream: %+v", i, e)
		}
		kept += e.ClientTokens - e.SentTokens
	}
	if kept == 0 || tot.Uncached != 10 || len(tot.CacheWrites) != 0 {
		t.Fatalf("kept %d tokens out; totals %+v; the session's log:%s", kept, tot, sessionLog(f, id))
	}
	if want := float64(kept)*p.Input/1e6 - tot.Summarizer; math.Abs(tot.Saved-want) > 1e-9 {
		t.Fatalf("saved $%v, want $%v (the %d tokens kept out at the input price, less the summarizer)", tot.Saved, want, kept)
	}
}

// TestObserveModeSendsTheClientsBytes: with [proxy] mode = "observe" every
// request goes upstream byte-identical to the client's, and the ledger
// projects ctxd's context, compaction included.
func TestObserveModeSendsTheClientsBytes(t *testing.T) {
	cfg := testConfig()
	cfg.Proxy.Mode = config.ProxyModeObserve
	f := newFixture(t, cfg)
	hdr := map[string]string{HeaderContextLimit: "6000"}
	var sent []string
	var session string
	c := newConversation().user("investigate the failing build")
	// The ninth request crosses the threshold: compacted once the
	// upstream accepted it, and the tenth is projected compacted.
	for i := range 10 {
		id := "toolu_" + string(rune('a'+i))
		f.up.script(reply{stream: true, body: sse("", "", [][3]string{{id, "Bash", `{"command":"x"}`}}, 500*(i+1), 5)})
		sent = append(sent, c.body())
		resp, _ := f.post(c.body(), hdr)
		session = resp.Header.Get(HeaderSessionID)
		f.jobsDone(session)
		c.assistant(assistantCall(id, "Bash", `{"command":"x"}`)).results([2]string{id, strings.Repeat("output line\n", 150)})
	}
	got := agentRequests(f)
	if len(got) != len(sent) {
		t.Fatalf("%d upstream requests for %d sent", len(got), len(sent))
	}
	for i := range sent {
		if string(got[i].body) != sent[i] {
			t.Fatalf("request %d was not forwarded byte-identical", i)
		}
	}
	reqs, sums, tot := requestEntries(t, f, session)
	if len(reqs) != len(sent) || tot.ObservedRequests != uint64(len(reqs)) || tot.Requests != 0 {
		t.Fatalf("entries %d, totals %+v", len(reqs), tot)
	}
	projected := false
	for _, e := range reqs {
		if e.Mode != ledger.ModeObserve {
			t.Fatalf("entry in mode %q", e.Mode)
		}
		projected = projected || e.SentTokens < e.ClientTokens
	}
	if len(sums) == 0 || !projected {
		t.Fatalf("no compaction projected: %d summarizer entries, entries %+v", len(sums), reqs)
	}
}

// TestModeHeaderIsKeptBySession: X-Ctxd-Mode: observe switches a session to
// observe mode for this request and the following ones; a value that is not
// a mode is refused naming the header.
func TestModeHeaderIsKeptBySession(t *testing.T) {
	f := newFixture(t, testConfig())
	c := newConversation().user("hello")
	resp, _ := f.post(c.body(), map[string]string{HeaderMode: "observe"})
	id := resp.Header.Get(HeaderSessionID)
	c.assistant(assistantText("ok")).user("more")
	f.post(c.body(), nil)
	if mode, _ := f.eng.Mode(context.Background(), id); mode != ledger.ModeObserve {
		t.Fatalf("session mode %q", mode)
	}
	reqs, _, _ := requestEntries(t, f, id)
	if len(reqs) != 2 || reqs[1].Mode != ledger.ModeObserve {
		t.Fatalf("entries %+v", reqs)
	}
	got := agentRequests(f)
	if string(got[1].body) != c.body() {
		t.Fatal("the session's observe mode did not forward the client's bytes")
	}
	resp, body := f.post(c.body(), map[string]string{HeaderMode: "shadow"})
	if resp.StatusCode != 400 || !strings.Contains(string(body), HeaderMode) {
		t.Fatalf("bad mode: %d %s", resp.StatusCode, body)
	}
}

// TestDashboardOnTheProxyListener: /ui is served from Options.UI on the
// proxy's listener, read-only, under the listener's checks, never upstream.
func TestDashboardOnTheProxyListener(t *testing.T) {
	f := newFixture(t, testConfig())
	f.p.ui = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "dashboard "+r.URL.Path) })
	get := func(method, path string, hdr map[string]string) (int, string) {
		req, _ := http.NewRequest(method, f.url+path, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	if code, body := get("GET", "/ui/", nil); code != 200 || body != "dashboard /ui/" {
		t.Fatalf("GET /ui/: %d %s", code, body)
	}
	if code, _ := get("GET", "/ui", nil); code != http.StatusFound {
		t.Fatalf("GET /ui: %d", code)
	}
	if code, _ := get("POST", "/ui/api/sessions", nil); code != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d", code)
	}
	if code, _ := get("GET", "/ui/", map[string]string{"Origin": "http://evil.example"}); code != http.StatusForbidden {
		t.Fatalf("from a web page: %d", code)
	}
	if len(f.up.requests()) != 0 {
		t.Fatal("a dashboard request went upstream")
	}
}

// A client that lays its JSON out with white space (Python's json.dumps
// defaults) is not credited with tokens ctxd "kept out" when ctxd sends
// the same content compact: the provider caches tokens, not layout.
func TestClientWhiteSpaceIsNotASaving(t *testing.T) {
	f := newFixture(t, testConfig())
	c := newConversation().user("Find why the build fails.")
	var id string
	for i := range 3 {
		var spaced bytes.Buffer
		if err := json.Indent(&spaced, []byte(c.body()), "", "  "); err != nil {
			t.Fatal(err)
		}
		resp, b := f.post(spaced.String(), nil)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, b)
		}
		id = resp.Header.Get(HeaderSessionID)
		c.assistant(assistantText("ok")).user(fmt.Sprintf("next step %d", i))
	}
	reqs, _, tot := requestEntries(t, f, id)
	if len(reqs) != 3 {
		t.Fatalf("%d request entries", len(reqs))
	}
	for i, e := range reqs {
		if e.ClientTokens != e.SentTokens {
			t.Errorf("request %d: client %d tokens, sent %d: the layout counted as context", i, e.ClientTokens, e.SentTokens)
		}
	}
	if tot.TokensSaved != 0 || math.Abs(tot.Saved) > 1e-12 {
		t.Errorf("saved %d tokens, $%g, for white space", tot.TokensSaved, tot.Saved)
	}
}
