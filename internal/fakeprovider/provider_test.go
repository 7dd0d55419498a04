package fakeprovider

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/internal/corpustest"
	"github.com/ctxd/ctxd/summarizer"
)

// sseEvent is one server-sent event: its name and JSON data.
type sseEvent struct {
	name string
	data map[string]any
}

// readSSE splits an Anthropic event stream into events, failing t on a line
// that is neither "event:", "data:" nor blank, or on data that is not JSON
// whose "type" is the event name.
func readSSE(t *testing.T, b []byte) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &cur.data); err != nil {
				t.Fatalf("data is not JSON: %s", line)
			}
		case line == "":
			if cur.name != "" {
				if cur.data["type"] != cur.name {
					t.Fatalf("event %s carries data of type %v", cur.name, cur.data["type"])
				}
				out = append(out, cur)
			}
			cur = sseEvent{}
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
	return out
}

// assemble rebuilds the message a stream spells out, as an SDK does, and
// returns it with the event names in order (deltas named by delta type).
func assemble(t *testing.T, evs []sseEvent) (map[string]any, []string) {
	t.Helper()
	var msg map[string]any
	var blocks []map[string]any
	var partial []string
	var names []string
	for _, e := range evs {
		switch e.name {
		case "message_start":
			msg = e.data["message"].(map[string]any)
			names = append(names, e.name)
		case "content_block_start":
			cb := e.data["content_block"].(map[string]any)
			if int(e.data["index"].(float64)) != len(blocks) {
				t.Fatalf("content_block_start index %v, want %d", e.data["index"], len(blocks))
			}
			blocks = append(blocks, cb)
			partial = append(partial, "")
			names = append(names, e.name+":"+cb["type"].(string))
		case "content_block_delta":
			i := int(e.data["index"].(float64))
			d := e.data["delta"].(map[string]any)
			names = append(names, d["type"].(string))
			switch d["type"] {
			case "text_delta":
				blocks[i]["text"] = blocks[i]["text"].(string) + d["text"].(string)
			case "thinking_delta":
				blocks[i]["thinking"] = blocks[i]["thinking"].(string) + d["thinking"].(string)
			case "signature_delta":
				blocks[i]["signature"] = d["signature"]
			case "input_json_delta":
				partial[i] += d["partial_json"].(string)
			}
		case "content_block_stop":
			i := int(e.data["index"].(float64))
			if blocks[i]["type"] == "tool_use" {
				var in any
				if err := json.Unmarshal([]byte(partial[i]), &in); err != nil {
					t.Fatalf("tool_use input %q is not JSON: %v", partial[i], err)
				}
				blocks[i]["input"] = in
			}
			names = append(names, e.name)
		case "message_delta":
			d := e.data["delta"].(map[string]any)
			msg["stop_reason"] = d["stop_reason"]
			msg["usage"] = e.data["usage"]
			names = append(names, e.name)
		default:
			names = append(names, e.name)
		}
	}
	content := make([]any, len(blocks))
	for i, b := range blocks {
		content[i] = b
	}
	msg["content"] = content
	return msg, names
}

// TestStreamLikeTheAPI streams an answer with thinking, text and a tool call
// and checks the event sequence of the real API, that the deltas assemble to
// the same message the non-streaming answer returns, and that the usage
// arrives in message_start and message_delta.
func TestStreamLikeTheAPI(t *testing.T) {
	p := Start(t, Config{ChunkBytes: 16})
	reqBody := strings.Replace(body(true, `{"role":"user","content":"go"}`), `"max_tokens"`, `"stream":true,"max_tokens"`, 1)
	req, _ := http.NewRequest(http.MethodPost, p.URL()+"/v1/messages?beta=true", strings.NewReader(reqBody))
	req.Header.Set("x-api-key", "k")
	req.Header.Set("anthropic-version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var raw bytes.Buffer
	_, _ = raw.ReadFrom(resp.Body)
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("status %d content-type %q", resp.StatusCode, ct)
	}
	streamed, names := assemble(t, readSSE(t, raw.Bytes()))

	// Collapse runs of the same delta for the sequence check.
	var seq []string
	for _, n := range names {
		if len(seq) == 0 || seq[len(seq)-1] != n {
			seq = append(seq, n)
		}
	}
	want := []string{"message_start", "content_block_start:thinking", "ping", "thinking_delta", "signature_delta", "content_block_stop",
		"content_block_start:text", "text_delta", "content_block_stop",
		"content_block_start:tool_use", "input_json_delta", "content_block_stop", "message_delta", "message_stop"}
	if !reflect.DeepEqual(seq, want) {
		t.Fatalf("event sequence\n got %v\nwant %v", seq, want)
	}
	if n := strings.Count(strings.Join(names, " "), "input_json_delta"); n < 3 {
		t.Errorf("tool input streamed in %d deltas, want several (16-byte chunks)", n)
	}
	content := streamed["content"].([]any)
	th := content[0].(map[string]any)
	if th["signature"] != Sign(th["thinking"].(string)) {
		t.Errorf("thinking signature %v does not sign its text", th["signature"])
	}
	if streamed["stop_reason"] != "tool_use" {
		t.Errorf("stop_reason %v", streamed["stop_reason"])
	}
	usage := streamed["usage"].(map[string]any)
	if usage["input_tokens"].(float64) != float64(CountTokens([]byte(reqBody))) || usage["output_tokens"].(float64) < 10 {
		t.Errorf("usage %v", usage)
	}

	// The same request without streaming: the same message.
	status, b := post(t, p, "/v1/messages", strings.Replace(reqBody, `"stream":true`, `"stream":false`, 1), nil)
	var whole map[string]any
	if err := json.Unmarshal(b, &whole); err != nil || status != 200 {
		t.Fatalf("non-streaming: %d %s", status, b)
	}
	if !reflect.DeepEqual(whole["content"], streamed["content"]) {
		t.Errorf("streamed content %v\n      whole content %v", streamed["content"], whole["content"])
	}
	if whole["type"] != "message" || whole["role"] != "assistant" || whole["stop_reason"] != "tool_use" || whole["stop_sequence"] != nil {
		t.Errorf("non-streaming envelope %v", whole)
	}
}

// miniAgent plays an agent's loop against the fake without a real agent: it
// runs the shell tool with bash in dir, writes files for the write tool, and
// moves a cache_control marker to the newest message each request, as
// Claude Code and pi do.
type miniAgent struct {
	t        *testing.T
	p        *Provider
	tools    string
	system   string
	thinking bool
	dir      string
	msgs     []map[string]any
}

func (a *miniAgent) request() string {
	msgs := make([]any, len(a.msgs))
	for i, m := range a.msgs {
		cp := map[string]any{"role": m["role"], "content": m["content"]}
		if i == len(a.msgs)-1 {
			blocks := cp["content"].([]any)
			last := map[string]any{}
			for k, v := range blocks[len(blocks)-1].(map[string]any) {
				last[k] = v
			}
			last["cache_control"] = map[string]any{"type": "ephemeral"}
			cp["content"] = append(append([]any{}, blocks[:len(blocks)-1]...), last)
		}
		msgs[i] = cp
	}
	r := map[string]any{"model": "claude-test", "max_tokens": 4096, "system": a.system,
		"tools": json.RawMessage(a.tools), "messages": msgs}
	if a.thinking {
		r["thinking"] = map[string]any{"type": "adaptive"}
	}
	b, _ := json.Marshal(r)
	return string(b)
}

// turn sends requests until the fake ends its turn; it returns the final
// text.
func (a *miniAgent) turn(prompt string) string {
	a.t.Helper()
	a.msgs = append(a.msgs, map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": prompt}}})
	for range 10 {
		status, b := post(a.t, a.p, "/v1/messages", a.request(), nil)
		if status != 200 {
			a.t.Fatalf("status %d: %s", status, b)
		}
		var m struct {
			Content    []map[string]any `json:"content"`
			StopReason string           `json:"stop_reason"`
		}
		if err := json.Unmarshal(b, &m); err != nil {
			a.t.Fatal(err)
		}
		content := make([]any, len(m.Content))
		for i, c := range m.Content {
			content[i] = c
		}
		a.msgs = append(a.msgs, map[string]any{"role": "assistant", "content": content})
		if m.StopReason != "tool_use" {
			return m.Content[len(m.Content)-1]["text"].(string)
		}
		var results []any
		for _, c := range m.Content {
			if c["type"] != "tool_use" {
				continue
			}
			in := c["input"].(map[string]any)
			var out string
			if cmd, ok := in["command"].(string); ok {
				o, err := exec.Command("bash", "-c", cmd).CombinedOutput()
				if err != nil {
					a.t.Fatalf("%s: %v: %s", cmd, err, o)
				}
				out = string(o)
			} else {
				path, _ := in["file_path"].(string)
				if path == "" {
					path, _ = in["path"].(string)
				}
				if err := os.WriteFile(path, []byte(in["content"].(string)), 0o644); err != nil {
					a.t.Fatal(err)
				}
				out = "Successfully wrote to " + path
			}
			results = append(results, map[string]any{"type": "tool_result", "tool_use_id": c["id"], "content": out})
		}
		a.msgs = append(a.msgs, map[string]any{"role": "user", "content": results})
	}
	a.t.Fatal("no final answer in 10 requests")
	return ""
}

// TestScriptedTask drives the scripted task with the tool shapes of Claude
// Code and pi, with thinking on and off and without a write tool: the steps
// come in order, the file is written where the agent's system prompt says,
// every request extends the one before (markers normalized), and nothing is
// refused.
func TestScriptedTask(t *testing.T) {
	claudeTools := `[{"name":"Bash","input_schema":{"type":"object","properties":{"command":{"type":"string"},"timeout":{"type":"number"}},"required":["command"]}},` +
		`{"name":"Write","input_schema":{"type":"object","properties":{"file_path":{"type":"string"},"content":{"type":"string"}},"required":["file_path","content"]}}]`
	piTools := `[{"name":"read","input_schema":{"type":"object","properties":{"path":{"type":"string"}}}},` +
		`{"name":"bash","input_schema":{"type":"object","properties":{"command":{"type":"string"}}}},` +
		`{"name":"write","input_schema":{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"}}}}]`
	tests := []struct {
		name, tools, system string
		thinking            bool
		writeTool           string
	}{
		{"Claude Code tools, thinking", claudeTools, "Primary working directory: %s\n", true, "Write"},
		{"pi tools, no thinking", piTools, "Current working directory: %s", false, "write"},
		{"shell only", `[` + bashTool + `]`, "Working directory: %s", true, "bash"},
		{"absolute-path write tool, no directory stated", claudeTools, "You are an agent.", false, "Bash"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := Start(t, Config{Rounds: 2, OutputBytes: 3000, Marker: "MARK-42"})
			sys := tc.system
			if strings.Contains(sys, "%s") {
				sys = strings.Replace(sys, "%s", dir, 1)
			}
			a := &miniAgent{t: t, p: p, tools: tc.tools, system: sys, thinking: tc.thinking, dir: dir}
			// The fallback writes a relative path: run the shell in dir.
			t.Chdir(dir)
			final := a.turn("Do the task.")
			if !strings.Contains(final, "MARK-42") {
				t.Fatalf("final answer %q lacks the marker", final)
			}
			var steps []string
			for _, r := range p.Requests() {
				steps = append(steps, r.Step)
			}
			if want := []string{StepShell, StepShell, StepWrite, StepFinal}; !reflect.DeepEqual(steps, want) {
				t.Fatalf("steps %v, want %v", steps, want)
			}
			if got, err := os.ReadFile(filepath.Join(dir, "ctxd-fake-output.txt")); err != nil || string(got) != "written by the fake provider\n" {
				t.Fatalf("written file: %q %v", got, err)
			}
			writeUse := a.msgs[5]["content"].([]any)
			if name := writeUse[len(writeUse)-1].(map[string]any)["name"]; name != tc.writeTool {
				t.Errorf("write step used %v, want %s", name, tc.writeTool)
			}
			out := a.msgs[2]["content"].([]any)[0].(map[string]any)["content"].(string)
			if len(out) < 2900 || len(out) > 3100 || !strings.HasSuffix(out, "ctxd-fake-round-1-done\n") {
				t.Errorf("round 1 printed %d bytes ending %q, want about 3000 ending with its marker", len(out), out[max(0, len(out)-40):])
			}
			if len(p.Refused()) != 0 {
				t.Fatalf("refused: %+v", p.Refused()[0].Error)
			}
			if err := CheckChain(p.Messages(true)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestDecisionsFromTheConversation checks that the fake's next step depends
// on the conversation, not on how many requests came: a resend gets the same
// answer, a side request a plain one, a summary request a summary carrying
// the progress, and a conversation rebuilt from that summary continues where
// the task was.
func TestDecisionsFromTheConversation(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	p := Start(t, Config{Rounds: 3, OutputBytes: 500})
	a := &miniAgent{t: t, p: p, tools: `[` + bashTool + `]`, system: "Working directory: " + dir, thinking: true, dir: dir}
	a.msgs = []map[string]any{{"role": "user", "content": []any{map[string]any{"type": "text", "text": "Do the task."}}}}
	_, first := post(t, p, "/v1/messages", a.request(), nil)
	_, again := post(t, p, "/v1/messages", a.request(), nil)
	if !bytes.Equal(stripID(first), stripID(again)) {
		t.Fatalf("a resend got another answer:\n%s\n%s", first, again)
	}
	// The resend reads from the prompt cache what the first request wrote.
	var u1, u2 struct {
		Usage usage `json:"usage"`
	}
	_, _ = json.Unmarshal(first, &u1), json.Unmarshal(again, &u2)
	if u1.Usage.CacheCreationInputTokens == 0 || u2.Usage.CacheReadInputTokens != u1.Usage.CacheCreationInputTokens {
		t.Fatalf("prompt cache: first %+v, resend %+v", u1.Usage, u2.Usage)
	}

	status, side := post(t, p, "/v1/messages", `{"model":"claude-haiku","max_tokens":50,"messages":[{"role":"user","content":"Write a title for this session"}]}`, nil)
	if status != 200 || !strings.Contains(string(side), `"text":"Fake provider task"`) {
		t.Fatalf("side request: %d %s", status, side)
	}

	// Run round 1 by hand: the answer's tool call, its output.
	var m struct {
		Content []map[string]any `json:"content"`
	}
	_ = json.Unmarshal(first, &m)
	use := m.Content[len(m.Content)-1]
	o, err := exec.Command("bash", "-c", use["input"].(map[string]any)["command"].(string)).Output()
	if err != nil {
		t.Fatal(err)
	}
	content := make([]any, len(m.Content))
	for i, c := range m.Content {
		content[i] = c
	}
	a.msgs = append(a.msgs,
		map[string]any{"role": "assistant", "content": content},
		map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "tool_result", "tool_use_id": use["id"], "content": string(o)},
			map[string]any{"type": "text", "text": "CRITICAL: Respond with TEXT ONLY. Your task is to create a detailed summary of the conversation so far."},
		}})
	status, sum := post(t, p, "/v1/messages", a.request(), nil)
	if status != 200 || !strings.Contains(string(sum), "ctxd-fake-round-1-done") || strings.Contains(string(sum), "tool_use") {
		t.Fatalf("summary request: %d %s", status, sum)
	}
	var sm struct {
		Content []map[string]any `json:"content"`
	}
	_ = json.Unmarshal(sum, &sm)
	summary := sm.Content[len(sm.Content)-1]["text"].(string)

	// The compacted conversation: the summary as the first user message.
	a.msgs = []map[string]any{{"role": "user", "content": []any{map[string]any{"type": "text", "text": "This session continues; the summary below covers it.\n" + summary}}}}
	_, next := post(t, p, "/v1/messages", a.request(), nil)
	if !strings.Contains(string(next), "ctxd-fake-round-$((2))-done") {
		t.Fatalf("after the summary the fake did not go on with round 2: %s", next)
	}
	var steps []string
	for _, r := range p.Requests() {
		steps = append(steps, r.Step)
	}
	if want := []string{StepShell, StepShell, StepSide, StepSummary, StepShell}; !reflect.DeepEqual(steps, want) {
		t.Fatalf("steps %v, want %v", steps, want)
	}
	if got := len(p.Messages(true)); got != 4 {
		t.Errorf("Messages(true) = %d requests, want the 4 that declared the shell tool", got)
	}
}

// stripID removes the message id (random per answer) and the usage (the
// prompt cache) from a response body.
func stripID(b []byte) []byte {
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	delete(m, "id")
	delete(m, "usage")
	out, _ := json.Marshal(m)
	return out
}

// TestExtends checks the prompt-cache comparison: a moved cache_control
// marker is not a change; an edited message, a changed system prompt or a
// shorter history is, and the error names it.
func TestExtends(t *testing.T) {
	r1 := `{"system":[{"type":"text","text":"S","cache_control":{"type":"ephemeral"}}],"tools":[],"messages":[{"role":"user","content":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}}]}]}`
	r2 := `{"system":[{"type":"text","text":"S","cache_control":{"type":"ephemeral"}}],"tools":[],"messages":[{"role":"user","content":[{"type":"text","text":"a"}]},{"role":"assistant","content":[{"type":"text","text":"b"}]},{"role":"user","content":[{"type":"text","text":"c","cache_control":{"type":"ephemeral"}}]}]}`
	if err := Extends([]byte(r1), []byte(r2)); err != nil {
		t.Fatalf("a moved marker counted as a change: %v", err)
	}
	for _, tc := range []struct{ name, next, want string }{
		{"edited message", strings.Replace(r2, `"text":"a"`, `"text":"A"`, 1), "messages.0 differs"},
		{"changed system", strings.Replace(r2, `"text":"S"`, `"text":"T"`, 1), "system prompt changed"},
		{"changed tools", strings.Replace(r2, `"tools":[]`, `"tools":[{"name":"x"}]`, 1), "tools changed"},
		{"shorter", `{"system":[{"type":"text","text":"S"}],"tools":[],"messages":[]}`, "messages shrank from 1 to 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Extends([]byte(r1), []byte(tc.next))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	chain := []Request{{Seq: 1, Body: []byte(r1)}, {Seq: 2, Body: []byte(r2)}, {Seq: 3, Body: []byte(r1)}}
	if err := CheckChain(chain); err == nil || !strings.Contains(err.Error(), "request 3 does not extend request 2") {
		t.Fatalf("CheckChain: %v", err)
	}
}

// TestPromptCache checks the prompt-cache figures: with the marker moved to
// the newest message each request, a request reads from the cache all the
// previous one wrote (its whole size but the moved marker, about 10 tokens); an edited first
// message reads nothing; usage splits the count into read, written and
// uncached tokens.
func TestPromptCache(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	p := Start(t, Config{Rounds: 2, OutputBytes: 2000})
	a := &miniAgent{t: t, p: p, tools: `[` + bashTool + `]`, system: "Working directory: " + dir, dir: dir}
	a.turn("Do the task.")
	reqs := p.Requests()
	if reqs[0].CacheRead != 0 {
		t.Errorf("first request read %d tokens from an empty cache", reqs[0].CacheRead)
	}
	for i := 1; i < len(reqs); i++ {
		if reqs[i].CacheRead < reqs[i-1].Tokens-20 || reqs[i].CacheRead >= reqs[i].Tokens {
			t.Errorf("request %d: read %d of %d tokens from the cache; the previous request had %d", reqs[i].Seq, reqs[i].CacheRead, reqs[i].Tokens, reqs[i-1].Tokens)
		}
	}
	// Edit the first message: nothing of the prefix is cached any more.
	a.msgs[0] = map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "Do the task, edited."}}}
	_, b := post(t, p, "/v1/messages", a.request(), nil)
	var m struct {
		Usage usage `json:"usage"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	last := p.Requests()[len(p.Requests())-1]
	if m.Usage.CacheReadInputTokens != 0 || last.CacheRead != 0 {
		t.Errorf("an edited first message still read %d tokens from the cache", m.Usage.CacheReadInputTokens)
	}
	if got := m.Usage.InputTokens + m.Usage.CacheCreationInputTokens + m.Usage.CacheReadInputTokens; got != last.Tokens || m.Usage.CacheCreationInputTokens == 0 {
		t.Errorf("usage %+v does not split the request's %d tokens", m.Usage, last.Tokens)
	}
}

// TestFaults checks the injected errors: each queued fault answers one
// request with the provider's own error (before or in the middle of the
// stream), then the fake answers normally again.
func TestFaults(t *testing.T) {
	p := Start(t, Config{})
	anth := strings.Replace(body(false, `{"role":"user","content":"go"}`), `"max_tokens"`, `"stream":true,"max_tokens"`, 1)
	chat := `{"model":"m","stream":true,"tools":[` + chatBash + `],"messages":[{"role":"user","content":"go"}]}`
	resp := `{"model":"m","stream":true,"tools":[` + execTool + `],"input":"go"}`
	tests := []struct {
		name     string
		fault    Fault
		path, b  string
		status   int
		contains []string
	}{
		{"anthropic 529", Fault{Status: 529}, "/v1/messages", anth, 529, []string{`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_`}},
		{"anthropic 429", Fault{Status: 429}, "/v1/messages", anth, 429, []string{`"type":"rate_limit_error"`}},
		{"anthropic mid-stream", Fault{Status: 529, MidStream: true}, "/v1/messages", anth, 200,
			[]string{"event: message_start\n", "event: content_block_delta\n", "event: error\ndata: {\"error\":{\"message\":\"Overloaded\",\"type\":\"overloaded_error\"},\"type\":\"error\"}\n\n"}},
		{"chat 429", Fault{Status: 429}, "/v1/chat/completions", chat, 429, []string{`"code":"rate_limit_exceeded"`}},
		{"responses mid-stream", Fault{Status: 500, MidStream: true}, "/v1/responses", resp, 200, []string{"event: response.created\n", "event: response.failed\n", `"status":"failed"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p.FailNext(tc.fault)
			var status int
			var b []byte
			if tc.path == "/v1/messages" {
				status, b = post(t, p, tc.path, tc.b, nil)
			} else {
				status, b = postOpenAI(t, p, tc.path, tc.b)
			}
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, b)
			}
			for _, c := range tc.contains {
				if !strings.Contains(string(b), c) {
					t.Errorf("answer lacks %q:\n%s", c, b)
				}
			}
			if strings.Contains(string(b), "message_stop") || strings.Contains(string(b), "response.completed") {
				t.Errorf("a failed stream completed:\n%s", b)
			}
			if r := p.Requests()[len(p.Requests())-1]; r.Step != StepFault {
				t.Errorf("recorded step %q, want %q", r.Step, StepFault)
			}
			if tc.path == "/v1/messages" {
				status, b = post(t, p, tc.path, tc.b, nil)
			} else {
				status, b = postOpenAI(t, p, tc.path, tc.b)
			}
			if status != 200 || p.Requests()[len(p.Requests())-1].Step != StepShell {
				t.Fatalf("the request after the fault: %d %s", status, b)
			}
		})
	}
}

// TestSummaryRequests checks which final instructions the fake takes for a
// request to summarize: the compaction prompts of ctxd, Claude Code and pi;
// not the summary message of a conversation compacted by ctxd or Claude Code,
// nor a summarize instruction in an earlier block.
func TestSummaryRequests(t *testing.T) {
	tests := []struct {
		name   string
		blocks []string
		want   bool
	}{
		{"ctxd's summarizer prompt", []string{"…the conversation…", summarizer.BuiltinPrompt}, true},
		{"Claude Code's compaction", []string{"CRITICAL: Respond with TEXT ONLY. Do NOT call any tools.\n\nYour task is to create a detailed summary of the conversation so far"}, true},
		{"pi's compaction", []string{"<conversation>…</conversation>\n\nThe messages above are a conversation to summarize. Create a structured context checkpoint summary that another LLM will use to continue the work."}, true},
		{"ctxd's summary message", []string{fmt.Sprintf(engine.SummaryPreamble, 12) + "\n\n## Goal\nRun the task."}, false},
		{"Claude Code's continued session", []string{"This session is being continued from a previous conversation that ran out of context. The summary below covers the earlier portion of the conversation."}, false},
		{"an instruction before the prompt", []string{"Write a checkpoint summary of the conversation.", "Now run the task."}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var blocks []Block
			for _, b := range tc.blocks {
				blocks = append(blocks, Block{Type: "text", Text: b})
			}
			r := &MessagesRequest{Messages: []Message{{Role: "user", Content: Content{Blocks: blocks}}}}
			if got := isSummaryRequest(r); got != tc.want {
				t.Fatalf("isSummaryRequest = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestAnswerShapeLikeCassettes replays the requests of the recorded real API
// exchanges in the corpus (their summarized texts filled in) and checks the
// fake's non-streaming answer has every field the real answers all have, with
// values of the same JSON types, and the same usage fields; and that the
// fake's prompt cache hits where the real one did.
func TestAnswerShapeLikeCassettes(t *testing.T) {
	var cassettes struct {
		Interactions []struct {
			ID      string `json:"id"`
			Request struct {
				Body map[string]any `json:"body"`
			} `json:"request"`
			Response struct {
				Status int            `json:"status"`
				Body   map[string]any `json:"body"`
			} `json:"response"`
		} `json:"interactions"`
	}
	if err := json.Unmarshal(corpustest.Read(t, "providers/anthropic-messages-cassettes.json"), &cassettes); err != nil {
		t.Fatal(err)
	}
	kind := func(v any) string { return fmt.Sprintf("%T", v) }
	// The fields every real answer has, and their types.
	common := map[string]string{}
	usageFields := map[string]bool{}
	for i, c := range cassettes.Interactions {
		for k, v := range c.Response.Body {
			if i == 0 {
				common[k] = kind(v)
			}
		}
		for k := range common {
			if _, ok := c.Response.Body[k]; !ok {
				delete(common, k)
			}
		}
		for k := range c.Response.Body["usage"].(map[string]any) {
			if i == 0 {
				usageFields[k] = true
			}
		}
	}
	for _, k := range []string{"cache_creation", "service_tier", "inference_geo", "iterations", "server_tool_use"} {
		delete(usageFields, k) // account details the fake does not model
	}
	if len(common) < 8 || len(usageFields) != 4 {
		t.Fatalf("cassettes give %d common fields %v and usage %v", len(common), common, usageFields)
	}
	p := Start(t, Config{ServerCompaction: true})
	for _, c := range cassettes.Interactions {
		t.Run(c.ID, func(t *testing.T) {
			req := c.Request.Body
			// Fill in the texts the cassette summarized, one text for all (turn
			// 2 repeats turn 1's).
			b, _ := json.Marshal(req)
			b = regexp.MustCompile(`"text_note":"(?:[^"\\]|\\.)*"`).ReplaceAll(b, []byte(`"text":"Please explain what Python is and its main use cases."`))
			var hdr map[string]string
			if _, ok := req["context_management"]; ok {
				// The beta the recorded client sent with the edit (the
				// cassettes keep no headers).
				hdr = map[string]string{"anthropic-beta": CompactBeta}
			}
			status, out := post(t, p, "/v1/messages", string(b), hdr)
			if status != 200 {
				t.Fatalf("status %d: %s", status, out)
			}
			var got map[string]any
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatal(err)
			}
			for k, typ := range common {
				if kind(got[k]) != typ {
					t.Errorf("field %s: %s, the real answers have %s", k, kind(got[k]), typ)
				}
			}
			u, _ := got["usage"].(map[string]any)
			for k := range usageFields {
				if _, ok := u[k].(float64); !ok {
					t.Errorf("usage lacks %s: %v", k, u)
				}
			}
			// As in the recording, turn 2 reads from the cache what turn 1
			// wrote at its marker.
			realRead := c.Response.Body["usage"].(map[string]any)["cache_read_input_tokens"].(float64)
			if fakeRead, _ := u["cache_read_input_tokens"].(float64); (realRead > 0) != (fakeRead > 0) {
				t.Errorf("cache read: the fake %v, the real answer %v", fakeRead, realRead)
			}
		})
	}
}
