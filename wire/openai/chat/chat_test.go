package chat

import (
	"bytes"
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/wire/openai"
)

// TestChatStream reassembles tool calls from their argument deltas and
// takes usage from the final chunk.
func TestChatStream(t *testing.T) {
	chunks := []string{
		`{"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Let me "}}]}`,
		`{"model":"m","choices":[{"index":0,"delta":{"content":"look."}}]}`,
		`{"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"bash","arguments":""}}]}}]}`,
		`{"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"command\":"}}]}}]}`,
		`{"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","function":{"name":"read","arguments":"{}"}}]}}]}`,
		`{"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"ls\"}"}}]}}]}`,
		`{"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
		`{"model":"m","choices":[],"usage":{"prompt_tokens":500,"completion_tokens":9,"prompt_tokens_details":{"cached_tokens":100}}}`,
	}
	var b strings.Builder
	for _, c := range chunks {
		b.WriteString("data: " + c + "\n\n")
	}
	b.WriteString("data: [DONE]\n\n")
	s := NewChatStreamReader(0)
	_, _ = s.Write([]byte(b.String()))
	a, err := s.Answer()
	if err != nil {
		t.Fatal(err)
	}
	m, err := a.Message()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Content) != 3 || m.Content[0].Text != "Let me look." || m.Content[1].ID != "call_a" || string(m.Content[1].Input) != `{"command":"ls"}` || m.Content[2].Name != "read" {
		t.Fatalf("%+v", m.Content)
	}
	if u := m.Usage; u == nil || u.InputTokens != 400 || u.CacheReadInputTokens != 100 || u.OutputTokens != 9 {
		t.Fatalf("usage %+v", m.Usage)
	}
}

// TestChatRoundTrip: Chat messages with tool calls, tool results and a
// system message in the middle parse and render back to the same bytes.
func TestChatRoundTrip(t *testing.T) {
	in := []json.RawMessage{
		json.RawMessage(`{"role":"user","content":"hi"}`),
		json.RawMessage(`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"bash","arguments":"{\"command\":\"ls\"}"}}]}`),
		json.RawMessage(`{"role":"tool","content":"a.txt","tool_call_id":"c1"}`),
		json.RawMessage(`{"role":"system","content":"be brief"}`),
		json.RawMessage(`{"role":"assistant","content":"done"}`),
	}
	msgs, err := ParseChat(in, 0)
	if err != nil {
		t.Fatal(err)
	}
	if msgs[2].ToolName != "bash" || msgs[2].Role != history.RoleTool {
		t.Errorf("tool message %+v", msgs[2])
	}
	out := RenderChatMessages(msgs)
	for i := range in {
		if !bytes.Equal(in[i], out[i]) {
			t.Errorf("message %d:\n in %s\nout %s", i, in[i], out[i])
		}
	}
	if _, err := ParseChat([]json.RawMessage{json.RawMessage(`{"role":"robot"}`)}, 0); err == nil || !strings.Contains(err.Error(), "messages[0].role") {
		t.Errorf("bad role: %v", err)
	}
}

// TestEncodeChatMessage: the hand encoder gives marshal's bytes.
func TestEncodeChatMessage(t *testing.T) {
	msgs := RenderChat("", nil, []history.Message{
		{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: "a <b> & \"c\"\n"}}},
		{Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockToolCall, ID: "c<1>", Name: "bash", Input: json.RawMessage(`{"command":"ls > x"}`)}}},
		{Role: history.RoleTool, ToolCallID: "c<1>", Content: []history.Block{{Type: history.BlockText, Text: "ok"}}},
	}).Messages
	for i, m := range msgs {
		want, _ := openai.Marshal(m)
		if got := encodeChatMessage(m); !bytes.Equal(got, want) {
			t.Errorf("message %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

// TestChatStreamLinear: a tool call's argument deltas are joined in linear
// time and memory (each delta appended to a string copied the whole
// arguments every time).
func TestChatStreamLinear(t *testing.T) {
	var sb strings.Builder
	sb.WriteString(`data: {"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"f","arguments":""}}]}}]}` + "\n\n")
	for i := 0; i < 20000; i++ {
		sb.WriteString(`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"0123456789"}}]}}]}` + "\n\n")
	}
	sb.WriteString(`data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}` + "\n\ndata: [DONE]\n\n")
	stream := []byte(sb.String())
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := NewChatStreamReader(0)
	for i := 0; i < len(stream); i += 4096 {
		s.Write(stream[i:min(i+4096, len(stream))])
	}
	a, err := s.Answer()
	runtime.ReadMemStats(&after)
	if err != nil || len(a.Chat.ToolCalls) != 1 || len(a.Chat.ToolCalls[0].Function.Arguments) != 200000 {
		t.Fatalf("err %v, answer %+v", err, a.Chat.ToolCalls)
	}
	if d := after.TotalAlloc - before.TotalAlloc; d > 64<<20 {
		t.Errorf("20,000 argument deltas allocated %d bytes (quadratic)", d)
	}
}

// TestStreamLineLimit: a line over the reader's limit makes the answer
// fail with sse.ErrLineTooLong, and a hostile tool call index allocates
// nothing.

// TestDecodeChatInArguments: a call's arguments are read raw, their text
// when a JSON string ("" absent or null), not ok for another value, which
// ParseChat refuses naming the field (an import keeps the value).
func TestDecodeChatInArguments(t *testing.T) {
	for raw, want := range map[string]struct {
		text string
		ok   bool
	}{
		`{"role":"assistant","tool_calls":[{"id":"c","function":{"name":"f","arguments":"{\"a\":1}"}}]}`: {`{"a":1}`, true},
		`{"role":"assistant","tool_calls":[{"id":"c","function":{"name":"f"}}]}`:                         {"", true},
		`{"role":"assistant","tool_calls":[{"id":"c","function":{"name":"f","arguments":null}}]}`:        {"", true},
		`{"role":"assistant","tool_calls":[{"id":"c","function":{"name":"f","arguments":{"a":1}}}]}`:     {"", false},
	} {
		m, err := DecodeChatIn(json.RawMessage(raw))
		if err != nil || len(m.ToolCalls) != 1 {
			t.Fatalf("%s: %v", raw, err)
		}
		if text, ok := m.ToolCalls[0].ArgumentsText(); text != want.text || ok != want.ok {
			t.Errorf("%s: ArgumentsText = %q, %v; want %q, %v", raw, text, ok, want.text, want.ok)
		}
		_, err = ParseChat([]json.RawMessage{json.RawMessage(raw)}, 0)
		if want.ok != (err == nil) || (err != nil && !strings.Contains(err.Error(), "messages[0].tool_calls[0].function.arguments")) {
			t.Errorf("%s: ParseChat err %v", raw, err)
		}
	}
}

func TestHostileToolCallIndex(t *testing.T) {
	c := NewChatStreamReader(0)
	c.Write([]byte(`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":2000000000,"function":{"arguments":"x"}}]}}]}` + "\n\n"))
	if len(c.calls) != 0 {
		t.Fatalf("%d calls allocated for one hostile index", len(c.calls))
	}
}
