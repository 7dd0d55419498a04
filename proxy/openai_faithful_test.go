package proxy

import (
	"bytes"
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/internal/corpustest"
)

// itemsOf is the body's conversation array (key "messages" or "input").
func itemsOf(t *testing.T, body []byte, key string) []json.RawMessage {
	t.Helper()
	var r map[string]json.RawMessage
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(r[key], &items); err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return items
}

// checkClientItems asserts that each upstream request's conversation is
// the client's, item by item and byte for byte (ctxd rewrote nothing), and
// that each request's items extend the previous request's byte for byte
// (the prompt cache's prefix).
func checkClientItems(t *testing.T, f *fixture, sent []string, key string) {
	t.Helper()
	reqs := f.up.requests()
	if len(reqs) != len(sent) {
		t.Fatalf("%d upstream requests, %d sent", len(reqs), len(sent))
	}
	var prev []json.RawMessage
	for i, r := range reqs {
		got, want := itemsOf(t, r.body, key), itemsOf(t, []byte(sent[i]), key)
		if len(got) != len(want) {
			t.Fatalf("request %d: %d items upstream, the client sent %d:\n%s", i, len(got), len(want), r.body)
		}
		for k := range want {
			if !bytes.Equal(got[k], want[k]) {
				t.Errorf("request %d, %s[%d] is not the client's bytes:\n client %s\n    out %s", i, key, k, want[k], got[k])
			}
		}
		for k := range prev {
			if !bytes.Equal(got[k], prev[k]) {
				t.Errorf("request %d, %s[%d] changed from the previous request (prompt cache prefix broken): %s → %s", i, key, k, prev[k], got[k])
			}
		}
		prev = got
	}
}

// restartOpenAI restarts the proxy (restart) with the scripted upstream
// as its OpenAI upstream again.
func (f *fixture) restartOpenAI() {
	f.t.Helper()
	f.restart()
	u, err := url.Parse(f.up.srv.URL)
	if err != nil {
		f.t.Fatal(err)
	}
	f.p.openai = u
}

// postRecorded posts body to path, requires a 200 naming a session, and
// returns sent with body appended; the session id answered goes into ids.
func (f *fixture) postRecorded(path, body string, hdr map[string]string, sent []string, ids map[string]bool) []string {
	f.t.Helper()
	resp, got := f.postOpenAI(path, body, hdr)
	if resp.StatusCode != 200 || resp.Header.Get(HeaderSessionID) == "" {
		f.t.Fatalf("request %d: %d %q %s", len(sent)+1, resp.StatusCode, resp.Header.Get(HeaderDiagnostic), got)
	}
	ids[resp.Header.Get(HeaderSessionID)] = true
	return append(sent, body)
}

// TestChatUnrewrittenMessagesPassThroughByteIdentical: on Chat
// Completions, every message ctxd has not rewritten goes upstream as the
// client's bytes — a user message's name, a text part's cache_control, an
// image_url's detail, an assistant message's refusal, a tool message's
// unknown field, the client's key order and spacing — from the first
// request on, over several turns and after a restart; each request extends
// the previous one byte for byte.
func TestChatUnrewrittenMessagesPassThroughByteIdentical(t *testing.T) {
	f := newOpenAIFixture(t, openAIConfig(func(c *config.Config) { c.Models["gpt-local-1"] = config.Model{ContextLimit: 200000, TokenFactor: 1} }))
	hdr := map[string]string{"Session_id": "chat-faithful"}
	msgs := []string{
		`{"role":"system","content":"You are pi."}`,
		`{ "content": [ {"text": "look at this", "type": "text", "cache_control": {"type": "ephemeral"}}, {"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo=","detail":"low"}} ], "role": "user", "name": "alice" }`,
	}
	body := func() string {
		return `{"model":"gpt-local-1","messages":[` + strings.Join(msgs, ",") + `],"stream":true,"stream_options":{"include_usage":true}}`
	}
	var sent []string
	ids := map[string]bool{}
	post := func() { sent = f.postRecorded("/v1/chat/completions", body(), hdr, sent, ids) }
	f.up.script(reply{stream: true, body: chatSSE("", [][3]string{{"call_1", "bash", `{"command":"ls"}`}}, true)})
	post()
	msgs = append(msgs,
		`{"role":"assistant","content":null,"refusal":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"bash","arguments":"{\"command\":\"ls\"}"}}]}`,
		`{"role":"tool","tool_call_id":"call_1","content":"a.go\nb.go","x_tool_meta":{"ms":12}}`)
	f.up.script(reply{stream: true, body: chatSSE("Two files.", nil, true)})
	post()
	msgs = append(msgs, `{"role":"assistant","content":"Two files.","refusal":null}`, `{"role":"user","content":"thanks","name":"alice"}`)
	f.up.script(reply{stream: true, body: chatSSE("You are welcome.", nil, true)})
	post()
	// After a restart (nothing of the conversation in memory).
	f.restartOpenAI()
	msgs = append(msgs, `{"role":"assistant","content":"You are welcome.","refusal":null}`, `{"role":"user","content":[{"type":"text","text":"bye"}],"name":"alice"}`)
	f.up.script(reply{stream: true, body: chatSSE("Bye.", nil, true)})
	post()
	f.settle()
	checkClientItems(t, f, sent, "messages")
	if len(ids) != 1 {
		t.Errorf("sessions %v: want one", ids)
	}
}

// TestResponsesUnrewrittenItemsPassThroughByteIdentical: on the Responses
// API, every item ctxd has not rewritten goes upstream as the client's
// bytes — an assistant message's id, status and url_citation annotations,
// an unknown field on an item, an input_image's detail, a function call's
// id and status, a free-form tool's call and output, the client's key
// order — from the first request on, over
// several turns and after a restart; each request extends the previous
// one byte for byte.
func TestResponsesUnrewrittenItemsPassThroughByteIdentical(t *testing.T) {
	f := newOpenAIFixture(t, openAIConfig(nil))
	hdr := map[string]string{"Session-Id": "responses-faithful"}
	c := newCodexConversation()
	c.items[2] = `{"role":"user","type":"message","content":[{"type":"input_text","text":"what is in this picture?"},{"type":"input_image","image_url":"data:image/png;base64,iVBORw0KGgo=","detail":"high"}],"x_client_tag":"t1"}`
	var sent []string
	ids := map[string]bool{}
	post := func() { sent = f.postRecorded("/v1/responses", c.body(""), hdr, sent, ids) }
	cited := `{"id":"msg_1","type":"message","status":"completed","content":[{"type":"output_text","annotations":[{"type":"url_citation","start_index":0,"end_index":4,"url":"https://example.com/cat","title":"Cat"}],"logprobs":[],"text":"A cat."}],"role":"assistant"}`
	f.up.script(reply{stream: true, body: responsesSSE([]string{cited}, 3000, 0, 10)})
	post()
	call := `{"type":"function_call","id":"fc_1","status":"completed","call_id":"call_1","name":"exec_command","arguments":"{\"cmd\":\"ls\"}"}`
	c.add(cited, `{"type":"message","role":"user","content":[{"type":"input_text","text":"list the files"}]}`)
	f.up.script(reply{stream: true, body: responsesSSE([]string{codexReasoning, call}, 3100, 2900, 10)})
	post()
	c.add(codexReasoningC, call, `{"type":"function_call_output","call_id":"call_1","output":"a.go\nb.go","x_future":true}`)
	// A call of the free-form tool of code mode (additional_tools) and its
	// output.
	custom := `{"type":"custom_tool_call","status":"completed","call_id":"call_2","name":"exec","input":"console.log(1)"}`
	f.up.script(reply{stream: true, body: responsesSSE([]string{custom}, 3150, 2950, 10)})
	post()
	c.add(custom, `{"output":"1\n","type":"custom_tool_call_output","call_id":"call_2"}`)
	f.up.script(reply{stream: true, body: responsesSSE([]string{`{"id":"msg_3","type":"message","status":"completed","content":[{"type":"output_text","annotations":[],"text":"Two files."}],"role":"assistant"}`}, 3200, 3000, 10)})
	post()
	f.restartOpenAI()
	c.add(`{"id":"msg_3","type":"message","status":"completed","content":[{"type":"output_text","annotations":[],"text":"Two files."}],"role":"assistant"}`,
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"thanks"}]}`)
	f.up.script(reply{stream: true, body: responsesSSE([]string{`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Welcome."}]}`}, 3300, 3100, 10)})
	post()
	f.settle()
	checkClientItems(t, f, sent, "input")
	if len(ids) != 1 {
		t.Errorf("sessions %v: want one", ids)
	}
}

// TestOpenAIRewrittenItemsNotClientBytes: a tool result ctxd offloaded
// goes upstream as its stub, not as the client's bytes, on both APIs,
// while the items around it stay the client's.
func TestOpenAIRewrittenItemsNotClientBytes(t *testing.T) {
	big := strings.Repeat("log line with some words\n", 2000)
	bigJSON, _ := json.Marshal(big)
	for _, path := range []string{"/v1/chat/completions", "/v1/responses"} {
		t.Run(strings.TrimPrefix(path, "/v1/"), func(t *testing.T) {
			f := newOpenAIFixture(t, openAIConfig(nil))
			hdr := map[string]string{"Session_id": "offload-" + path}
			var items []string
			var body func() string
			key := "messages"
			if path == "/v1/responses" {
				key = "input"
				items = []string{`{"type":"message","role":"user","content":[{"type":"input_text","text":"read the log"}],"x":1}`}
				body = func() string {
					return `{"model":"gpt-5.2-codex","input":[` + strings.Join(items, ",") + `],"stream":true,"store":false}`
				}
				f.up.script(reply{stream: true, body: responsesSSE([]string{`{"type":"function_call","call_id":"call_1","name":"exec_command","arguments":"{\"cmd\":\"cat big.log\"}"}`}, 100, 0, 5)})
			} else {
				items = []string{`{"role":"user","content":"read the log","name":"alice"}`}
				body = func() string {
					return `{"model":"gpt-5.2-codex","messages":[` + strings.Join(items, ",") + `],"stream":true,"stream_options":{"include_usage":true}}`
				}
				f.up.script(reply{stream: true, body: chatSSE("", [][3]string{{"call_1", "exec_command", `{"cmd":"cat big.log"}`}}, true)})
			}
			f.postOpenAI(path, body(), hdr)
			var result string
			if path == "/v1/responses" {
				items = append(items, `{"type":"function_call","id":"fc_1","call_id":"call_1","name":"exec_command","arguments":"{\"cmd\":\"cat big.log\"}"}`)
				result = `{"type":"function_call_output","call_id":"call_1","output":` + string(bigJSON) + `}`
				f.up.script(reply{stream: true, body: chatOrResponsesText(path, "done")})
			} else {
				items = append(items, `{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"exec_command","arguments":"{\"cmd\":\"cat big.log\"}"}}]}`)
				result = `{"role":"tool","tool_call_id":"call_1","content":` + string(bigJSON) + `}`
				f.up.script(reply{stream: true, body: chatSSE("done", nil, true)})
			}
			items = append(items, result)
			resp, _ := f.postOpenAI(path, body(), hdr)
			if resp.Header.Get(HeaderSessionID) == "" {
				t.Fatalf("not managed: %q", resp.Header.Get(HeaderDiagnostic))
			}
			f.settle()
			out := f.up.requests()[1].body
			got := itemsOf(t, out, key)
			if len(got) != 3 {
				t.Fatalf("%d items upstream:\n%s", len(got), out)
			}
			if bytes.Equal(got[2], []byte(result)) || len(got[2]) > len(big)/2 || !bytes.Contains(got[2], []byte("artifact://")) {
				t.Errorf("the offloaded result went as the client's bytes, not its stub: %.300s", got[2])
			}
			for k := 0; k < 2; k++ {
				if string(got[k]) != items[k] {
					t.Errorf("%s[%d] is not the client's bytes:\n client %s\n    out %s", key, k, items[k], got[k])
				}
			}
		})
	}
}

// codexRolloutItems returns the Responses items of a recorded Codex
// rollout of the corpus (its response_item lines), as Codex sent them.
func codexRolloutItems(t *testing.T, name string) []string {
	t.Helper()
	var items []string
	for _, line := range bytes.Split(corpustest.Read(t, "recorded/codex/"+name), []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var l struct {
			Type    string          `json:"type"`
			Payload json.RawMessage `json:"payload"`
		}
		if err := json.Unmarshal(line, &l); err != nil {
			t.Fatal(err)
		}
		if l.Type == "response_item" {
			items = append(items, string(l.Payload))
		}
	}
	return items
}

// TestResponsesCorpusItemsPassThrough replays a recorded Codex rollout of
// the corpus through the proxy as Codex sent it, request after request
// (each ending before a run of the model's items, which the scripted
// upstream then answers): every item goes upstream as Codex's own bytes,
// except a tool output ctxd offloaded (its stub), and each request extends
// the previous one byte for byte, on one session.
func TestResponsesCorpusItemsPassThrough(t *testing.T) {
	// The code-mode rollout's items, concatenated, are no request Codex
	// sent (its compactions replaced the history): only this one.
	for _, name := range []string{"cli0.171-function-tools.rollout.jsonl"} {
		t.Run(name, func(t *testing.T) { replayCodexItems(t, name) })
	}
}

func replayCodexItems(t *testing.T, name string) {
	items := codexRolloutItems(t, name)
	f := newOpenAIFixture(t, openAIConfig(nil))
	hdr := map[string]string{"Session-Id": "corpus-codex"}
	body := func(n int) string {
		return `{"model":"gpt-5.2-codex","instructions":"You are Codex.","input":[` + strings.Join(items[:n], ",") + `],"stream":true,"store":false}`
	}
	assistantSide := func(raw string) bool {
		var it struct{ Type, Role string }
		_ = json.Unmarshal([]byte(raw), &it)
		return it.Role == "assistant" || strings.HasSuffix(it.Type, "_call") || it.Type == "reasoning"
	}
	var sent []string
	ids := map[string]bool{}
	for n := 1; n < len(items); n++ {
		if !assistantSide(items[n]) || assistantSide(items[n-1]) {
			continue
		}
		k := n
		for k < len(items) && assistantSide(items[k]) {
			k++
		}
		f.up.script(reply{stream: true, body: responsesSSE(items[n:k], 1000, 0, 10)})
		sent = f.postRecorded("/v1/responses", body(n), hdr, sent, ids)
	}
	f.settle()
	if len(sent) < 3 || len(ids) != 1 {
		t.Fatalf("%d requests on sessions %v: want several on one", len(sent), ids)
	}
	reqs := f.up.requests()
	var prev []json.RawMessage
	same, stubs := 0, 0
	for i, r := range reqs {
		got, want := itemsOf(t, r.body, "input"), itemsOf(t, []byte(sent[i]), "input")
		if len(got) != len(want) {
			t.Fatalf("request %d: %d items upstream, Codex sent %d", i, len(got), len(want))
		}
		for k := range want {
			switch {
			case bytes.Equal(got[k], want[k]):
				same++
			case bytes.Contains(got[k], []byte("ctxd offloaded")):
				stubs++
			default:
				t.Errorf("request %d, input[%d] is neither Codex's bytes nor an offload stub:\n codex %.400s\n   out %.400s", i, k, want[k], got[k])
			}
		}
		for k := range prev {
			if !bytes.Equal(got[k], prev[k]) {
				t.Errorf("request %d, input[%d] changed from the previous request", i, k)
			}
		}
		prev = got
	}
	t.Logf("%d requests of %d items at most: %d items as Codex's bytes, %d offload stubs", len(reqs), len(prev), same, stubs)
}
