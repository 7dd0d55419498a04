package responses

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/corpustest"
	"github.com/ctxd/ctxd/wire/openai"
	"github.com/ctxd/ctxd/wire/openai/chat"
	"github.com/ctxd/ctxd/wire/sse"
)

// corpusItems returns the Responses items of a recorded Codex rollout (its
// response_item lines), as Codex wrote them.
func corpusItems(t *testing.T, name string) []json.RawMessage {
	t.Helper()
	var items []json.RawMessage
	sc := bufio.NewScanner(bytes.NewReader(corpustest.Read(t, "recorded/codex/"+name)))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var l struct {
			Type    string          `json:"type"`
			Payload json.RawMessage `json:"payload"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		if l.Type == "response_item" {
			items = append(items, l.Payload)
		}
	}
	return items
}

// TestItemsRoundTripCorpus: the items of both recorded Codex rollouts
// (function tools, and code mode with custom tool calls and
// additional_tools) convert to canonical messages and back without loss:
// the rendered items parse to the same messages, reasoning and unknown
// items come back byte for byte (encrypted_content verbatim), and function
// arguments and custom inputs are the same strings.
func TestItemsRoundTripCorpus(t *testing.T) {
	for _, name := range []string{"cli0.171-function-tools.rollout.jsonl", "cli0.171-code-mode-2compactions.rollout.jsonl"} {
		t.Run(name, func(t *testing.T) {
			items := corpusItems(t, name)
			var conv []json.RawMessage
			prefix := 0
			for _, it := range items {
				if IsPrefixItem(it) {
					prefix++
					continue
				}
				conv = append(conv, it)
			}
			if prefix == 0 || len(conv) < 10 {
				t.Fatalf("%d prefix items, %d conversation items", prefix, len(conv))
			}
			msgs, err := ParseItems(conv, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := history.ValidateBatch(nil, msgs); err != nil {
				t.Fatalf("parsed messages the engine refuses: %v", err)
			}
			var prefixItems []json.RawMessage
			for _, it := range items {
				if IsPrefixItem(it) {
					prefixItems = append(prefixItems, it)
				}
			}
			custom := CustomToolNames(prefixItems...)
			if strings.Contains(name, "code-mode") && !custom["exec"] {
				t.Fatalf("custom tools %v: exec not found in additional_tools", custom)
			}
			out := RenderItems(msgs, custom)
			again, err := ParseItems(out, 0)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(msgs, again) {
				t.Fatalf("round trip changed the messages")
			}
			var reasoning, calls int
			for _, raw := range conv {
				var it Item
				_ = json.Unmarshal(raw, &it)
				switch it.Type {
				case "reasoning":
					reasoning++
					if !containsRaw(out, raw) {
						t.Errorf("reasoning item not rendered verbatim: %.120s", raw)
					}
				case "function_call", "custom_tool_call":
					calls++
					if !hasCall(t, out, it) {
						t.Errorf("%s %s not rendered with the same input", it.Type, it.CallID)
					}
				}
			}
			if reasoning == 0 || calls == 0 {
				t.Fatalf("%d reasoning items, %d calls", reasoning, calls)
			}
		})
	}
}

func containsRaw(items []json.RawMessage, raw json.RawMessage) bool {
	for _, it := range items {
		if bytes.Equal(it, raw) {
			return true
		}
	}
	return false
}

func hasCall(t *testing.T, items []json.RawMessage, want Item) bool {
	for _, raw := range items {
		var it Item
		_ = json.Unmarshal(raw, &it)
		if it.Type != want.Type || it.CallID != want.CallID || it.Name != want.Name {
			continue
		}
		return reflect.DeepEqual(it.Arguments, want.Arguments) && reflect.DeepEqual(it.Input, want.Input)
	}
	return false
}

func TestParseItemsErrors(t *testing.T) {
	_, err := ParseItems([]json.RawMessage{json.RawMessage(`{"type":"function_call","name":"x","arguments":"{}"}`)}, 0)
	if err == nil || !strings.Contains(err.Error(), "input[0].call_id") {
		t.Errorf("missing call_id: %v", err)
	}
	_, err = ParseItems([]json.RawMessage{json.RawMessage(`{"type":"message","role":"user","content":"x","extra":[}`)}, 0)
	if err == nil || !strings.Contains(err.Error(), "input[0]") {
		t.Errorf("bad item: %v", err)
	}
	_, err = ParseItems([]json.RawMessage{json.RawMessage(`{"type":"message","role":"user","content":[1]}`)}, 0)
	if err == nil || !strings.Contains(err.Error(), "input[0].content") {
		t.Errorf("bad part: %v", err)
	}
}

// TestUnknownKeptWhole: a content part and an item ctxd does not know go
// back byte for byte, each in its place.
func TestUnknownKeptWhole(t *testing.T) {
	part := `{"type":"input_audio","input_audio":{"data":"UklGR","format":"wav"}}`
	item := `{"type":"web_search_call","id":"ws_1","status":"completed","action":{"type":"search","query":"ctxd"}}`
	in := []json.RawMessage{
		json.RawMessage(`{"type":"message","role":"user","content":[{"type":"input_text","text":"listen"},` + part + `]}`),
		json.RawMessage(item),
	}
	msgs, err := ParseItems(in, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := RenderItems(msgs, nil)
	if len(out) != 2 || !strings.Contains(string(out[0]), part) || string(out[1]) != item {
		t.Fatalf("rendered %s", out)
	}
}

// TestResponsesStream rebuilds an answer from a Responses stream split at
// every byte boundary: output items in order, usage with the cached tokens
// as cache reads.
func TestResponsesStream(t *testing.T) {
	stream := "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"model\":\"gpt-5.2-codex\"}}\n\n" +
		"event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\",\"output_index\":0,\"item\":{\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[],\"encrypted_content\":\"gAAA\"}}\n\n" +
		"event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\",\"output_index\":1,\"item\":{\"type\":\"function_call\",\"call_id\":\"call_1\",\"name\":\"exec_command\",\"arguments\":\"{\\\"cmd\\\":\\\"ls\\\"}\"}}\n\n" +
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"model\":\"gpt-5.2-codex\",\"output\":[],\"usage\":{\"input_tokens\":1000,\"input_tokens_details\":{\"cached_tokens\":800},\"output_tokens\":20}}}\n\n"
	for _, step := range []int{1, 7, len(stream)} {
		s := NewResponsesStreamReader(0)
		for i := 0; i < len(stream); i += step {
			_, _ = s.Write([]byte(stream[i:min(i+step, len(stream))]))
		}
		a, err := s.Answer()
		if err != nil {
			t.Fatal(err)
		}
		m, err := a.Message()
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Content) != 2 || m.Content[0].Type != history.BlockRedactedThinking || m.Content[1].Type != history.BlockToolCall || string(m.Content[1].Input) != `{"cmd":"ls"}` {
			t.Fatalf("step %d: %+v", step, m.Content)
		}
		if u := m.Usage; u == nil || u.InputTokens != 200 || u.CacheReadInputTokens != 800 || u.OutputTokens != 20 {
			t.Fatalf("usage %+v", m.Usage)
		}
	}
	s := NewResponsesStreamReader(0)
	_, _ = s.Write([]byte(stream[:200]))
	if _, err := s.Answer(); err != openai.ErrIncomplete {
		t.Errorf("cut stream: %v", err)
	}
}

// A Responses compaction item (server-side compaction, opaque) joins the
// assistant message it arrived in as a compaction block holding the item's
// bytes, counts in the estimate about as encrypted reasoning does, and
// renders back byte for byte.
func TestCompactionItemRoundTrip(t *testing.T) {
	item := `{"id":"cmp_01","type":"compaction","encrypted_content":"gAAAAABpZ-OPAQUE-SUMMARY-0123456789"}`
	in := []json.RawMessage{
		json.RawMessage(`{"type":"message","role":"user","content":[{"type":"input_text","text":"go"}]}`),
		json.RawMessage(item),
		json.RawMessage(`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"done"}]}`),
	}
	msgs, err := ParseItems(in, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 || msgs[1].Content[0].Type != history.BlockCompaction || msgs[1].Content[0].Data != item {
		t.Fatalf("parsed %+v", msgs)
	}
	if err := history.ValidateBatch(history.NewState(nil), msgs); err != nil {
		t.Fatalf("the canonical messages do not validate: %v", err)
	}
	if n := (history.Estimator{}).Message(msgs[1]); n < uint64(len(item))*3/16 {
		t.Errorf("estimate %d tokens", n)
	}
	out := RenderItems(msgs, nil)
	if len(out) != 3 || string(out[1]) != item {
		t.Fatalf("rendered %s", out)
	}
}

// The recorded items of both Codex rollouts convert with RecordedItem (the
// rollout importer's conversion): every call is an
// assistant-side tool call and every output answers a call recorded before
// it; reasoning keeps its encrypted content; a custom tool's input is a
// JSON string; developer messages are instructions.
func TestRecordedItemsCorpus(t *testing.T) {
	for _, name := range []string{"cli0.171-function-tools.rollout.jsonl", "cli0.171-code-mode-2compactions.rollout.jsonl"} {
		t.Run(name, func(t *testing.T) {
			calls := map[string]bool{}
			counts := map[ItemSide]int{}
			for i, raw := range corpusItems(t, name) {
				r, err := RecordedItem(raw)
				if err != nil {
					t.Fatalf("item %d: %v", i, err)
				}
				counts[r.Side]++
				var it Item
				_ = json.Unmarshal(raw, &it)
				switch it.Type {
				case "function_call", "custom_tool_call":
					if r.Side != SideAssistant || len(r.Blocks) != 1 || r.Blocks[0].Type != history.BlockToolCall || r.Blocks[0].ID != it.CallID {
						t.Fatalf("item %d (%s): %+v", i, it.Type, r)
					}
					if it.Type == "custom_tool_call" {
						var s string
						if json.Unmarshal(r.Blocks[0].Input, &s) != nil || s != *it.Input {
							t.Fatalf("item %d: custom input %s", i, r.Blocks[0].Input)
						}
					}
					calls[it.CallID] = true
				case "function_call_output", "custom_tool_call_output":
					if r.Side != SideTool || !calls[r.CallID] || len(r.Blocks) == 0 {
						t.Fatalf("item %d: output %+v for an unknown call", i, r)
					}
				case "reasoning":
					if it.EncryptedContent != nil && *it.EncryptedContent != "" {
						b := r.Blocks[0]
						if b.Signature != *it.EncryptedContent && b.Data != *it.EncryptedContent {
							t.Fatalf("item %d: encrypted content not kept", i)
						}
					}
				case "message":
					if it.Role == "developer" && r.Side != SideInstructions {
						t.Fatalf("item %d: developer message as %v", i, r.Side)
					}
				}
			}
			if len(calls) == 0 || counts[SideTool] != len(calls) || counts[SideUser] == 0 || counts[SideInstructions] == 0 {
				t.Fatalf("%d calls, sides %v", len(calls), counts)
			}
		})
	}
	if _, err := RecordedItem(json.RawMessage(`{"type":"function_call","name":"x"}`)); err == nil {
		t.Error("a call without call_id converted")
	}
	r, _ := RecordedItem(json.RawMessage(`{"role":"user","content":"hi"}`))
	if r.Side != SideUser || r.Blocks[0].Text != "hi" {
		t.Errorf("an EasyInputMessage: %+v", r)
	}
}

// A function call's arguments go back as they came, whatever they are:
// text that is not JSON, a truncated object, a JSON value that is not an
// object, an object with the model's own spacing — through a canonical
// message that validates, survives the stored form (history.Encode and
// Decode) and renders to the same arguments string, in both APIs (issue
// 15: they were rewritten as {"input": …} or compacted).
func TestFunctionArgumentsKeptAsSent(t *testing.T) {
	for _, args := range []string{`{"cmd":"ls"}`, `not json {`, `{"cmd":"ls"`, `[1,2]`, `"ls"`, `42`, ``, `{"cmd": "ls -la",  "n": 1}`, ` {"cmd":"ls"}`, `{"a":"<b> && c"}`} {
		a, _ := json.Marshal(args)
		item := json.RawMessage(`{"type":"function_call","call_id":"call_1","name":"exec","arguments":` + string(a) + `}`)
		msgs, err := ParseItems([]json.RawMessage{item}, 0)
		if err != nil {
			t.Fatal(err)
		}
		var s history.State
		if err := s.Check(msgs[0]); err != nil {
			t.Fatalf("arguments %q: the canonical message does not validate: %v", args, err)
		}
		enc, err := history.Encode(msgs[0])
		if err != nil {
			t.Fatal(err)
		}
		stored, err := history.Decode(enc)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Arguments string `json:"arguments"`
		}
		if err := json.Unmarshal(RenderItems([]history.Message{stored}, nil)[0], &got); err != nil || got.Arguments != args {
			t.Errorf("Responses: arguments %q came back as %q (%v)", args, got.Arguments, err)
		}
		cmsg := json.RawMessage(`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"exec","arguments":` + string(a) + `}}]}`)
		cm, err := chat.ParseChat([]json.RawMessage{cmsg}, 0)
		if err != nil {
			t.Fatal(err)
		}
		var back chat.ChatMessage
		if err := json.Unmarshal(chat.RenderChatMessages(cm)[0], &back); err != nil || len(back.ToolCalls) != 1 || back.ToolCalls[0].Function.Arguments != args {
			t.Errorf("Chat: arguments %q came back as %+v (%v)", args, back.ToolCalls, err)
		}
	}
	// A compact object is the input itself (tools and summaries read it).
	msgs, _ := ParseItems([]json.RawMessage{json.RawMessage(`{"type":"function_call","call_id":"c","name":"x","arguments":"{\"cmd\":\"ls\"}"}`)}, 0)
	if in := string(msgs[0].Content[0].Input); in != `{"cmd":"ls"}` {
		t.Errorf("compact object input %s", in)
	}
}

func TestStreamLineLimit(t *testing.T) {
	s := NewResponsesStreamReader(1 << 10)
	s.Write([]byte(`data: {"type":"response.output_item.done","item":{"pad":"` + strings.Repeat("x", 4<<10) + `"}}` + "\n\n"))
	s.Write([]byte(`data: {"type":"response.completed","response":{}}` + "\n\n"))
	if _, err := s.Answer(); !errors.Is(err, sse.ErrLineTooLong) {
		t.Fatalf("err %v", err)
	}
}

// TestCompactionTriggerNotStored: a compaction_trigger item is a request
// to the provider, not a part of the conversation: ParseItems reads
// nothing of it, and TrailingTrigger finds it only last.
func TestCompactionTriggerNotStored(t *testing.T) {
	user := json.RawMessage(`{"type":"message","role":"user","content":[{"type":"input_text","text":"fix it"}]}`)
	trigger := json.RawMessage(`{"type":"compaction_trigger"}`)
	msgs, err := ParseItems([]json.RawMessage{user, trigger}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 || msgs[0].Role != history.RoleUser {
		t.Fatalf("parsed %+v, want the user message only", msgs)
	}
	if got := TrailingTrigger([]json.RawMessage{user, trigger}); string(got) != string(trigger) {
		t.Errorf("TrailingTrigger = %s", got)
	}
	if got := TrailingTrigger([]json.RawMessage{trigger, user}); got != nil {
		t.Errorf("TrailingTrigger of a trigger not last = %s", got)
	}
	if got := TrailingTrigger([]json.RawMessage{json.RawMessage(`{"type":"message","role":"user","content":"compaction_trigger"}`)}); got != nil {
		t.Errorf("TrailingTrigger of a message naming it = %s", got)
	}
}

// ClientCompacting: Codex's turn metadata with request_kind "compaction",
// or a trailing compaction_trigger item; not a turn, nor a trigger before
// the last item, nor metadata that is not JSON.
func TestClientCompacting(t *testing.T) {
	user := json.RawMessage(`{"type":"message","role":"user","content":[{"type":"input_text","text":"compaction"}]}`)
	trigger := json.RawMessage(`{"type":"compaction_trigger"}`)
	for _, tc := range []struct {
		md    string
		items []json.RawMessage
		want  bool
	}{
		{`{"turn_id":"t1","request_kind":"compaction","sandbox":"none"}`, []json.RawMessage{user}, true},
		{"", []json.RawMessage{user, trigger}, true},
		{`{"turn_id":"t1","request_kind":"turn"}`, []json.RawMessage{user}, false},
		{`{"turn_id":"compaction"}`, []json.RawMessage{user}, false},
		{`request_kind=compaction`, []json.RawMessage{user}, false},
		{"", []json.RawMessage{trigger, user}, false},
		{"", nil, false},
	} {
		if got := ClientCompacting(tc.md, tc.items); got != tc.want {
			t.Errorf("ClientCompacting(%q, %d items) = %v, want %v", tc.md, len(tc.items), got, tc.want)
		}
	}
}

// An assistant message's phase is kept on its text blocks and rendered
// back on its item: two messages of a turn with different phases render
// as two items, each with its phase; a message without one renders
// without.
func TestAssistantPhaseRoundTrip(t *testing.T) {
	items := []json.RawMessage{
		json.RawMessage(`{"type":"message","role":"assistant","phase":"commentary","content":[{"type":"output_text","text":"Reading the log."}]}`),
		json.RawMessage(`{"type":"function_call","call_id":"call_1","name":"exec_command","arguments":"{\"cmd\":\"cat log\"}"}`),
		json.RawMessage(`{"type":"function_call_output","call_id":"call_1","output":"ok"}`),
		json.RawMessage(`{"type":"message","role":"assistant","phase":"commentary","content":[{"type":"output_text","text":"Fixing."}]}`),
		json.RawMessage(`{"type":"message","role":"assistant","phase":"final_answer","content":[{"type":"output_text","text":"Done."}]}`),
		json.RawMessage(`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"No phase."}]}`),
	}
	ms, err := ParseItems(items, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 3 || ms[0].Content[0].Phase != "commentary" || ms[2].Content[1].Phase != "final_answer" || ms[2].Content[2].Phase != "" {
		t.Fatalf("phases not kept: %+v", ms)
	}
	enc, err := history.Encode(ms[2])
	if err != nil {
		t.Fatal(err)
	}
	back, err := history.Decode(enc)
	if err != nil || !reflect.DeepEqual(back.Content, ms[2].Content) {
		t.Fatalf("the stored message loses the phase: %s %v", enc, err)
	}
	got := RenderItems(ms, nil)
	want := []string{
		`{"type":"message","role":"assistant","content":[{"text":"Reading the log.","type":"output_text"}],"phase":"commentary"}`,
		`{"type":"function_call","call_id":"call_1","name":"exec_command","arguments":"{\"cmd\":\"cat log\"}"}`,
		`{"type":"function_call_output","call_id":"call_1","output":"ok"}`,
		`{"type":"message","role":"assistant","content":[{"text":"Fixing.","type":"output_text"}],"phase":"commentary"}`,
		`{"type":"message","role":"assistant","content":[{"text":"Done.","type":"output_text"}],"phase":"final_answer"}`,
		`{"type":"message","role":"assistant","content":[{"text":"No phase.","type":"output_text"}]}`,
	}
	if len(got) != len(want) {
		t.Fatalf("%d items rendered, want %d: %s", len(got), len(want), got)
	}
	for i := range want {
		if string(got[i]) != want[i] {
			t.Errorf("item %d: %s, want %s", i, got[i], want[i])
		}
	}
}
