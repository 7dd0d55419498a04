package proxy

import (
	"strings"
	"testing"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/wire"
)

// TestMatchForm: plain text in the forms the APIs read alike matches as
// one form; anything else keeps its bytes (and a Messages message has the
// bytes textContent gives it, so recorded chains stay valid).
func TestMatchForm(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"role":"user","content":"x"}`, `{"role":"user","content":"x"}`},
		{`{"role":"user","content":[{"type":"text","text":"x"}]}`, `{"role":"user","content":"x"}`},
		{`{"type":"message","role":"user","content":[{"type":"input_text","text":"x"}]}`, `{"role":"user","content":"x"}`},
		{`{"type":"message","role":"user","content":"x"}`, `{"role":"user","content":"x"}`},
		{`{"role":"user","content":[{"type":"input_text","text":"x"}],"type":"message"}`, `{"role":"user","content":"x"}`},
		{`{ "type": "message", "role": "assistant", "content": [{"type":"output_text","text":"x"}]}`, `{ "role": "assistant", "content": "x"}`},
		{`{"role":"user","content":[{"text":"x","type":"input_text"}]}`, `{"role":"user","content":"x"}`},
		// Not plain text: kept.
		{`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"x","annotations":[]}]}`, `{"role":"assistant","content":[{"type":"output_text","text":"x","annotations":[]}]}`},
		{`{"role":"user","content":[{"type":"input_image","image_url":"data:"}]}`, ``},
		{`{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]}`, ``},
		{`{"type":"function_call_output","call_id":"c","output":"text"}`, ``},
		{`{"type":"reasoning","summary":[{"type":"summary_text","text":"t"}]}`, ``},
		{`not json "message"`, ``},
	} {
		want := c.want
		if want == "" {
			want = c.in
		}
		if got := string(wire.MatchForm([]byte(c.in))); got != want {
			t.Errorf("wire.MatchForm(%s) = %s, want %s", c.in, got, want)
		}
		if tc := string(wire.TextContent([]byte(c.in))); !bytesHasType(c.in) && tc != want {
			t.Errorf("wire.MatchForm(%s) = %s differs from textContent's %s", c.in, want, tc)
		}
	}
}

// bytesHasType: the message has a "type":"message" member or a block type
// textContent does not know (matchForm differs from it there by design).
func bytesHasType(s string) bool {
	return strings.Contains(s, `"message"`) || strings.Contains(s, `_text"`)
}

// TestResponsesStringThenInputTextSameBranch (finding 1): a Responses
// input given as a string, then the client's next request carrying that
// prompt as one input_text message item, the recorded answer and a new
// prompt, extends the session: no branch, each message recorded once; and
// the reverse (an item, then the string form).
func TestResponsesStringThenInputTextSameBranch(t *testing.T) {
	const (
		q     = `"What is the capital of France?"`
		str   = `{"role":"user","content":` + q + `}`
		item  = `{"type":"message","role":"user","content":[{"type":"input_text","text":` + q + `}]}`
		tail  = `,"store":false,"stream":true}`
		model = `{"model":"gpt-5.2-codex","input":`
	)
	for _, c := range []struct{ name, first, then string }{
		{"string then item", q, item},
		{"item then string", `[` + item + `]`, str},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newOpenAIFixture(t, openAIConfig(nil))
			hdr := map[string]string{"Session-Id": "0199-string-then-items"}
			f.up.script(reply{stream: true, body: chatOrResponsesText("/v1/responses", "Paris.")})
			resp, got := f.postOpenAI("/v1/responses", model+c.first+tail, hdr)
			id := resp.Header.Get(HeaderSessionID)
			if resp.StatusCode != 200 || id == "" {
				t.Fatalf("not managed: status %d, diagnostic %q: %s", resp.StatusCode, resp.Header.Get(HeaderDiagnostic), got)
			}
			f.settle()
			second := model + `[` + c.then + `,` +
				`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Paris."}]},` +
				`{"type":"message","role":"user","content":[{"type":"input_text","text":"And of Italy?"}]}]` + tail
			f.up.script(reply{stream: true, body: chatOrResponsesText("/v1/responses", "Rome.")})
			resp, _ = f.postOpenAI("/v1/responses", second, hdr)
			f.settle()
			if got := resp.Header.Get(HeaderSessionID); got != id {
				t.Fatalf("second request on session %q, want %s (diagnostic %q)", got, id, resp.Header.Get(HeaderDiagnostic))
			}
			if b := f.p.Stats().Branches; b != 0 {
				t.Errorf("%d branches recorded, want 0", b)
			}
			if n := messageEvents(t, f, id); n != 4 {
				t.Errorf("%d messages recorded, want 4", n)
			}
		})
	}
}

// TestConversationKeyPlainTextForms (finding 2): without a session header
// the conversation is keyed by its first message; that message sent as a
// string and then as one text block (or the reverse) is the same
// conversation, on the Messages API and on Chat Completions.
func TestConversationKeyPlainTextForms(t *testing.T) {
	const (
		str   = `{"role":"user","content":"fix the bug"}`
		block = `{"role":"user","content":[{"type":"text","text":"fix the bug"}]}`
	)
	for _, c := range []struct {
		name        string
		first, then string
	}{{"string then block", str, block}, {"block then string", block, str}} {
		t.Run("messages/"+c.name, func(t *testing.T) {
			f := newFixture(t, testConfig())
			const head = `{"model":"claude-opus-4-8","max_tokens":1000,"stream":true,"messages":[`
			f.up.script(textAnswer("which bug?"))
			resp, _ := f.post(head+c.first+`]}`, nil)
			id := resp.Header.Get(HeaderSessionID)
			if resp.StatusCode != 200 || id == "" {
				t.Fatalf("status %d, session %q", resp.StatusCode, id)
			}
			f.up.script(textAnswer("on it"))
			resp, _ = f.post(head+c.then+`,`+assistantText("which bug?")+`,{"role":"user","content":"the flaky one"}]}`, nil)
			if got := resp.Header.Get(HeaderSessionID); got != id {
				t.Fatalf("second request on session %q, want %s", got, id)
			}
			f.settle()
			if n := messageEvents(t, f, id); n != 4 {
				t.Errorf("%d messages recorded, want 4", n)
			}
		})
		t.Run("chat/"+c.name, func(t *testing.T) {
			f := newOpenAIFixture(t, openAIConfig(func(c *config.Config) { c.Models["gpt-local-1"] = config.Model{ContextLimit: 200000, TokenFactor: 1} }))
			const head = `{"model":"gpt-local-1","stream":true,"stream_options":{"include_usage":true},"messages":[`
			f.up.script(reply{stream: true, body: chatSSE("which bug?", nil, true)})
			resp, got := f.postOpenAI("/v1/chat/completions", head+c.first+`]}`, nil)
			id := resp.Header.Get(HeaderSessionID)
			if resp.StatusCode != 200 || id == "" {
				t.Fatalf("status %d, session %q, diagnostic %q: %s", resp.StatusCode, id, resp.Header.Get(HeaderDiagnostic), got)
			}
			f.up.script(reply{stream: true, body: chatSSE("on it", nil, true)})
			resp, _ = f.postOpenAI("/v1/chat/completions", head+c.then+`,{"role":"assistant","content":"which bug?"},{"role":"user","content":"the flaky one"}]}`, nil)
			if got := resp.Header.Get(HeaderSessionID); got != id {
				t.Fatalf("second request on session %q, want %s", got, id)
			}
			f.settle()
			if n := messageEvents(t, f, id); n != 4 {
				t.Errorf("%d messages recorded, want 4", n)
			}
		})
	}
}
