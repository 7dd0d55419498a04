package fakeprovider

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/internal/corpustest"
)

const execTool = `{"type":"function","name":"exec_command","parameters":{"type":"object","properties":{"cmd":{"type":"string"}},"required":["cmd"]}}`
const chatBash = `{"type":"function","function":{"name":"bash","parameters":{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}}}`

func postOpenAI(t *testing.T, p *Provider, path, b string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, p.URL()+path, strings.NewReader(b))
	req.Header.Set("Authorization", "Bearer sk-test")
	req.Header.Set("content-type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// dataLines returns the JSON of each "data:" line of a stream, and whether
// the stream ended with "data: [DONE]".
func dataLines(t *testing.T, b []byte) ([]map[string]any, bool) {
	t.Helper()
	var out []map[string]any
	done := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if done {
			t.Fatalf("data after [DONE]: %s", line)
		}
		if line == "[DONE]" {
			done = true
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("data is not JSON: %s", line)
		}
		out = append(out, m)
	}
	return out, done
}

// TestResponsesStream checks a streamed Responses answer with reasoning and
// a function call: the event sequence, sequence numbers from 0, arguments
// deltas that add up to the item's arguments, the completed response's output
// and usage; and that the whole (non-streamed) answer has the same output.
func TestResponsesStream(t *testing.T) {
	p := Start(t, Config{ChunkBytes: 10})
	req := `{"model":"gpt-5.2-codex","stream":true,"reasoning":{"summary":"auto"},"instructions":"Be a coder.","tools":[` + execTool + `],` +
		`"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"go"}]}]}`
	status, b := postOpenAI(t, p, "/v1/responses", req)
	if status != 200 {
		t.Fatalf("status %d: %s", status, b)
	}
	evs, _ := dataLines(t, b)
	var seq []string
	args := ""
	var completed map[string]any
	for i, e := range evs {
		if e["sequence_number"].(float64) != float64(i) {
			t.Fatalf("event %d has sequence_number %v", i, e["sequence_number"])
		}
		typ := e["type"].(string)
		if typ == "response.output_item.added" {
			typ += ":" + e["item"].(map[string]any)["type"].(string)
		}
		if len(seq) == 0 || seq[len(seq)-1] != typ {
			seq = append(seq, typ)
		}
		switch e["type"] {
		case "response.function_call_arguments.delta":
			args += e["delta"].(string)
		case "response.completed":
			completed = e["response"].(map[string]any)
		}
	}
	want := []string{"response.created", "response.in_progress",
		"response.output_item.added:reasoning", "response.output_item.done",
		"response.output_item.added:message", "response.content_part.added", "response.output_text.delta", "response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.output_item.added:function_call", "response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done",
		"response.completed"}
	if !reflect.DeepEqual(seq, want) {
		t.Fatalf("events\n got %v\nwant %v", seq, want)
	}
	out := completed["output"].([]any)
	fc := out[2].(map[string]any)
	if fc["arguments"] != args || !strings.Contains(args, `ctxd-fake-round-$((1))-done`) || !strings.HasPrefix(fc["call_id"].(string), "call_") {
		t.Errorf("function call %v, streamed arguments %q", fc, args)
	}
	rs := out[0].(map[string]any)
	if rs["encrypted_content"] != Sign(rs["summary"].([]any)[0].(map[string]any)["text"].(string)) {
		t.Errorf("reasoning item %v not signed", rs)
	}
	if u := completed["usage"].(map[string]any); u["input_tokens"].(float64) != float64(countOpenAI([]byte(req))) {
		t.Errorf("usage %v", u)
	}

	status, b = postOpenAI(t, p, "/v1/responses", strings.Replace(req, `"stream":true`, `"stream":false`, 1))
	var whole map[string]any
	if err := json.Unmarshal(b, &whole); err != nil || status != 200 || whole["status"] != "completed" {
		t.Fatalf("non-streaming: %d %s", status, b)
	}
	strip := func(v any) string { s, _ := json.Marshal(v); return string(s) }
	for i := range out {
		a, w := out[i].(map[string]any), whole["output"].([]any)[i].(map[string]any)
		delete(a, "id")
		delete(w, "id")
		if strip(a) != strip(w) {
			t.Errorf("output %d: streamed %s, whole %s", i, strip(a), strip(w))
		}
	}
}

// TestChatStream checks streamed Chat Completions: a role chunk, content
// deltas, tool-call deltas that add up to the arguments, the finish_reason,
// a usage chunk only when stream_options.include_usage asks, and [DONE].
func TestChatStream(t *testing.T) {
	p := Start(t, Config{ChunkBytes: 10})
	for _, withUsage := range []bool{false, true} {
		t.Run(fmt.Sprint("include_usage=", withUsage), func(t *testing.T) {
			opts := ""
			if withUsage {
				opts = `"stream_options":{"include_usage":true},`
			}
			req := `{"model":"gpt-local-1","stream":true,` + opts + `"tools":[` + chatBash + `],"messages":[{"role":"system","content":"Working directory: /tmp"},{"role":"user","content":"go"}]}`
			status, b := postOpenAI(t, p, "/v1/chat/completions", req)
			chunks, done := dataLines(t, b)
			if status != 200 || !done {
				t.Fatalf("status %d, [DONE] %v: %s", status, done, b)
			}
			var content, args, finish string
			usage := 0
			for _, c := range chunks {
				if c["object"] != "chat.completion.chunk" {
					t.Fatalf("chunk object %v", c["object"])
				}
				if u, ok := c["usage"].(map[string]any); ok {
					usage++
					if len(c["choices"].([]any)) != 0 || u["prompt_tokens"].(float64) != float64(countOpenAI([]byte(req))) {
						t.Errorf("usage chunk %v", c)
					}
					continue
				}
				ch := c["choices"].([]any)[0].(map[string]any)
				d := ch["delta"].(map[string]any)
				if s, ok := d["content"].(string); ok {
					content += s
				}
				for _, tc := range asSlice(d["tool_calls"]) {
					args += tc.(map[string]any)["function"].(map[string]any)["arguments"].(string)
				}
				if f, ok := ch["finish_reason"].(string); ok {
					finish = f
				}
			}
			var in map[string]string
			if err := json.Unmarshal([]byte(args), &in); err != nil || !strings.Contains(in["command"], "ctxd-fake-round-$((1))-done") {
				t.Errorf("tool call arguments %q", args)
			}
			if finish != "tool_calls" || content != "Running step shell." {
				t.Errorf("finish %q content %q", finish, content)
			}
			if want := map[bool]int{false: 0, true: 1}[withUsage]; usage != want {
				t.Errorf("%d usage chunks, want %d", usage, want)
			}
		})
	}
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// TestOpenAIRefuses checks OpenAI's own rules and texts: Chat tool messages
// without their call, calls without their tool messages, Responses outputs
// without calls and calls without outputs, the context window of both APIs,
// and a missing key.
func TestOpenAIRefuses(t *testing.T) {
	call := `{"role":"assistant","content":null,"tool_calls":[{"id":"call_A","type":"function","function":{"name":"bash","arguments":"{\"command\":\"ls\"}"}}]}`
	tool := func(id string) string { return `{"role":"tool","tool_call_id":"` + id + `","content":"ok"}` }
	chat := func(msgs ...string) string {
		return `{"model":"m","tools":[` + chatBash + `],"messages":[{"role":"user","content":"go"},` + strings.Join(msgs, ",") + `]}`
	}
	fc := `{"type":"function_call","call_id":"call_A","name":"exec_command","arguments":"{\"cmd\":\"ls\"}"}`
	fco := func(id string) string { return `{"type":"function_call_output","call_id":"` + id + `","output":"ok"}` }
	resp := func(items ...string) string {
		return `{"model":"m","tools":[` + execTool + `],"input":[{"type":"message","role":"user","content":"go"},` + strings.Join(items, ",") + `]}`
	}
	tests := []struct {
		name, path, body string
		status           int
		param, code, msg string
	}{
		{"chat: tool without call", "/v1/chat/completions", chat(`{"role":"assistant","content":"hi"}`, tool("call_A")), 400, "messages.[2].role", "",
			"Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'."},
		{"chat: call without tool message", "/v1/chat/completions", chat(call, `{"role":"user","content":"next"}`), 400, "messages.[1].role", "",
			"An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: call_A"},
		{"chat: valid loop", "/v1/chat/completions", chat(call, tool("call_A")), 200, "", "", ""},
		{"chat: unknown role", "/v1/chat/completions", `{"model":"m","messages":[{"role":"wizard","content":"go"}]}`, 400, "messages.[0].role", "",
			"Invalid value: 'wizard'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'."},
		{"chat: no messages", "/v1/chat/completions", `{"model":"m","messages":[]}`, 400, "messages", "", "[] is too short - 'messages'"},
		{"chat: a system message only", "/v1/chat/completions", `{"model":"m","messages":[{"role":"system","content":"be brief"}]}`, 200, "", "", ""},
		{"responses: call without output", "/v1/responses", resp(fc), 400, "input", "", "No tool output found for function call call_A."},
		{"responses: output without call", "/v1/responses", resp(fco("call_B")), 400, "input", "", "No tool call found for function call output with call_id call_B."},
		{"responses: valid loop", "/v1/responses", resp(fc, fco("call_A")), 200, "", "", ""},
	}
	p := Start(t, Config{})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, b := postOpenAI(t, p, tc.path, tc.body)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, b)
			}
			if status == 200 {
				return
			}
			var e struct {
				Error struct {
					Message, Type string
					Param, Code   *string
				} `json:"error"`
			}
			if err := json.Unmarshal(b, &e); err != nil || e.Error.Type != "invalid_request_error" {
				t.Fatalf("not an OpenAI error body: %s", b)
			}
			if e.Error.Message != tc.msg || e.Error.Param == nil || *e.Error.Param != tc.param || e.Error.Code != nil {
				t.Fatalf("got %s\nwant message %q param %q code null", b, tc.msg, tc.param)
			}
		})
	}

	req, _ := http.NewRequest(http.MethodPost, p.URL()+"/v1/responses", strings.NewReader(resp()))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 401 || !strings.Contains(string(b), "You didn't provide an API key") {
		t.Errorf("no key: %d %s", res.StatusCode, b)
	}
}

// TestOpenAIContextWindow checks both APIs' context-length answers against
// the real bodies of the corpus: Chat's byte for byte with the corpus's
// figures, the Responses one as the same JSON.
func TestOpenAIContextWindow(t *testing.T) {
	bodies := map[string]string{}
	for _, e := range corpustest.ErrorBodies(t) {
		if e.Body != nil {
			bodies[e.ID] = *e.Body
		}
	}
	chatReal, respReal := bodies["openai_chat_400_context_length_exceeded_compact"], bodies["openai_responses_context_length_exceeded"]
	if chatReal == "" || respReal == "" {
		t.Fatal("corpus lacks the OpenAI context-length bodies")
	}
	e := &OpenAIError{Status: 400, Type: "invalid_request_error", Param: "messages", Code: "context_length_exceeded",
		Message: fmt.Sprintf(msgChatTooLong, 4097, 4294)}
	if string(e.Body()) != chatReal {
		t.Errorf("chat body\n got %s\nwant %s", e.Body(), chatReal)
	}

	p := Start(t, Config{WindowTokens: 50})
	status, b := postOpenAI(t, p, "/v1/responses", `{"model":"m","input":"`+strings.Repeat("x", 400)+`"}`)
	var got, want any
	_ = json.Unmarshal(b, &got)
	_ = json.Unmarshal([]byte(respReal), &want)
	if status != 400 || !reflect.DeepEqual(got, want) {
		t.Errorf("responses: %d %s\nwant %s", status, b, respReal)
	}
	body := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 400) + `"}]}`
	status, b = postOpenAI(t, p, "/v1/chat/completions", body)
	wantMsg := fmt.Sprintf("This model's maximum context length is 50 tokens. However, your messages resulted in %d tokens.", countOpenAI([]byte(body)))
	if status != 400 || !strings.Contains(string(b), wantMsg) || !strings.Contains(string(b), `"code":"context_length_exceeded"`) {
		t.Errorf("chat: %d %s", status, b)
	}
}

// TestResponsesCodeMode checks Codex's code mode: no tools field, the tools
// in an additional_tools input item, among them the free-form "exec" tool;
// the fake calls it with JavaScript running the command through
// tools.exec_command, streamed as custom_tool_call input deltas, and reads
// the custom_tool_call_output back as the round's evidence.
func TestResponsesCodeMode(t *testing.T) {
	p := Start(t, Config{Rounds: 2, ChunkBytes: 20})
	at := `{"type":"additional_tools","role":"developer","tools":[{"type":"namespace","name":"functions","tools":[{"type":"custom","name":"exec","description":"Run JavaScript"},{"type":"function","name":"wait","parameters":{"type":"object","properties":{}}}]}]}`
	req := `{"model":"gpt-6","stream":true,"input":[` + at + `,{"type":"message","role":"user","content":[{"type":"input_text","text":"go"}]}]}`
	status, b := postOpenAI(t, p, "/v1/responses", req)
	evs, _ := dataLines(t, b)
	in := ""
	var item map[string]any
	for _, e := range evs {
		switch e["type"] {
		case "response.custom_tool_call_input.delta":
			in += e["delta"].(string)
		case "response.output_item.done":
			if it := e["item"].(map[string]any); it["type"] == "custom_tool_call" {
				item = it
			}
		}
	}
	if status != 200 || item == nil || item["input"] != in || item["name"] != "exec" ||
		!strings.HasPrefix(in, "const r = await tools.exec_command({cmd: ") || !strings.Contains(in, `ctxd-fake-round-$((1))-done`) {
		t.Fatalf("status %d, custom tool call %v, streamed input %q", status, item, in)
	}
	// Round 1's output comes back: the fake goes on with round 2.
	next := strings.Replace(req, `"stream":true`, `"stream":false`, 1)
	next = strings.TrimSuffix(next, "]}") + `,{"type":"custom_tool_call","call_id":"` + item["call_id"].(string) + `","name":"exec","input":"x"},` +
		`{"type":"custom_tool_call_output","call_id":"` + item["call_id"].(string) + `","output":[{"type":"input_text","text":"{\"output\":\"ctxd-fake-round-1-done\\n\"}"}]}]}`
	status, b = postOpenAI(t, p, "/v1/responses", next)
	if status != 200 || !strings.Contains(string(b), `ctxd-fake-round-$((2))-done`) {
		t.Fatalf("after round 1: %d %s", status, b)
	}
}
