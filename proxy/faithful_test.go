package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/internal/fakeprovider"

	"github.com/ctxd/ctxd/history"
)

// A client's resend after a failed upstream answer (a 529, a 502) is the
// same turn: the answer that succeeds is recorded once, with its usage;
// a further resend records nothing (the retried answer used to be
// lost).
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
		if id := resp.Header.Get(HeaderSessionID); id != "" {
			t.Errorf("the refused first request names session %s, which it did not keep", id)
		}
		resp, got := f.post(c.body(), nil) // the client's retry
		id := resp.Header.Get(HeaderSessionID)
		if resp.StatusCode != 200 || id == "" {
			t.Fatalf("retry: status %d session %q: %s", resp.StatusCode, id, got)
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

// OpenAI Responses: an input given as a plain string (the API allows it) is
// managed as a one-message input: a session, the prompt and the answer
// recorded, and the client's next request — the whole input as items —
// extends it on the same branch (it used to be forwarded unmanaged).
func TestResponsesStringInputManaged(t *testing.T) {
	f := newOpenAIFixture(t, openAIConfig(nil))
	const tail = `,"tools":[],"store":false,"stream":true}`
	f.up.script(reply{stream: true, body: responsesSSE([]string{`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Paris."}]}`}, 120, 0, 3)})
	first := `{"model":"gpt-5.2-codex","instructions":"Be brief.","input":"What is the capital of France?"` + tail
	resp, got := f.postOpenAI("/v1/responses", first, nil)
	id := resp.Header.Get(HeaderSessionID)
	if resp.StatusCode != 200 || id == "" {
		t.Fatalf("not managed: status %d, diagnostic %q: %s", resp.StatusCode, resp.Header.Get(HeaderDiagnostic), got)
	}
	f.settle()
	a, err := f.eng.Context(context.Background(), id, engineNoPreSend)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Messages) != 2 || a.Messages[0].Role != history.RoleUser || a.Messages[0].Content[0].Text != "What is the capital of France?" ||
		a.Messages[1].Role != history.RoleAssistant || a.Messages[1].Usage == nil || a.Messages[1].Usage.InputTokens != 120 {
		t.Fatalf("recorded %+v", a.Messages)
	}
	// The upstream got the one message, and every other field as sent.
	reqs := f.up.requests()
	in := inputOf(t, reqs[0].body)
	if len(in) != 1 || !strings.Contains(string(in[0]), `"What is the capital of France?"`) || !strings.Contains(string(in[0]), `"role":"user"`) {
		t.Errorf("outgoing input %s", in)
	}
	if !strings.HasSuffix(string(reqs[0].body), `]`+tail) || !strings.HasPrefix(string(reqs[0].body), `{"model":"gpt-5.2-codex","instructions":"Be brief.","input":[`) {
		t.Errorf("other fields changed: %s", reqs[0].body)
	}
	// The next turn, as items, extends the session.
	second := `{"model":"gpt-5.2-codex","instructions":"Be brief.","input":[{"role":"user","content":"What is the capital of France?"},` +
		`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Paris."}]},{"role":"user","content":"And of Italy?"}]` + tail
	resp, _ = f.postOpenAI("/v1/responses", second, nil)
	f.settle()
	if resp.Header.Get(HeaderSessionID) != id || f.p.Stats().Branches != 0 {
		t.Errorf("next turn on %q (want %s), %d branches", resp.Header.Get(HeaderSessionID), id, f.p.Stats().Branches)
	}
	if n := messageEvents(t, f, id); n != 3 {
		t.Errorf("%d messages recorded, want 3", n)
	}
	reqs = f.up.requests()
	r0, err := parseBody(reqs[0].body, dialectResponses)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 2 || !bytes.HasPrefix(reqs[1].body, append(reqs[0].body[:r0.MsgEnd-1:r0.MsgEnd-1], ',')) {
		t.Errorf("the second request does not extend the first:\n%s\n%s", reqs[0].body, reqs[1].body)
	}
}

// OpenAI Responses: a function_call whose arguments are not valid JSON goes
// upstream with its arguments as sent, on the first request and on every
// later one — after a restart too, from the stored history — and each
// request extends the one before byte for byte (they used to go out
// as {"input": …}).
func TestResponsesInvalidArgumentsForwardedAsSent(t *testing.T) {
	f := newOpenAIFixture(t, openAIConfig(nil))
	hdr := map[string]string{"Session-Id": "0199-codex-args"}
	const args = `{"cmd":"go test ./...` // cut short: not JSON
	call := `{"type":"function_call","call_id":"call_1","name":"exec_command","arguments":"{\"cmd\":\"go test ./..."}`
	c := newCodexConversation().add(call, `{"type":"function_call_output","call_id":"call_1","output":"invalid arguments"}`)
	arguments := func(body []byte) []string {
		var out []string
		for _, it := range inputOf(t, body) {
			var fc struct {
				Type      string `json:"type"`
				Arguments string `json:"arguments"`
			}
			if json.Unmarshal(it, &fc) == nil && fc.Type == "function_call" {
				out = append(out, fc.Arguments)
			}
		}
		return out
	}
	resp, _ := f.postOpenAI("/v1/responses", c.body(""), hdr)
	if resp.Header.Get(HeaderSessionID) == "" {
		t.Fatalf("not managed: %s", resp.Header.Get(HeaderDiagnostic))
	}
	c.add(`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"ok"}]}`, `{"type":"message","role":"user","content":[{"type":"input_text","text":"go on"}]}`)
	f.postOpenAI("/v1/responses", c.body(""), hdr)
	f.cfg.Proxy.Upstreams.OpenAI.BaseURL = f.up.srv.URL // kept across the restart
	f.restart()
	c.add(`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"ok"}]}`, `{"type":"message","role":"user","content":[{"type":"input_text","text":"and now?"}]}`)
	f.postOpenAI("/v1/responses", c.body(""), hdr)
	var reqs []seen
	for _, r := range f.up.requests() {
		if r.path == "/v1/responses" {
			reqs = append(reqs, r)
		}
	}
	if len(reqs) != 3 {
		t.Fatalf("%d Responses requests upstream", len(reqs))
	}
	for i, r := range reqs {
		if got := arguments(r.body); len(got) != 1 || got[0] != args {
			t.Errorf("request %d: arguments %q, want %q", i, got, args)
		}
		if i > 0 {
			prev, _ := parseBody(reqs[i-1].body, dialectResponses)
			if !bytes.HasPrefix(r.body, append(reqs[i-1].body[:prev.MsgEnd-1:prev.MsgEnd-1], ',')) {
				t.Errorf("request %d does not extend request %d:\n%s\n%s", i, i-1, reqs[i-1].body, r.body)
			}
		}
	}
	if f.p.Stats().Branches != 0 {
		t.Errorf("%d branches", f.p.Stats().Branches)
	}
}

// A Messages request whose new user message has no content (content [],
// "" or null, or a system message without text) is the client's own
// rule break: never sent with that message dropped, which would end the
// request on the assistant's message (a prefill); with a diagnostic, not
// recorded, counted apart. On a recorded branch the request stays managed
// — ctxd's context, then the client's new message byte for byte — as the
// first request of a conversation it is forwarded byte for byte; the
// conversation then goes on on its branch (docs/decisions.md "The proxy
// forwards what the client sent", "A managed conversation stays managed; a pass pays for its rewrite").
func TestEmptyUserMessageForwardedAsSent(t *testing.T) {
	for _, empty := range []string{`{"role":"user","content":[]}`, `{"role":"user","content":[ ]}`, `{"role":"user","content":""}`, `{"role":"user","content":null}`, `{"role":"system","content":[{"type":"text","text":""}]}`} {
		f := newFixture(t, testConfig())
		f.up.allowRefusals = true
		const head = `{"model":"claude-opus-4-8","max_tokens":1000,"stream":true,"metadata":{"user_id":"{\"session_id\":\"eeeeeeee-2222-3333-4444-555555555555\"}"},"messages":[`
		first := `{"role":"user","content":"fix the bug"}`
		f.up.script(textAnswer("which bug?"))
		resp, _ := f.post(head+first+`]}`, nil)
		id := resp.Header.Get(HeaderSessionID)
		f.settle()
		// On a recorded branch, and as the first request of a conversation.
		for i, body := range []string{
			head + first + `,` + assistantText("which bug?") + `,` + empty + `]}`,
			head + `{"role":"user","content":"another task"},` + assistantText("ok") + `,` + empty + `]}`,
		} {
			before := len(f.up.requests())
			resp, _ = f.post(body, nil)
			reqs := f.up.requests()
			if len(reqs) != before+1 {
				t.Fatalf("%s, request %d: %d requests upstream", empty, i, len(reqs)-before)
			}
			got := reqs[before].body
			if i == 0 {
				// Managed: ctxd's context, ending with the client's message.
				if !bytes.HasSuffix(got, []byte(`,`+empty+`]}`)) || string(got) == body || resp.Header.Get(HeaderSessionID) != id {
					t.Fatalf("%s: on a recorded branch the upstream got (session %q):\n%s", empty, resp.Header.Get(HeaderSessionID), got)
				}
			} else if string(got) != body || resp.Header.Get(HeaderSessionID) != "" {
				t.Fatalf("%s, request %d: the upstream did not get the client's body (session %q):\n%s", empty, i, resp.Header.Get(HeaderSessionID), got)
			}
			if d := resp.Header.Get(HeaderDiagnostic); !strings.Contains(d, "empty_message") {
				t.Errorf("%s, request %d: diagnostic %q", empty, i, d)
			}
		}
		f.settle()
		if s := f.p.Stats(); s.ClientRuleBreaks != 2 || s.Violations != 0 {
			t.Errorf("%s: %d client rule breaks, %d violations; want 2, 0", empty, s.ClientRuleBreaks, s.Violations)
		}
		if n := messageEvents(t, f, id); n != 2 {
			t.Errorf("%s: %d messages recorded, want 2", empty, n)
		}
		// The client's next request extends the branch as before.
		resp, _ = f.post(head+first+`,`+assistantText("which bug?")+`,{"role":"user","content":"the flaky one"}]}`, nil)
		f.settle()
		if resp.Header.Get(HeaderSessionID) != id || f.p.Stats().Branches != 0 || messageEvents(t, f, id) != 4 {
			t.Errorf("%s: next request on %q (want %s), %d branches, %d messages", empty, resp.Header.Get(HeaderSessionID), id, f.p.Stats().Branches, messageEvents(t, f, id))
		}
	}
}

// A role "system" message inside messages (Claude Code sends one as
// messages[1]) goes upstream as the client's bytes — role system, its
// cache marker intact — on every request, as the newest message too
// (it used to go out as role user without its marker).
func TestSystemMessageForwardedAsSent(t *testing.T) {
	f := newFixture(t, testConfig())
	sys := `{"role":"system","content":[{"type":"text","text":"<system-reminder>agents: Explore, Plan</system-reminder>","cache_control":{"type":"ephemeral"}}]}`
	sysString := `{"role":"system","content":"The user pressed Esc."}`
	c := newConversation().user("fix the bug")
	c.msgs = append(c.msgs, sys)
	const head = `{"model":"claude-opus-4-8","max_tokens":1000,"stream":true,"metadata":{"user_id":"{\"session_id\":\"5ac5ac5a-2222-3333-4444-555555555555\"}"},"messages":[`
	bodies := []string{
		head + c.msgs[0] + `,` + sys + `]}`, // the system message last
		head + c.msgs[0] + `,` + sys + `,` + assistantText("on it") + `,` + sysString + `,{"role":"user","content":[{"type":"text","text":"go on","cache_control":{"type":"ephemeral"}}]}]}`,
	}
	f.up.script(textAnswer("on it"))
	resp, _ := f.post(bodies[0], nil)
	id := resp.Header.Get(HeaderSessionID)
	if id == "" {
		t.Fatalf("not managed: %s", resp.Header.Get(HeaderDiagnostic))
	}
	resp, _ = f.post(bodies[1], nil)
	if resp.Header.Get(HeaderSessionID) != id {
		t.Fatalf("second request on %q, want %s (%s)", resp.Header.Get(HeaderSessionID), id, resp.Header.Get(HeaderDiagnostic))
	}
	reqs := f.up.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d upstream requests", len(reqs))
	}
	for i, r := range reqs {
		out, err := parseRequest(r.body)
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) < 2 || string(out.Messages[1]) != sys {
			t.Errorf("request %d: messages[1] is %s, want the client's %s", i, out.Messages[1], sys)
		}
		if i == 1 && (len(out.Messages) != 5 || string(out.Messages[3]) != sysString) {
			t.Errorf("request 1: messages %s", r.body[out.MsgStart:out.MsgEnd])
		}
		if n := strings.Count(string(r.body[out.MsgStart:out.MsgEnd]), "cache_control"); n != i+1 {
			t.Errorf("request %d: %d cache markers in messages, want %d", i, n, i+1)
		}
	}
	// Stored as system messages where they were (docs/design.md §2), not
	// as user text: neither is the current request.
	f.settle()
	a, err := f.eng.Context(context.Background(), id, engineContextNoPreSend())
	if err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, m := range a.Messages {
		roles = append(roles, string(m.Role))
	}
	if got := strings.Join(roles, ","); !strings.HasPrefix(got, "user,system,assistant,system,user") {
		t.Errorf("stored roles %s, want user,system,assistant,system,user…", got)
	}
}

// Text ctxd has not rewritten goes upstream as the client's bytes: a lone
// surrogate escape, invalid UTF-8, HTML characters and other escapes in a
// plain text message, a message of two text blocks and a tool result,
// each byte-identical to the client's message in the forwarded body, on
// the request that brings it and the next (they used to be replaced
// with U+FFFD and \u003c). A prompt sent as a string goes out in the block
// form with the client's text bytes.
func TestTextForwardedByteIdentical(t *testing.T) {
	f := newFixture(t, testConfig())
	plain := `{"role":"user","content":[{"type":"text","text":"lone \ud800 and bad ` + "\xff\xfe" + ` bytes, <b>&amp;</b>, \u00e9\/"}]}`
	twoBlocks := `{"role":"user","content":[{"type":"text","text":"a \udc00 b"},{"type":"text","text":"` + "\xc3" + `"}]}`
	call := assistantCall("toolu_1", "Bash", `{"command":"cat x"}`)
	result := `{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"bin ` + "\x80" + ` \ud83d"}]}`
	answer := `{"role":"assistant","content":[{"type":"text","text":"seen \ud800 <ok>"}]}`
	const head = `{"model":"claude-opus-4-8","max_tokens":1000,"stream":true,"metadata":{"user_id":"{\"session_id\":\"b17eb17e-2222-3333-4444-555555555555\"}"},"messages":[`
	f.up.script(reply{stream: true, body: sse("", "", [][3]string{{"toolu_1", "Bash", `{"command":"cat x"}`}}, 100, 5)})
	f.post(head+plain+`,`+twoBlocks+`]}`, nil)
	second := head + plain + `,` + twoBlocks + `,` + call + `,` + result + `]}`
	f.up.script(textAnswer("seen \ufffd <ok>")) // the client writes it back with \ud800
	f.post(second, nil)
	third := head + plain + `,` + twoBlocks + `,` + call + `,` + result + `,` + answer + `,{"role":"user","content":"string \ud800 form"}]}`
	f.post(third, nil)
	reqs := f.up.requests()
	if len(reqs) != 3 {
		t.Fatalf("%d upstream requests", len(reqs))
	}
	for i, r := range reqs {
		out, err := parseRequest(r.body)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{plain, twoBlocks, call, result, answer}[:min(2*i+2, 5)]
		for k, w := range want {
			if k >= len(out.Messages) || string(out.Messages[k]) != w {
				t.Errorf("request %d, message %d differs from the client's:\n got %q\nwant %q", i, k, out.Messages[min(k, len(out.Messages)-1)], w)
			}
		}
	}
	f.settle()
	if b := f.p.Stats().Branches; b != 0 {
		t.Errorf("%d branches, want 0", b)
	}
	out, _ := parseRequest(reqs[2].body)
	if got := string(out.Messages[len(out.Messages)-1]); got != `{"role":"user","content":[{"type":"text","text":"string \ud800 form"}]}` {
		t.Errorf("the string prompt went out as %q", got)
	}
}

// The same against the strict fake provider: a 529 before any byte, and an
// overloaded error inside the stream, each once; the client's resend is
// answered and that answer recorded once with its usage.
func TestRetryAfterFaultStrictFake(t *testing.T) {
	for _, fault := range []fakeprovider.Fault{{Status: 529}, {Status: 529, MidStream: true}} {
		fake := fakeprovider.Start(t, fakeprovider.Config{NoThinking: true, SideAnswer: "Title: fix the bug"})
		f := newFixture(t, testConfig())
		u, err := url.Parse(fake.URL())
		if err != nil {
			t.Fatal(err)
		}
		f.p.upstream = u
		fake.FailNext(fault)
		body := `{"model":"claude-opus-4-8","max_tokens":1000,"stream":true,"messages":[{"role":"user","content":"fix the bug"}]}`
		resp, got := f.post(body, nil)
		if fault.MidStream != (resp.StatusCode == 200) || !strings.Contains(string(got), "overloaded_error") {
			t.Fatalf("%+v: the fault did not reach the client: %d %s", fault, resp.StatusCode, got)
		}
		// Refused before any byte, the new branch is not kept (and not
		// named); cut mid-stream, it was accepted.
		id := resp.Header.Get(HeaderSessionID)
		if fault.MidStream == (id == "") {
			t.Errorf("%+v: first answer names session %q", fault, id)
		}
		resp, got = f.post(body, nil)
		if id == "" {
			id = resp.Header.Get(HeaderSessionID)
		}
		if resp.StatusCode != 200 || !strings.Contains(string(got), "Title: fix the bug") || id == "" || resp.Header.Get(HeaderSessionID) != id {
			t.Fatalf("%+v: retry %d on %q: %s", fault, resp.StatusCode, resp.Header.Get(HeaderSessionID), got)
		}
		f.post(body, nil) // answered already: not recorded again
		f.settle()
		a, err := f.eng.Context(context.Background(), id, engineNoPreSend)
		if err != nil {
			t.Fatal(err)
		}
		if len(a.Messages) != 2 || a.Messages[1].Content[0].Text != "Title: fix the bug" || a.Messages[1].Usage == nil || a.Messages[1].Usage.InputTokens == 0 {
			t.Errorf("%+v: recorded %+v", fault, a.Messages)
		}
	}
}

// A client that puts its moving cache marker on a block inside a
// tool_result's content (a text, search_result or document block there)
// has that marker forwarded where it put it: the provider's cache grows
// through ctxd as it does direct. The marker used to be cut with the
// top-level ones and never placed again, so every request read only the
// system and tools' prefix.
func TestNestedCacheMarkerForwarded(t *testing.T) {
	for _, nested := range []struct{ name, block string }{
		{"text", `{"type":"text","text":"output %d: %s"}`},
		{"search_result", `{"type":"search_result","source":"https://example.com/%d","title":"r","content":[{"type":"text","text":"%s"}]}`},
		{"document", `{"type":"document","source":{"type":"text","media_type":"text/plain","data":"doc %d: %s"}}`},
	} {
		t.Run(nested.name, func(t *testing.T) {
			// Four requests of one conversation, each ending with a round's
			// tool result whose nested block carries the marker.
			var bodies, sent []string
			c := newConversation().user("go")
			for i := range 4 {
				id := fmt.Sprintf("toolu_%d", i)
				c.assistant(assistantCall(id, "Bash", `{"command":"ls"}`))
				block := fmt.Sprintf(nested.block, i, strings.Repeat("line of output ", 200))
				marked := block[:len(block)-1] + `,"cache_control":{"type":"ephemeral"}}`
				result := `{"role":"user","content":[{"type":"tool_result","tool_use_id":%q,"content":[%s]}]}`
				c.msgs = append(c.msgs, fmt.Sprintf(result, id, marked))
				sent = append(sent, c.msgs[len(c.msgs)-1])
				bodies = append(bodies, fmt.Sprintf(`{"model":%q,"max_tokens":32000,"system":%s,"tools":%s,"messages":[%s],%s}`,
					c.model, c.system, c.tools, strings.Join(c.msgs, ","), c.extra))
				c.msgs[len(c.msgs)-1] = fmt.Sprintf(result, id, block)
			}
			direct := fakeprovider.Start(t, fakeprovider.Config{NoThinking: true})
			for _, b := range bodies {
				req, _ := http.NewRequest("POST", direct.URL()+"/v1/messages?beta=true", strings.NewReader(b))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Api-Key", testKey)
				req.Header.Set("Anthropic-Version", "2023-06-01")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
			fake := fakeprovider.Start(t, fakeprovider.Config{NoThinking: true})
			f := newFixture(t, testConfig())
			u, err := url.Parse(fake.URL())
			if err != nil {
				t.Fatal(err)
			}
			f.p.upstream = u
			for i, b := range bodies {
				resp, got := f.post(b, nil)
				if resp.StatusCode != 200 || resp.Header.Get(HeaderSessionID) == "" {
					t.Fatalf("request %d: %d, not managed (%s): %.300s", i, resp.StatusCode, resp.Header.Get(HeaderDiagnostic), got)
				}
			}
			f.settle()
			want, got := direct.Messages(true), fake.Messages(true)
			if len(want) != 4 || len(got) != 4 {
				t.Fatalf("%d requests direct, %d through ctxd", len(want), len(got))
			}
			for i := range got {
				out, err := parseRequest(got[i].Body)
				if err != nil {
					t.Fatal(err)
				}
				if n := bytes.Count(got[i].Body, []byte(`"cache_control"`)); n > 4 {
					t.Errorf("request %d: %d cache markers, more than the API's 4", i, n)
				}
				if last := string(out.Messages[len(out.Messages)-1]); last != sent[i] {
					t.Errorf("request %d: the last message is not the client's:\n got %.300s\nwant %.300s", i, last, sent[i])
				}
				if got[i].CacheRead != want[i].CacheRead {
					t.Errorf("request %d: %d tokens read from the cache through ctxd, %d direct", i, got[i].CacheRead, want[i].CacheRead)
				}
				if i > 0 && got[i].CacheRead <= got[i-1].CacheRead {
					t.Errorf("request %d: the cache read did not grow (%d after %d)", i, got[i].CacheRead, got[i-1].CacheRead)
				}
			}
		})
	}
}
