package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/wire/openai/responses"
)

// TestConformanceAPIs: the rows of the conformance suite that are an API
// or a request rather than an artifact in a conversation
// (docs/proxy.md "Conformance").
func TestConformanceAPIs(t *testing.T) {
	rows := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"files_multipart_passed_through", conformFiles},
		{"batches_passed_through", conformBatches},
		{"oauth_bearer", conformOAuth},
		{"count_tokens", conformCountTokens},
		{"applied_edits_answer", conformAppliedEdits},
		{"usage_iterations", conformUsageIterations},
		{"responses_compact_endpoint", conformResponsesCompact},
		{"previous_response_id", func(t *testing.T) { conformServerState(t, `,"previous_response_id":"resp_0123"`) }},
		{"conversation", func(t *testing.T) { conformServerState(t, `,"conversation":"conv_0123"`) }},
		{"conversation_object", func(t *testing.T) { conformServerState(t, `,"conversation":{"id":"conv_0123"}`) }},
		{"compaction_trigger", conformCompactionTrigger},
		{"codex_request_kind_compaction", func(t *testing.T) { conformClientCompacting(t, "request_kind") }},
		{"compaction_trigger_not_raced", func(t *testing.T) { conformClientCompacting(t, "trigger") }},
	}
	for _, row := range rows {
		t.Run(row.name, row.run)
	}
}

// send posts body to path with the given headers only (no defaults).
func (f *fixture) send(method, path, body string, hdr map[string]string) (*http.Response, []byte) {
	f.t.Helper()
	req, _ := http.NewRequest(method, f.url+path, strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return resp, b
}

// passedAsSent asserts that the one upstream request is the client's:
// path, body and the named headers.
func passedAsSent(t *testing.T, f *fixture, path, body string, hdr map[string]string) {
	t.Helper()
	reqs := f.up.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d upstream requests", len(reqs))
	}
	if reqs[0].path != path || string(reqs[0].body) != body {
		t.Errorf("forwarded %s with %d bytes, want %s as sent (%d bytes)", reqs[0].path, len(reqs[0].body), path, len(body))
	}
	for k, v := range hdr {
		if got := reqs[0].header.Get(k); got != v {
			t.Errorf("header %s: %q, want %q", k, got, v)
		}
	}
	if s := f.p.Stats(); s.Managed != 0 {
		t.Errorf("stats %+v: nothing is managed", s)
	}
}

// conformFiles: a Files API upload (multipart) goes through untouched.
func conformFiles(t *testing.T) {
	f := newFixture(t, testConfig())
	body := "--b0undary\r\nContent-Disposition: form-data; name=\"file\"; filename=\"notes.txt\"\r\nContent-Type: text/plain\r\n\r\nhello \x00\xff bytes\r\n--b0undary--\r\n"
	hdr := map[string]string{"Content-Type": "multipart/form-data; boundary=b0undary", "X-Api-Key": testKey,
		"Anthropic-Version": "2023-06-01", "Anthropic-Beta": "files-api-2025-04-14"}
	f.up.script(reply{status: 200, body: `{"id":"file_011","type":"file","filename":"notes.txt"}`})
	resp, got := f.send("POST", "/v1/files", body, hdr)
	if resp.StatusCode != 200 || !strings.Contains(string(got), "file_011") {
		t.Fatalf("%d %s", resp.StatusCode, got)
	}
	passedAsSent(t, f, "/v1/files", body, hdr)
}

// conformBatches: a Message Batches request goes through untouched.
func conformBatches(t *testing.T) {
	f := newFixture(t, testConfig())
	body := `{"requests":[{"custom_id":"r1","params":{"model":"claude-opus-4-8","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}}]}`
	hdr := map[string]string{"Content-Type": "application/json", "X-Api-Key": testKey, "Anthropic-Version": "2023-06-01"}
	f.up.script(reply{status: 200, body: `{"id":"msgbatch_01","type":"message_batch","processing_status":"in_progress"}`})
	resp, got := f.send("POST", "/v1/messages/batches", body, hdr)
	if resp.StatusCode != 200 || !strings.Contains(string(got), "msgbatch_01") {
		t.Fatalf("%d %s", resp.StatusCode, got)
	}
	passedAsSent(t, f, "/v1/messages/batches", body, hdr)
}

// conformOAuth: a subscription client's OAuth bearer with the
// oauth-2025-04-20 beta (no x-api-key) goes to the Anthropic upstream,
// is managed, and its credential and beta header arrive as sent.
func conformOAuth(t *testing.T) {
	f := newFixture(t, testConfig())
	hdr := map[string]string{"Content-Type": "application/json", "Authorization": "Bearer sk-ant-oat01-TEST-0123",
		"Anthropic-Version": "2023-06-01", "Anthropic-Beta": "oauth-2025-04-20,claude-code-20250219"}
	c := newConversation().user("fix the build")
	resp, _ := f.send("POST", "/v1/messages?beta=true", c.body(), hdr)
	f.settle()
	if resp.StatusCode != 200 || resp.Header.Get(HeaderSessionID) == "" {
		t.Fatalf("%d, session %q, diagnostic %q", resp.StatusCode, resp.Header.Get(HeaderSessionID), resp.Header.Get(HeaderDiagnostic))
	}
	reqs := f.up.requests()
	if len(reqs) != 1 || !strings.HasPrefix(reqs[0].path, "/v1/messages") {
		t.Fatalf("not forwarded to the Anthropic upstream: %d requests", len(reqs))
	}
	for k, v := range hdr {
		if got := reqs[0].header.Get(k); got != v {
			t.Errorf("header %s: %q, want %q", k, got, v)
		}
	}
	if reqs[0].header.Get("X-Api-Key") != "" {
		t.Error("an x-api-key was added")
	}
}

// conformCountTokens: count_tokens for a conversation ctxd manages counts
// what ctxd would send: the upstream's count_tokens gets ctxd's context
// (the offloaded tool result as its stub), then the client's message that
// is not recorded yet as sent; the messages are those of the next request
// ctxd forwards. Nothing is recorded. A count of a conversation ctxd does
// not know is forwarded as sent.
func conformCountTokens(t *testing.T) {
	f := newFixture(t, testConfig())
	hdr := map[string]string{"X-Claude-Code-Session-Id": "0199-conform-count"}
	c := newConversation().user("fix the build")
	f.up.script(reply{stream: true, body: sse("", "", [][3]string{{"toolu_1", "Bash", `{"command":"cat big.log"}`}}, 100, 5)})
	r1, _ := f.post(c.body(), hdr)
	c.assistant(assistantCall("toolu_1", "Bash", `{"command":"cat big.log"}`))
	c.msgs = append(c.msgs, `{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":`+jsonString(conformBig)+`}]}`)
	f.up.script(textAnswer("The linker failed."))
	f.post(c.body(), hdr)
	f.settle()
	id := r1.Header.Get(HeaderSessionID)
	if id == "" {
		t.Fatalf("not managed: %q", r1.Header.Get(HeaderDiagnostic))
	}
	seq, err := f.eng.LastSeq(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	c.assistant(assistantText("The linker failed.")).user("thanks, fix it")
	countBody := func(c *conversation) string {
		return `{"model":"` + c.model + `","system":` + c.system + `,"tools":` + c.tools + `,"messages":[` + strings.Join(c.msgs, ",") + `]}`
	}
	ch := map[string]string{"Content-Type": "application/json", "X-Api-Key": testKey, "Anthropic-Version": "2023-06-01",
		"X-Claude-Code-Session-Id": "0199-conform-count"}
	f.up.script(reply{status: 200, body: `{"input_tokens":1234}`})
	resp, got := f.send("POST", "/v1/messages/count_tokens?beta=true", countBody(c), ch)
	if resp.StatusCode != 200 || string(got) != `{"input_tokens":1234}` || resp.Header.Get(HeaderSessionID) != id {
		t.Fatalf("%d %s, session %q (want %q), diagnostic %q", resp.StatusCode, got, resp.Header.Get(HeaderSessionID), id, resp.Header.Get(HeaderDiagnostic))
	}
	if s, err := f.eng.LastSeq(context.Background(), id); err != nil || s != seq {
		t.Errorf("the count wrote to the session: last seq %d, was %d (%v)", s, seq, err)
	}
	reqs := f.up.requests()
	counted := reqs[len(reqs)-1]
	if !strings.HasPrefix(counted.path, "/v1/messages/count_tokens") {
		t.Fatalf("the count went to %s", counted.path)
	}
	if bytes.Contains(counted.body, []byte(conformBig[:4000])) || !bytes.Contains(counted.body, []byte("artifact://")) {
		t.Errorf("the count is of the client's history, not ctxd's context (%d bytes)", len(counted.body))
	}
	cm := outgoingMessages(t, counted.body)
	if last, _ := json.Marshal(cm[len(cm)-1]); !bytes.Contains(last, []byte("thanks, fix it")) {
		t.Errorf("the client's new message is not counted: %s", last)
	}
	// The next request ctxd sends holds the messages counted.
	f.post(c.body(), hdr)
	f.settle()
	reqs = f.up.requests()
	if a, b := unmarked(t, counted.body), unmarked(t, reqs[len(reqs)-1].body); !reflect.DeepEqual(a, b) {
		t.Errorf("the count's messages are not those ctxd sends next:\ncounted %v\nsent    %v", a, b)
	}
	// A conversation ctxd does not know: forwarded as sent.
	g := newFixture(t, testConfig())
	other := countBody(newConversation().user("an unknown conversation"))
	g.up.script(reply{status: 200, body: `{"input_tokens":12}`})
	if resp, _ := g.send("POST", "/v1/messages/count_tokens", other, ch); resp.StatusCode != 200 || resp.Header.Get(HeaderSessionID) != "" {
		t.Errorf("an unknown conversation's count: %d, session %q", resp.StatusCode, resp.Header.Get(HeaderSessionID))
	}
	passedAsSent(t, g, "/v1/messages/count_tokens", other, ch)
	if n, _ := g.eng.CountSessions(context.Background()); n != 0 {
		t.Errorf("an unknown conversation's count created %d sessions", n)
	}
}

// conformAppliedEdits: the provider's own context editing (the client's
// context_management) reports applied_edits in its answer; the answer
// reaches the client byte for byte, its usage is recorded with the input
// tokens the edits cleared, and the request that follows is managed, the
// client's context_management carried.
func conformAppliedEdits(t *testing.T) {
	f := newFixture(t, testConfig())
	cm := `"context_management":{"edits":[{"type":"clear_tool_uses_20250919","trigger":{"type":"input_tokens","value":100},"keep":{"type":"tool_uses","value":1}}]}`
	c := newConversation()
	c.extra += "," + cm
	c.user("fix the build")
	answer := `{"id":"msg_1","type":"message","role":"assistant","model":"claude-opus-4-8","content":[{"type":"text","text":"done"}],"stop_reason":"end_turn","usage":{"input_tokens":90,"output_tokens":2},"context_management":{"applied_edits":[{"type":"clear_tool_uses_20250919","cleared_tool_uses":2,"cleared_input_tokens":5000}]}}`
	c.extra = strings.Replace(c.extra, `"stream":true`, `"stream":false`, 1)
	f.up.script(reply{status: 200, body: answer})
	hdr := map[string]string{"Anthropic-Beta": "context-management-2025-06-27"}
	resp, got := f.post(c.body(), hdr)
	if resp.StatusCode != 200 || string(got) != answer {
		t.Fatalf("the answer did not reach the client as sent: %d %s", resp.StatusCode, got)
	}
	c.assistant(assistantText("done")).user("go on")
	f.up.script(reply{status: 200, body: answer})
	resp2, _ := f.post(c.body(), hdr)
	f.settle()
	if resp2.Header.Get(HeaderSessionID) == "" || resp2.Header.Get(HeaderSessionID) != resp.Header.Get(HeaderSessionID) {
		t.Fatalf("the next request is not managed in the same session: %q %q, diagnostic %q", resp.Header.Get(HeaderSessionID), resp2.Header.Get(HeaderSessionID), resp2.Header.Get(HeaderDiagnostic))
	}
	for i, r := range f.up.requests() {
		if !bytes.Contains(r.body, []byte(cm)) {
			t.Errorf("request %d: the client's context_management not carried", i+1)
		}
	}
	// The recorded answer's usage says what the provider's edits cleared
	// (5000 tokens): the calibration takes the request as sent, and ctxd's
	// own passes are taken off the count only beyond it
	// (engine.TestStateProviderClearedInputs).
	a, err := f.eng.Context(context.Background(), resp2.Header.Get(HeaderSessionID), engineNoPreSend)
	if err != nil {
		t.Fatal(err)
	}
	cleared := 0
	for _, m := range a.Messages {
		if m.Role == history.RoleAssistant && m.Usage != nil && m.Usage.ClearedInputTokens == 5000 {
			cleared++
		}
	}
	if cleared != 2 {
		t.Errorf("%d recorded answers with the 5000 tokens the provider cleared; want 2", cleared)
	}
}

// conformResponsesCompact: POST /v1/responses/compact (the client
// compacting with the provider) goes through untouched.
func conformResponsesCompact(t *testing.T) {
	f := newOpenAIFixture(t, openAIConfig(nil))
	c := newCodexConversation()
	body := `{"model":"gpt-5.2-codex","instructions":"Summarize.","input":[` + strings.Join(c.items, ",") + `]}`
	f.up.script(reply{status: 200, body: `{"id":"resp_c","object":"response.compaction","output":[{"type":"compaction","id":"cmp_1","encrypted_content":"gAAA"}]}`})
	hdr := map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + testKey}
	resp, got := f.send("POST", "/v1/responses/compact", body, hdr)
	if resp.StatusCode != 200 || !strings.Contains(string(got), "cmp_1") {
		t.Fatalf("%d %s", resp.StatusCode, got)
	}
	passedAsSent(t, f, "/v1/responses/compact", body, hdr)
}

// conformServerState: a Responses request that continues a conversation
// the provider keeps (previous_response_id, conversation) is forwarded as
// sent, with a diagnostic: ctxd sees only the new items, and pruning them
// locally would lose the turn.
func conformServerState(t *testing.T, member string) {
	f := newOpenAIFixture(t, openAIConfig(nil))
	body := `{"model":"gpt-5.2-codex","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"go on"}]}],"stream":true` + member + `}`
	f.up.script(reply{stream: true, body: responsesSSE([]string{`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"ok"}]}`}, 100, 0, 5)})
	hdr := map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + testKey}
	resp, _ := f.send("POST", "/v1/responses", body, hdr)
	if resp.StatusCode != 200 || resp.Header.Get(HeaderSessionID) != "" || resp.Header.Get(HeaderDiagnostic) == "" {
		t.Fatalf("%d, session %q, diagnostic %q: want forwarded unmanaged, with a diagnostic", resp.StatusCode, resp.Header.Get(HeaderSessionID), resp.Header.Get(HeaderDiagnostic))
	}
	reqs := f.up.requests()
	if len(reqs) != 1 || string(reqs[0].body) != body {
		t.Fatalf("not forwarded as sent: %d requests", len(reqs))
	}
	if s := f.p.Stats(); s.PassedThrough != 1 {
		t.Errorf("stats %+v: want 1 passed through", s)
	}
}

// conformCompactionTrigger: a Responses request whose input ends with a
// compaction_trigger item (the client asks the provider to compact)
// arrives with the item last and the client's items as sent; the trigger
// is never stored (the session's history holds the client's items and the
// provider's compaction item, not the trigger) nor echoed; the request
// that follows, carrying the
// provider's compaction item in place of what it summarized, is managed
// and carries that item byte for byte.
func conformCompactionTrigger(t *testing.T) {
	f := newOpenAIFixture(t, openAIConfig(nil))
	hdr := map[string]string{"Session-Id": "0199-conform-trigger"}
	c := newCodexConversation()
	answer := `{"type":"message","role":"assistant","id":"msg_1","content":[{"type":"output_text","text":"Reading.","annotations":[]}]}`
	f.up.script(reply{stream: true, body: responsesSSE([]string{answer}, 3000, 0, 5)})
	f.postOpenAI("/v1/responses", c.body(""), hdr)
	c.add(answer)
	trigger := `{"type":"compaction_trigger"}`
	items := append(append([]string(nil), c.items...), trigger)
	compaction := `{"type":"compaction","id":"cmp_01","encrypted_content":"gAAAAABpCOMPACTED-0123456789abcdefghijklmnopqrstuvwxyz"}`
	f.up.script(reply{stream: true, body: responsesSSE([]string{compaction}, 3100, 2900, 50)})
	body2 := (&codexConversation{items: items}).body("")
	r2, got2 := f.postOpenAI("/v1/responses", body2, hdr)
	if r2.StatusCode != 200 || !strings.Contains(string(got2), "cmp_01") {
		t.Fatalf("%d %s", r2.StatusCode, got2)
	}
	f.settle()
	if id := r2.Header.Get(HeaderSessionID); id == "" {
		t.Errorf("the request with the trigger is not managed: diagnostic %q", r2.Header.Get(HeaderDiagnostic))
	} else {
		a, err := f.eng.Context(context.Background(), id, engineNoPreSend)
		if err != nil {
			t.Fatal(err)
		}
		var all []byte
		for _, m := range a.Messages {
			enc, _ := history.Encode(m)
			all = append(all, enc...)
		}
		if bytes.Contains(all, []byte("compaction_trigger")) || !bytes.Contains(all, []byte("cmp_01")) {
			t.Errorf("the stored history holds the trigger, or not the provider's compaction item:\n%s", all)
		}
	}
	// Codex's next request: its prefix, the compaction item, a new prompt.
	next := &codexConversation{items: []string{codexDeveloper, codexAddlTools, compaction,
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"go on"}]}`}}
	f.up.script(reply{stream: true, body: responsesSSE([]string{answer}, 400, 0, 5)})
	r3, _ := f.postOpenAI("/v1/responses", next.body(""), hdr)
	f.settle()
	reqs := f.up.requests()
	if len(reqs) != 3 {
		t.Fatalf("%d upstream requests", len(reqs))
	}
	in2 := inputOf(t, reqs[1].body)
	if string(in2[len(in2)-1]) != trigger {
		t.Errorf("the compaction_trigger is not the last input item: %s", in2[len(in2)-1])
	}
	for i, it := range items {
		if i < len(in2) && string(in2[i]) != it {
			t.Errorf("input[%d] is not the client's: %s", i, in2[i])
		}
	}
	if bytes.Count(reqs[1].body, []byte("compaction_trigger")) != 1 {
		t.Errorf("the compaction_trigger is not sent exactly once:\n%s", reqs[1].body)
	}
	if bytes.Contains(reqs[2].body, []byte("compaction_trigger")) {
		t.Errorf("the compaction_trigger was echoed into the next request:\n%s", reqs[2].body)
	}
	if !bytes.Contains(reqs[2].body, []byte(compaction)) {
		t.Errorf("the compaction item did not arrive byte for byte:\n%s", reqs[2].body)
	}
	if d := r3.Header.Get(HeaderDiagnostic); r3.StatusCode != 200 || r3.Header.Get(HeaderSessionID) == "" || d != "" {
		t.Errorf("the request after the compaction: %d, session %q, diagnostic %q", r3.StatusCode, r3.Header.Get(HeaderSessionID), d)
	}
}

// conformClientCompacting: a Responses request with which the client
// compacts its own conversation (Codex's x-codex-turn-metadata with
// request_kind "compaction", or a trailing compaction_trigger) in a
// session over its threshold: ctxd does not race it. No pre-send
// compaction (the client's items go as sent), and a context-length
// refusal reaches the client as it came, with no overflow compaction and
// no retry; the request that the upstream accepts is recorded as usual,
// and its answer's post-check queues no compaction.
func conformClientCompacting(t *testing.T, how string) {
	f := newOpenAIFixture(t, openAIConfig(nil))
	hdr := map[string]string{"Session-Id": "0199-conform-compacting-" + how, HeaderContextLimit: "6000"}
	c := newCodexConversation()
	f.up.script(reply{stream: true, body: responsesSSE([]string{`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Looking."}]}`}, 100, 0, 5)})
	r1, _ := f.postOpenAI("/v1/responses", c.body(""), hdr)
	id := r1.Header.Get(HeaderSessionID)
	if id == "" {
		t.Fatalf("not managed: %q", r1.Header.Get(HeaderDiagnostic))
	}
	c.add(`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Looking."}]}`,
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"go on"}]}`)
	for i := range 3 {
		call := fmt.Sprintf("call_%d", i)
		c.add(fmt.Sprintf(`{"type":"function_call","call_id":%q,"name":"exec_command","arguments":"{\"cmd\":\"step %d\"}"}`, call, i),
			fmt.Sprintf(`{"type":"function_call_output","call_id":%q,"output":%q}`, call, words(i, 1500)))
	}
	h2 := map[string]string{"Session-Id": hdr["Session-Id"], HeaderContextLimit: "6000"}
	if how == "request_kind" {
		h2[responses.TurnMetadataHeader] = `{"turn_id":"0199-turn-7","request_kind":"compaction","sandbox":"none"}`
		c.add(`{"type":"message","role":"user","content":[{"type":"input_text","text":"You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff summary."}]}`)
	} else {
		c.add(`{"type":"compaction_trigger"}`)
	}
	body := c.body("")
	before := len(f.up.requests())
	f.up.script(reply{status: 400, body: overflowBody(t, "openai_responses_context_length_exceeded")})
	r2, got := f.postOpenAI("/v1/responses", body, h2)
	f.settle()
	if r2.StatusCode != 400 || !strings.Contains(string(got), "context_length_exceeded") {
		t.Errorf("the refusal did not reach the client as it came: %d %s", r2.StatusCode, got)
	}
	if n := len(f.up.requests()) - before; n != 1 {
		t.Errorf("%d upstream requests for the client's compaction, want 1 (no retry)", n)
	}
	if cs := compactions(t, f, id); len(cs) != 0 || f.p.Stats().Overflows != 0 {
		t.Fatalf("ctxd compacted while the client compacts: %v, stats %+v", cs, f.p.Stats())
	}
	// The client tries again; the upstream accepts. The answer's usage is
	// at the threshold: its post-check queues no compaction either.
	summary := `{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Handoff: steps 0-2 ran."}]}`
	if how == "trigger" {
		summary = `{"type":"compaction","id":"cmp_07","encrypted_content":"gAAAAABpCOMPACTED-07"}`
	}
	f.up.script(reply{stream: true, body: responsesSSE([]string{summary}, 5900, 0, 50)})
	r3, _ := f.postOpenAI("/v1/responses", body, h2)
	f.settle()
	if r3.StatusCode != 200 || r3.Header.Get(HeaderSessionID) != id {
		t.Fatalf("%d, session %q (want %q), diagnostic %q\n%s", r3.StatusCode, r3.Header.Get(HeaderSessionID), id, r3.Header.Get(HeaderDiagnostic), f.logs)
	}
	if cs := compactions(t, f, id); len(cs) != 0 {
		t.Errorf("ctxd compacted before sending the client's compaction: %v", cs)
	}
	reqs := f.up.requests()
	sent := inputOf(t, reqs[len(reqs)-1].body)
	if len(sent) != len(c.items) {
		t.Fatalf("%d items sent, the client sent %d", len(sent), len(c.items))
	}
	for i, it := range c.items {
		if string(sent[i]) != it {
			t.Errorf("input[%d] is not the client's: %.200s", i, sent[i])
		}
	}
	a, err := f.eng.Context(context.Background(), id, engineNoPreSend)
	if err != nil {
		t.Fatal(err)
	}
	var all []byte
	for _, m := range a.Messages {
		enc, _ := history.Encode(m)
		all = append(all, enc...)
	}
	want := "Handoff: steps 0-2 ran."
	if how == "trigger" {
		want = "cmp_07"
	}
	if !bytes.Contains(all, []byte("step 2")) || !bytes.Contains(all, []byte(want)) {
		t.Errorf("the request and its answer are not recorded:\n%.3000s", all)
	}
}

// conformUsageIterations: an answer of the provider's compaction
// (compact_20260112) reports each sampling step in usage.iterations — the
// compaction step read the whole history, the message step the compacted
// context — and the top-level counts are the message step's. The answer
// reaches the client byte for byte; its top-level usage is recorded (the
// context after the compaction), not the iterations' sum.
func conformUsageIterations(t *testing.T) {
	f := newFixture(t, testConfig())
	c := newConversation()
	c.extra = strings.Replace(c.extra, `"stream":true`, `"stream":false`, 1) + `,"context_management":{"edits":[{"type":"compact_20260112","trigger":{"type":"input_tokens","value":150000}}]}`
	c.user("fix the build")
	answer := `{"id":"msg_1","type":"message","role":"assistant","model":"claude-opus-4-8","content":[{"type":"compaction","content":"Summary: the build failed in the linker; steps 1-4 ran."},{"type":"text","text":"Continuing."}],"stop_reason":"end_turn","usage":{"input_tokens":23000,"output_tokens":1000,"iterations":[{"type":"compaction","input_tokens":180000,"output_tokens":3500},{"type":"message","input_tokens":23000,"output_tokens":1000}]}}`
	f.up.script(reply{status: 200, body: answer})
	hdr := map[string]string{"Anthropic-Beta": "compact-2026-01-12"}
	resp, got := f.post(c.body(), hdr)
	f.settle()
	if resp.StatusCode != 200 || string(got) != answer {
		t.Fatalf("the answer did not reach the client as sent: %d %s", resp.StatusCode, got)
	}
	a, err := f.eng.Context(context.Background(), resp.Header.Get(HeaderSessionID), engineNoPreSend)
	if err != nil {
		t.Fatal(err)
	}
	last := a.Messages[len(a.Messages)-1]
	if last.Role != history.RoleAssistant || last.Usage == nil || last.Usage.InputTokens != 23000 || last.Usage.OutputTokens != 1000 {
		t.Errorf("recorded usage %+v; want the top-level counts (23000 in, 1000 out)", last.Usage)
	}
	if a.Tokens > 30000 {
		t.Errorf("estimate %d: the compaction step's 180000 tokens counted", a.Tokens)
	}
}
