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

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/wire/openai/chat"
)

// responsesSSE renders a streamed Responses answer: the items, then
// response.completed with usage (input tokens, of which cached, output).
func responsesSSE(items []string, input, cached, output int) string {
	var b strings.Builder
	ev := func(typ, data string) { fmt.Fprintf(&b, "event: %s\ndata: %s\n\n", typ, data) }
	ev("response.created", `{"type":"response.created","response":{"id":"resp_1","model":"gpt-5.2-codex","status":"in_progress","output":[]}}`)
	for i, it := range items {
		ev("response.output_item.added", fmt.Sprintf(`{"type":"response.output_item.added","output_index":%d,"item":%s}`, i, it))
		ev("response.output_item.done", fmt.Sprintf(`{"type":"response.output_item.done","output_index":%d,"item":%s}`, i, it))
	}
	ev("response.completed", fmt.Sprintf(`{"type":"response.completed","response":{"id":"resp_1","model":"gpt-5.2-codex","status":"completed","output":[],"usage":{"input_tokens":%d,"input_tokens_details":{"cached_tokens":%d},"output_tokens":%d,"total_tokens":%d}}}`, input, cached, output, input+output))
	return b.String()
}

// codexConversation builds Codex-like Responses bodies: instructions,
// tools, a developer message and additional_tools item first, then the
// conversation items; the whole input each time.
type codexConversation struct {
	items []string
}

const (
	codexDeveloper  = `{"type":"message","role":"developer","content":[{"type":"input_text","text":"<permissions instructions>sandbox: danger-full-access</permissions instructions>"}]}`
	codexAddlTools  = `{"type":"additional_tools","role":"developer","tools":[{"type":"custom","name":"exec","description":"run JavaScript","format":{"type":"grammar"}}]}`
	codexReasoning  = `{"type":"reasoning","id":"rs_01","summary":[],"encrypted_content":"gAAAAABo-ENCRYPTED-0123"}`
	codexReasoningC = `{"type":"reasoning","id":"rs_01","summary":[],"content":null,"encrypted_content":"gAAAAABo-ENCRYPTED-0123"}`
)

func newCodexConversation() *codexConversation {
	return &codexConversation{items: []string{codexDeveloper, codexAddlTools,
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"fix the failing build"}]}`}}
}

func (c *codexConversation) add(items ...string) *codexConversation {
	c.items = append(c.items, items...)
	return c
}

func (c *codexConversation) body(extra string) string {
	return `{"model":"gpt-5.2-codex","instructions":"You are Codex, a coding agent.","input":[` + strings.Join(c.items, ",") +
		`],"tools":[{"type":"function","name":"exec_command","description":"run a command","strict":false,"parameters":{"type":"object","properties":{"cmd":{"type":"string"}},"required":["cmd"]}}],"tool_choice":"auto","parallel_tool_calls":false,"reasoning":{"effort":"medium","summary":"auto"},"store":false,"stream":true,"include":["reasoning.encrypted_content"],"prompt_cache_key":"0199-codex-thread"` + extra + `}`
}

// postOpenAI sends an OpenAI request to path as an agent would.
func (f *fixture) postOpenAI(path, body string, hdr map[string]string) (*http.Response, []byte) {
	f.t.Helper()
	req, _ := http.NewRequest("POST", f.url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+testKey)
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

func openAIConfig(f func(*config.Config)) config.Config {
	cfg := testConfig()
	cfg.Models["gpt-5.2-codex"] = config.Model{ContextLimit: 400000, TokenFactor: 1}
	if f != nil {
		f(&cfg)
	}
	return cfg
}

// newOpenAIFixture is a fixture whose OpenAI upstream is the scripted
// upstream.
func newOpenAIFixture(t *testing.T, cfg config.Config) *fixture {
	f := newFixture(t, cfg)
	// Before any request: the scripted upstream serves both APIs.
	u, err := url.Parse(f.up.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	f.p.openai = u
	return f
}

func inputOf(t *testing.T, body []byte) []json.RawMessage {
	t.Helper()
	var r struct {
		Input []json.RawMessage `json:"input"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	return r.Input
}

// TestResponsesManaged: a Codex-like conversation through POST
// /v1/responses. The session is named by the session-id header; the
// developer message and additional_tools item stay first, verbatim; the
// reasoning item goes back with its encrypted_content byte for byte; the
// answer ctxd recorded from the stream is not appended a second time when
// the client resends it; every field but input reaches the upstream
// unchanged; and the second upstream request extends the first byte for
// byte.
func TestResponsesManaged(t *testing.T) {
	f := newOpenAIFixture(t, openAIConfig(nil))
	hdr := map[string]string{"Session-Id": "0199-codex-thread"}
	call := `{"type":"function_call","id":"fc_1","call_id":"call_1","name":"exec_command","arguments":"{\"cmd\":\"go test ./...\"}"}`
	f.up.script(reply{stream: true, body: responsesSSE([]string{codexReasoning, call}, 3000, 0, 40)})
	c := newCodexConversation()
	resp, got := f.postOpenAI("/v1/responses", c.body(""), hdr)
	if resp.StatusCode != 200 || !strings.Contains(string(got), "response.completed") {
		t.Fatalf("%d %s", resp.StatusCode, got)
	}
	id := resp.Header.Get(HeaderSessionID)
	if id == "" {
		t.Fatalf("no session (diagnostic %q)", resp.Header.Get(HeaderDiagnostic))
	}
	f.up.script(reply{stream: true, body: responsesSSE([]string{`{"type":"message","role":"assistant","id":"msg_2","content":[{"type":"output_text","text":"The build passes now.","annotations":[]}]}`}, 3100, 2900, 10)})
	c.add(codexReasoningC, call, `{"type":"function_call_output","call_id":"call_1","output":"ok  \tgithub.com/x/y\t0.1s"}`)
	resp2, _ := f.postOpenAI("/v1/responses", c.body(""), hdr)
	if resp2.StatusCode != 200 || resp2.Header.Get(HeaderSessionID) != id {
		t.Fatalf("second request: %d, session %q (first %q), diagnostic %q", resp2.StatusCode, resp2.Header.Get(HeaderSessionID), id, resp2.Header.Get(HeaderDiagnostic))
	}
	f.settle()
	reqs := f.up.requests()
	if len(reqs) != 2 || reqs[0].path != "/v1/responses" {
		t.Fatalf("%d upstream requests", len(reqs))
	}
	in1, in2 := inputOf(t, reqs[0].body), inputOf(t, reqs[1].body)
	if string(in2[0]) != codexDeveloper || string(in2[1]) != codexAddlTools {
		t.Errorf("prefix items not kept first and verbatim: %s %s", in2[0], in2[1])
	}
	// The reasoning item goes back as the client resent it (Codex adds
	// "content":null), its encrypted_content byte for byte.
	if !bytes.Contains(reqs[1].body, []byte(codexReasoningC)) {
		t.Errorf("the reasoning item did not go back as the client's bytes:\n%s", reqs[1].body)
	}
	for i := range in1 {
		if !bytes.Equal(in1[i], in2[i]) {
			t.Errorf("input[%d] changed between requests: %s → %s", i, in1[i], in2[i])
		}
	}
	if len(in2) != 6 {
		t.Errorf("second request has %d input items, want 6 (2 prefix, user, reasoning, call, output)", len(in2))
	}
	// Every field but input is the client's, byte for byte.
	client := c.body("")
	out := string(reqs[1].body)
	cut := func(s string) string {
		i := strings.Index(s, `"input":[`)
		j := strings.Index(s, `],"tools"`)
		return s[:i] + s[j:]
	}
	if cut(client) != cut(out) {
		t.Errorf("fields other than input changed:\n client %s\n    out %s", cut(client), cut(out))
	}
	if reqs[1].header.Get("Authorization") != "Bearer "+testKey || reqs[1].header.Get("Session-Id") != "0199-codex-thread" {
		t.Errorf("client headers not forwarded: %v", reqs[1].header)
	}
	a, err := f.eng.Context(context.Background(), id, engineNoPreSend)
	if err != nil {
		t.Fatal(err)
	}
	msgs := a.Messages
	var roles []string
	for _, m := range msgs {
		roles = append(roles, string(m.Role))
	}
	if strings.Join(roles, ",") != "user,assistant,tool,assistant" {
		t.Errorf("recorded roles %v", roles)
	}
	if u := msgs[3].Usage; u == nil || u.CacheReadInputTokens != 2900 || u.InputTokens != 200 {
		t.Errorf("recorded usage %+v", msgs[3].Usage)
	}
	s, err := f.eng.Session(context.Background(), id)
	if err != nil || s.Labels["proxy"] != "responses" {
		t.Errorf("session labels %v %v", s.Labels, err)
	}
}

// TestResponsesPreviousResponseID: a request continuing server-side state
// is forwarded untouched, with a diagnostic, and no session.
func TestResponsesPreviousResponseID(t *testing.T) {
	f := newOpenAIFixture(t, openAIConfig(nil))
	f.up.script(reply{stream: true, body: responsesSSE([]string{`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"hi"}]}`}, 10, 0, 1)})
	body := newCodexConversation().body(`,"previous_response_id":"resp_0"`)
	resp, _ := f.postOpenAI("/v1/responses", body, nil)
	if resp.StatusCode != 200 || resp.Header.Get(HeaderSessionID) != "" || !strings.Contains(resp.Header.Get(HeaderDiagnostic), "previous_response_id") {
		t.Fatalf("%d session %q diagnostic %q", resp.StatusCode, resp.Header.Get(HeaderSessionID), resp.Header.Get(HeaderDiagnostic))
	}
	if got := f.up.requests()[0].body; string(got) != body {
		t.Errorf("body changed:\n%s\n%s", body, got)
	}
}

// TestOpenAIOverflowRecovered: the real context-length refusals of the
// Responses API and of Chat Completions (corpus) make ctxd compact and
// retry once; the client sees only the answer.
func TestOpenAIOverflowRecovered(t *testing.T) {
	for _, tc := range []struct{ path, errID string }{
		{"/v1/responses", "openai_responses_context_length_exceeded"},
		{"/v1/chat/completions", "openai_chat_400_context_length_exceeded_pretty"},
		{"/v1/chat/completions", "openai_chat_400_context_length_exceeded_with_completion"},
	} {
		t.Run(tc.errID, func(t *testing.T) {
			f := newOpenAIFixture(t, openAIConfig(nil))
			hdr := map[string]string{"Session-Id": "s-" + tc.errID}
			var body func(rounds int) string
			if tc.path == "/v1/responses" {
				c := newCodexConversation()
				body = func(rounds int) string {
					for i := len(c.items) - 3; i/2 < rounds; i += 2 {
						id := fmt.Sprintf("call_%d", i)
						c.add(fmt.Sprintf(`{"type":"function_call","call_id":%q,"name":"exec_command","arguments":"{\"cmd\":\"step %d\"}"}`, id, i),
							fmt.Sprintf(`{"type":"function_call_output","call_id":%q,"output":%q}`, id, words(i, 1500)))
					}
					return c.body("")
				}
			} else {
				msgs := []string{`{"role":"system","content":"You are pi."}`, `{"role":"user","content":"fix the build"}`}
				body = func(rounds int) string {
					for i := 0; i < rounds; i++ {
						id := fmt.Sprintf("call_%d", i)
						msgs = append(msgs, fmt.Sprintf(`{"role":"assistant","content":null,"tool_calls":[{"id":%q,"type":"function","function":{"name":"bash","arguments":"{\"command\":\"step %d\"}"}}]}`, id, i),
							fmt.Sprintf(`{"role":"tool","content":%q,"tool_call_id":%q}`, words(i, 1500), id))
					}
					return `{"model":"gpt-5.2-codex","messages":[` + strings.Join(msgs, ",") + `],"stream":true,"stream_options":{"include_usage":true}}`
				}
			}
			f.up.script(reply{status: 400, body: overflowBody(t, tc.errID)}, reply{stream: true, body: chatOrResponsesText(tc.path, "fixed")})
			resp, got := f.postOpenAI(tc.path, body(6), hdr)
			if resp.StatusCode != 200 || !strings.Contains(string(got), "fixed") {
				t.Fatalf("client got %d %s\nlogs: %s", resp.StatusCode, got, f.logs)
			}
			reqs := f.up.requests()
			if len(reqs) != 2 || len(reqs[1].body) >= len(reqs[0].body) {
				t.Fatalf("%d upstream requests (want the refused one and a smaller retry)", len(reqs))
			}
			cs := compactions(t, f, resp.Header.Get(HeaderSessionID))
			if len(cs) != 1 || cs[0]["reason"] != "overflow" || f.p.Stats().Overflows != 1 {
				t.Errorf("compactions %v, stats %+v", cs, f.p.Stats())
			}
		})
	}
}

func words(i, n int) string {
	var sb strings.Builder
	for w := range n {
		fmt.Fprintf(&sb, "word%d-%d ", i, w)
	}
	return sb.String()
}

// chatOrResponsesText is a streamed text answer in the API of path.
func chatOrResponsesText(path, text string) string {
	if path == "/v1/responses" {
		return responsesSSE([]string{fmt.Sprintf(`{"type":"message","role":"assistant","content":[{"type":"output_text","text":%q}]}`, text)}, 100, 0, 5)
	}
	return chatSSE(text, nil, true)
}

// chatSSE renders a streamed Chat answer: text, tool calls (id, name,
// arguments; the arguments split in two deltas), and the usage chunk when
// usage is set.
func chatSSE(text string, calls [][3]string, usage bool) string {
	var b strings.Builder
	chunk := func(s string) { b.WriteString("data: " + s + "\n\n") }
	if text != "" {
		chunk(fmt.Sprintf(`{"id":"c1","object":"chat.completion.chunk","model":"gpt-local-1","choices":[{"index":0,"delta":{"role":"assistant","content":%q},"finish_reason":null}]}`, text))
	}
	for i, c := range calls {
		half := len(c[2]) / 2
		chunk(fmt.Sprintf(`{"id":"c1","object":"chat.completion.chunk","model":"gpt-local-1","choices":[{"index":0,"delta":{"tool_calls":[{"index":%d,"id":%q,"type":"function","function":{"name":%q,"arguments":%q}}]},"finish_reason":null}]}`, i, c[0], c[1], c[2][:half]))
		chunk(fmt.Sprintf(`{"id":"c1","object":"chat.completion.chunk","model":"gpt-local-1","choices":[{"index":0,"delta":{"tool_calls":[{"index":%d,"function":{"arguments":%q}}]},"finish_reason":null}]}`, i, c[2][half:]))
	}
	chunk(`{"id":"c1","object":"chat.completion.chunk","model":"gpt-local-1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`)
	if usage {
		chunk(`{"id":"c1","object":"chat.completion.chunk","model":"gpt-local-1","choices":[],"usage":{"prompt_tokens":1200,"completion_tokens":7,"total_tokens":1207,"prompt_tokens_details":{"cached_tokens":1000}}}`)
	}
	b.WriteString("data: [DONE]\n\n")
	return b.String()
}

// TestChatUsageAskedAndHidden: a streaming Chat client that did not ask
// for usage gets the upstream asked for it (stream_options.include_usage)
// and never sees the extra chunk, while ctxd records the usage and the
// tool call reassembled from its argument deltas; a client that asked sees
// the chunk and its body is sent as it wrote it.
func TestChatUsageAskedAndHidden(t *testing.T) {
	f := newOpenAIFixture(t, openAIConfig(func(c *config.Config) { c.Models["gpt-local-1"] = config.Model{ContextLimit: 200000, TokenFactor: 1} }))
	hdr := map[string]string{"Session_id": "pi-1"}
	body := `{"model":"gpt-local-1","messages":[{"role":"system","content":"You are pi."},{"role":"user","content":"list files"}],"tools":[{"type":"function","function":{"name":"bash","description":"run","parameters":{"type":"object","properties":{"command":{"type":"string"}}}}}],"stream":true}`
	f.up.script(reply{stream: true, body: chatSSE("", [][3]string{{"call_9", "bash", `{"command":"ls -la"}`}}, true)})
	resp, got := f.postOpenAI("/v1/chat/completions", body, hdr)
	if resp.StatusCode != 200 || resp.Header.Get(HeaderSessionID) == "" {
		t.Fatalf("%d %q %s", resp.StatusCode, resp.Header.Get(HeaderDiagnostic), got)
	}
	if bytes.Contains(got, []byte(`"usage"`)) || !bytes.HasSuffix(got, []byte("data: [DONE]\n\n")) || !bytes.Contains(got, []byte(`"finish_reason":"stop"`)) {
		t.Errorf("the client saw the usage chunk or lost a byte:\n%s", got)
	}
	up := f.up.requests()[0].body
	if !bytes.HasPrefix(up, []byte(`{"stream_options":{"include_usage":true},"model"`)) {
		t.Errorf("upstream body %s", up)
	}
	f.settle()
	a, _ := f.eng.Context(context.Background(), resp.Header.Get(HeaderSessionID), engineNoPreSend)
	msgs := a.Messages
	last := msgs[len(msgs)-1]
	if last.Role != history.RoleAssistant || len(last.Content) != 1 || last.Content[0].ID != "call_9" || string(last.Content[0].Input) != `{"command":"ls -la"}` {
		t.Fatalf("recorded answer %+v", last)
	}
	if last.Usage == nil || last.Usage.InputTokens != 200 || last.Usage.CacheReadInputTokens != 1000 {
		t.Errorf("usage %+v", last.Usage)
	}

	asked := strings.Replace(body, `"stream":true`, `"stream":true,"stream_options":{"include_usage":true}`, 1)
	asked = strings.Replace(asked, "list files", "list other files", 1)
	f.up.script(reply{stream: true, body: chatSSE("done", nil, true)})
	_, got = f.postOpenAI("/v1/chat/completions", asked, map[string]string{"Session_id": "pi-2"})
	if !bytes.Contains(got, []byte(`"usage"`)) {
		t.Errorf("a client that asked for usage did not get it:\n%s", got)
	}
	if up := f.up.requests()[1].body; bytes.Count(up, []byte("stream_options")) != 1 {
		t.Errorf("upstream body %s", up)
	}
}

// TestChatUsageFilterSplit: the usage chunk is hidden however the stream
// is cut into reads.
func TestChatUsageFilterSplit(t *testing.T) {
	stream := chatSSE("hello", [][3]string{{"c", "bash", `{"command":"x"}`}}, true)
	want := chatSSE("hello", [][3]string{{"c", "bash", `{"command":"x"}`}}, false)
	for _, step := range []int{1, 3, 64, len(stream)} {
		f := &chat.UsageFilter{ReadCloser: io.NopCloser(&slowReader{s: stream, n: step})}
		got, err := io.ReadAll(f)
		if err != nil || string(got) != want {
			t.Fatalf("step %d: %v\n%s", step, err, got)
		}
	}
}

type slowReader struct {
	s string
	n int
}

func (r *slowReader) Read(p []byte) (int, error) {
	if r.s == "" {
		return 0, io.EOF
	}
	n := copy(p, r.s[:min(r.n, len(r.s))])
	r.s = r.s[n:]
	return n, nil
}

// TestOpenAIPassThroughRouting: requests ctxd does not manage go to the
// upstream of their API: OpenAI's paths and bearer-only requests to the
// OpenAI upstream, Anthropic's (anthropic-version, x-api-key) to
// Anthropic's.
func TestOpenAIPassThroughRouting(t *testing.T) {
	for _, tc := range []struct {
		method, path string
		hdr          map[string]string
		want         string
	}{
		{"GET", "/v1/models", map[string]string{"Authorization": "Bearer sk-x"}, "openai"},
		{"GET", "/v1/models", map[string]string{"X-Api-Key": "sk-ant", "Anthropic-Version": "2023-06-01"}, "anthropic"},
		{"POST", "/v1/messages/count_tokens", map[string]string{"Authorization": "Bearer oauth"}, "anthropic"},
		{"HEAD", "/", map[string]string{"Anthropic-Version": "2023-06-01", "Authorization": "Bearer oauth"}, "anthropic"},
		{"POST", "/v1/embeddings", nil, "openai"},
		{"GET", "/", nil, "anthropic"},
	} {
		r, _ := http.NewRequest(tc.method, "http://127.0.0.1:7420"+tc.path, nil)
		for k, v := range tc.hdr {
			r.Header.Set(k, v)
		}
		if got := upstreamOf(r); got != tc.want {
			t.Errorf("%s %s %v: upstream %s, want %s", tc.method, tc.path, tc.hdr, got, tc.want)
		}
	}
}

// TestChatNonStreamedRecorded: a non-streamed Chat answer is recorded with
// its usage, and a later request that carries it back extends the same
// session.
func TestChatNonStreamedRecorded(t *testing.T) {
	f := newOpenAIFixture(t, openAIConfig(nil))
	hdr := map[string]string{"Session_id": "chat-ns"}
	first := `{"model":"gpt-5.2-codex","messages":[{"role":"user","content":"hi"}]}`
	f.up.script(reply{status: 200, body: `{"id":"c","object":"chat.completion","model":"gpt-5.2-codex","choices":[{"index":0,"message":{"role":"assistant","content":"Hello."},"finish_reason":"stop"}],"usage":{"prompt_tokens":50,"completion_tokens":2}}`})
	resp, _ := f.postOpenAI("/v1/chat/completions", first, hdr)
	id := resp.Header.Get(HeaderSessionID)
	if resp.StatusCode != 200 || id == "" {
		t.Fatalf("%d %q", resp.StatusCode, resp.Header.Get(HeaderDiagnostic))
	}
	f.up.script(reply{status: 200, body: `{"id":"c","object":"chat.completion","model":"gpt-5.2-codex","choices":[{"index":0,"message":{"role":"assistant","content":"Bye."},"finish_reason":"stop"}],"usage":{"prompt_tokens":60,"completion_tokens":2}}`})
	second := `{"model":"gpt-5.2-codex","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Hello."},{"role":"user","content":"bye"}]}`
	resp2, _ := f.postOpenAI("/v1/chat/completions", second, hdr)
	if resp2.Header.Get(HeaderSessionID) != id || f.p.Stats().Branches != 0 {
		t.Fatalf("session %q (want %q), stats %+v", resp2.Header.Get(HeaderSessionID), id, f.p.Stats())
	}
	f.settle()
	a, _ := f.eng.Context(context.Background(), id, engineNoPreSend)
	if len(a.Messages) != 4 || a.Messages[3].Usage == nil || a.Messages[3].Usage.InputTokens != 60 {
		t.Fatalf("recorded %d messages, last usage %+v", len(a.Messages), a.Messages[len(a.Messages)-1].Usage)
	}
	if got := string(f.up.requests()[1].body); got != second {
		t.Errorf("outgoing body differs from the client's (same conversation):\n%s\n%s", second, got)
	}
}
