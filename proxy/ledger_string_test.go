package proxy

import (
	"fmt"
	"net/http"
	"testing"
)

// TestPlainTextFormIsNotALoss: a one-message request whose content is a
// plain string, which ctxd does not change, is entered with what the
// client would have sent equal to what was sent: saved exactly 0, in each
// API. ctxd may send the text in another form (the Messages API's one text
// block, docs/proxy.md); the provider reads both forms alike.
func TestPlainTextFormIsNotALoss(t *testing.T) {
	const chatAnswer = `{"id":"c","object":"chat.completion","model":"gpt-5.2-codex","choices":[{"index":0,"message":{"role":"assistant","content":"Hello."},"finish_reason":"stop"}],"usage":{"prompt_tokens":50,"completion_tokens":2}}`
	respAnswer := responsesSSE([]string{`{"type":"message","role":"assistant","id":"msg_1","content":[{"type":"output_text","text":"Hello.","annotations":[]}]}`}, 50, 0, 2)
	for _, c := range []struct {
		name, path, body string
		answer           reply
	}{
		{"messages-string", "/v1/messages", `{"model":"claude-opus-4-8","max_tokens":10,"messages":[{"role":"user","content":"Hello there, a plain string prompt"}]}`, reply{}},
		{"messages-block", "/v1/messages", `{"model":"claude-opus-4-8","max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":"Hello there, a plain string prompt"}]}]}`, reply{}},
		{"chat-string", "/v1/chat/completions", `{"model":"gpt-5.2-codex","messages":[{"role":"user","content":"Hello there, a plain string prompt"}]}`, reply{status: 200, body: chatAnswer}},
		{"chat-block", "/v1/chat/completions", `{"model":"gpt-5.2-codex","messages":[{"role":"user","content":[{"type":"text","text":"Hello there, a plain string prompt"}]}]}`, reply{status: 200, body: chatAnswer}},
		{"responses-string", "/v1/responses", `{"model":"gpt-5.2-codex","input":"Hello there, a plain string prompt","stream":true}`, reply{stream: true, body: respAnswer}},
		{"responses-message", "/v1/responses", `{"model":"gpt-5.2-codex","input":[{"role":"user","content":"Hello there, a plain string prompt"}],"stream":true}`, reply{stream: true, body: respAnswer}},
		{"responses-item", "/v1/responses", `{"model":"gpt-5.2-codex","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"Hello there, a plain string prompt"}]}],"stream":true}`, reply{stream: true, body: respAnswer}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newOpenAIFixture(t, openAIConfig(nil))
			var resp *http.Response
			var b []byte
			if c.path == "/v1/messages" {
				resp, b = f.post(c.body, nil)
			} else {
				f.up.script(c.answer)
				resp, b = f.postOpenAI(c.path, c.body, nil)
			}
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			id := resp.Header.Get(HeaderSessionID)
			ups := agentRequests(f)
			sent := string(ups[len(ups)-1].body)
			reqs, _, tot := requestEntries(t, f, id)
			if len(reqs) != 1 {
				t.Fatalf("%d request entries", len(reqs))
			}
			e := reqs[0]
			if e.ClientTokens != e.SentTokens || e.Counterfactual != e.Reported {
				t.Errorf("client %d tokens, sent %d (without ctxd %+v, reported %+v), for a request ctxd did not change; sent %s",
					e.ClientTokens, e.SentTokens, e.Counterfactual, e.Reported, sent)
			}
			if tot.TokensSaved != 0 || tot.Saved != 0 || tot.SavedShare != 0 {
				t.Errorf("saved %d tokens, $%g (%g %%), for a request ctxd did not change", tot.TokensSaved, tot.Saved, 100*tot.SavedShare)
			}
		})
	}
}

// TestPlainStringConversationIsNotALoss: a conversation whose earlier user
// messages are plain strings and whose newest carries the moving marker in
// one text block (Claude Code's switch of forms), which ctxd does not
// change, is saved exactly 0 at every request.
func TestPlainStringConversationIsNotALoss(t *testing.T) {
	f := newFixture(t, testConfig())
	c := newConversation()
	var id string
	for i := range 4 {
		c.user(fmt.Sprintf("step %d: find why the build fails", i))
		resp, b := f.post(c.body(), nil)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, b)
		}
		id = resp.Header.Get(HeaderSessionID)
		// The client sends the prompt as a string from then on.
		c.msgs[len(c.msgs)-1] = fmt.Sprintf(`{"role":"user","content":%q}`, fmt.Sprintf("step %d: find why the build fails", i))
		c.assistant(assistantText("ok"))
	}
	reqs, _, tot := requestEntries(t, f, id)
	if len(reqs) != 4 {
		t.Fatalf("%d request entries", len(reqs))
	}
	for i, e := range reqs {
		if e.ClientTokens != e.SentTokens || e.Counterfactual != e.Reported {
			t.Errorf("request %d: client %d tokens, sent %d (without ctxd %+v, reported %+v)", i, e.ClientTokens, e.SentTokens, e.Counterfactual, e.Reported)
		}
	}
	if tot.TokensSaved != 0 || tot.Saved != 0 || tot.SavedShare != 0 {
		t.Errorf("saved %d tokens, $%g (%g %%), for a conversation ctxd did not change", tot.TokensSaved, tot.Saved, 100*tot.SavedShare)
	}
}
