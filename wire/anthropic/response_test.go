package anthropic

import (
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/corpustest"
	"github.com/ctxd/ctxd/wire/sse"
)

// sseStream is a streamed answer as the Messages API sends it: thinking
// with a signature, text, and a tool_use whose input arrives in pieces.
const sseStream = "event: message_start\n" +
	`data: {"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-opus-4-8","content":[],"stop_reason":null,"usage":{"input_tokens":12,"cache_creation_input_tokens":100,"cache_read_input_tokens":2000,"output_tokens":1}}}` + "\n\n" +
	"event: ping\ndata: {\"type\":\"ping\"}\n\n" +
	"event: content_block_start\n" +
	`data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}` + "\n\n" +
	"event: content_block_delta\n" +
	`data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me "}}` + "\n\n" +
	"event: content_block_delta\n" +
	`data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"look."}}` + "\n\n" +
	"event: content_block_delta\n" +
	`data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBsig=="}}` + "\n\n" +
	"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
	"event: content_block_start\n" +
	`data: {"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}` + "\n\n" +
	"event: content_block_delta\n" +
	`data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Reading the file."}}` + "\n\n" +
	"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n" +
	"event: content_block_start\n" +
	`data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_01","name":"Read","input":{}}}` + "\n\n" +
	"event: content_block_delta\n" +
	`data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"file_"}}` + "\n\n" +
	"event: content_block_delta\n" +
	`data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"path\": \"/a.go\"}"}}` + "\n\n" +
	"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":2}\n\n" +
	"event: message_delta\n" +
	`data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":57}}` + "\n\n" +
	"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"

func TestStreamReaderRebuildsTheAnswer(t *testing.T) {
	// Fed in pieces of every size from 1 byte: the tee sees arbitrary
	// chunking, and lines may be cut anywhere (CRLF too).
	for _, crlf := range []bool{false, true} {
		stream := sseStream
		if crlf {
			stream = strings.ReplaceAll(stream, "\n", "\r\n")
		}
		for _, size := range []int{1, 7, 64, len(stream)} {
			r := NewStreamReader()
			for i := 0; i < len(stream); i += size {
				n, err := r.Write([]byte(stream[i:min(i+size, len(stream))]))
				if err != nil || n != min(size, len(stream)-i) {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			resp, err := r.Response()
			if err != nil {
				t.Fatalf("size %d crlf %v: %v", size, crlf, err)
			}
			m := resp.Message()
			want := []history.Block{
				{Type: history.BlockThinking, Text: "Let me look.", Signature: "EqQBsig=="},
				{Type: history.BlockText, Text: "Reading the file."},
				{Type: history.BlockToolCall, ID: "toolu_01", Name: "Read", Input: json.RawMessage(`{"file_path": "/a.go"}`)},
			}
			if len(m.Content) != len(want) {
				t.Fatalf("blocks = %+v", m.Content)
			}
			for i := range want {
				g, w := m.Content[i], want[i]
				if g.Type != w.Type || g.Text != w.Text || g.Signature != w.Signature || g.ID != w.ID || g.Name != w.Name || string(g.Input) != string(w.Input) {
					t.Errorf("block %d = %+v, want %+v", i, g, w)
				}
			}
			wantUsage := history.Usage{InputTokens: 12, CacheCreationInputTokens: 100, CacheReadInputTokens: 2000, OutputTokens: 57}
			if m.Usage == nil || *m.Usage != wantUsage || m.Model != "claude-opus-4-8" || resp.StopReason != "tool_use" || resp.ID != "msg_01" {
				t.Errorf("usage %+v model %q stop %q id %q", m.Usage, m.Model, resp.StopReason, resp.ID)
			}
		}
	}
}

func TestStreamReaderIncompleteAndErrors(t *testing.T) {
	cut := sseStream[:strings.Index(sseStream, "event: message_delta")]
	r := NewStreamReader()
	_, _ = r.Write([]byte(cut))
	resp, err := r.Response()
	if !errors.Is(err, ErrIncomplete) || len(resp.Content) != 3 {
		t.Errorf("cut stream: %v, %d blocks", err, len(resp.Content))
	}

	r = NewStreamReader()
	_, _ = r.Write([]byte(sseStream[:strings.Index(sseStream, "event: content_block_start")]))
	_, _ = r.Write([]byte("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"))
	resp, err = r.Response()
	if err != nil || resp.Error == nil || resp.Error.Type != "overloaded_error" {
		t.Errorf("mid-stream error: %v %+v", err, resp.Error)
	}

	r = NewStreamReader()
	_, _ = r.Write([]byte("data: {not json\n\n"))
	if _, err := r.Response(); err == nil || errors.Is(err, ErrIncomplete) {
		t.Errorf("malformed event: %v", err)
	}
}

// TestDecodeResponseCorpus reads the real Messages API answers recorded in
// the corpus.
func TestDecodeResponseCorpus(t *testing.T) {
	var f struct {
		Interactions []struct {
			ID       string `json:"id"`
			Response struct {
				Status int             `json:"status"`
				Body   json.RawMessage `json:"body"`
			} `json:"response"`
		} `json:"interactions"`
	}
	if err := json.Unmarshal(corpustest.Read(t, "providers/anthropic-messages-cassettes.json"), &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Interactions) == 0 {
		t.Fatal("no interactions")
	}
	for _, in := range f.Interactions {
		if in.Response.Status != 200 {
			continue
		}
		resp, err := DecodeResponse(in.Response.Body)
		if err != nil {
			t.Fatalf("%s: %v", in.ID, err)
		}
		m := resp.Message()
		if len(m.Content) == 0 || m.Usage == nil || m.Usage.ContextTokens() == 0 || resp.StopReason == "" {
			t.Errorf("%s: %+v usage %+v stop %q", in.ID, m.Content, m.Usage, resp.StopReason)
		}
	}
}

// TestIsContextLengthCorpus classifies every real error body of the corpus:
// exactly the Anthropic context-overflow ones are context-length errors.
func TestIsContextLengthCorpus(t *testing.T) {
	cases := corpustest.ContextLengthCases(t, func(p string) bool { return p == "anthropic" }, 5)
	corpustest.CheckContextLength(t, cases, IsContextLength)
}

func TestParseMessage(t *testing.T) {
	names := map[string]string{}
	a, err := ParseMessage(json.RawMessage(`{"role":"assistant","content":[{"type":"text","text":"x"},{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls"}}]}`), names)
	if err != nil || len(a) != 1 || a[0].Role != history.RoleAssistant || names["t1"] != "Bash" {
		t.Fatalf("assistant: %+v %v %v", a, err, names)
	}
	u, err := ParseMessage(json.RawMessage(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"out","is_error":true,"cache_control":{"type":"ephemeral"}},{"type":"text","text":"next"}]}`), names)
	if err != nil || len(u) != 2 || u[0].Role != history.RoleTool || u[0].ToolName != "Bash" || !u[0].IsError || u[0].Content[0].Text != "out" || u[1].Role != history.RoleUser {
		t.Fatalf("user: %+v %v", u, err)
	}
	if _, err := ParseMessage(json.RawMessage(`{"role":"robot","content":"x"}`), names); err == nil || !strings.Contains(err.Error(), "role") {
		t.Errorf("bad role: %v", err)
	}
	if _, err := ParseMessage(json.RawMessage(`{"role":"user","content":[1]}`), names); err == nil || !strings.Contains(err.Error(), "content") {
		t.Errorf("bad content: %v", err)
	}
}

func TestDropFinalThinking(t *testing.T) {
	r := Request{Messages: []Message{
		{Role: "user", Content: []Block{{Type: "text", Text: "q"}}},
		{Role: "assistant", Content: []Block{{Type: "thinking", Thinking: "a", Signature: "s"}, {Type: "tool_use", ID: "t1"}}},
		{Role: "user", Content: []Block{{Type: "tool_result", ToolUseID: "t1"}}},
		{Role: "assistant", Content: []Block{{Type: "thinking", Thinking: "b", Signature: "s"}, {Type: "text", Text: "done"}}},
		{Role: "user", Content: []Block{{Type: "text", Text: "summarize"}}},
	}}
	DropFinalThinking(&r)
	if got := r.Messages[3].Content; len(got) != 1 || got[0].Type != "text" {
		t.Errorf("final assistant = %+v", got)
	}
	if len(r.Messages[1].Content) != 2 {
		t.Errorf("an earlier assistant message lost its thinking")
	}
}

// TestStreamReaderLinear: reassembling a streamed answer costs memory
// linear in its length: 20,000 text deltas allocate a few times the text,
// where appending each delta to a string copied the whole text every time
// (about 2 GB here).
func TestStreamReaderLinear(t *testing.T) {
	var sb strings.Builder
	sb.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"x\",\"usage\":{\"input_tokens\":1}}}\n\n")
	sb.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
	for i := 0; i < 20000; i++ {
		sb.WriteString("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"0123456789\"}}\n\n")
	}
	sb.WriteString("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	stream := []byte(sb.String())
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r := NewStreamReader()
	for i := 0; i < len(stream); i += 4096 {
		r.Write(stream[i:min(i+4096, len(stream))])
	}
	resp, err := r.Response()
	runtime.ReadMemStats(&after)
	if err != nil || len(resp.Content) != 1 || len(resp.Content[0].Text) != 200000 {
		t.Fatalf("err %v, content %d", err, len(resp.Content))
	}
	if d := after.TotalAlloc - before.TotalAlloc; d > 64<<20 {
		t.Errorf("20,000 deltas of 10 bytes allocated %d bytes (quadratic)", d)
	}
}

// TestStreamReaderLineLimit: an SSE line over the reader's limit is not
// held, and the answer is reported malformed (sse.ErrLineTooLong), not
// recorded cut.
func TestStreamReaderLineLimit(t *testing.T) {
	r := NewStreamReaderMax(1 << 10)
	r.Write([]byte("data: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"x\"},\"pad\":\"" + strings.Repeat("x", 4<<10) + "\"}\n\n"))
	r.Write([]byte("data: {\"type\":\"message_stop\"}\n\n"))
	if _, err := r.Response(); !errors.Is(err, sse.ErrLineTooLong) {
		t.Fatalf("err %v, want ErrLineTooLong", err)
	}
}

// The edits the provider applied (the client's context_management,
// reported in the answer's context_management.applied_edits) give the
// input tokens they cleared, in all, on the usage: in a whole answer and
// in a stream's message_delta.
func TestAppliedEditsCleared(t *testing.T) {
	cm := `"context_management":{"applied_edits":[{"type":"clear_thinking_20251015","cleared_thinking_turns":2,"cleared_input_tokens":700},{"type":"clear_tool_uses_20250919","cleared_tool_uses":3,"cleared_input_tokens":5000}]}`
	body := `{"id":"msg_1","type":"message","role":"assistant","model":"claude-opus-4-8","content":[{"type":"text","text":"done"}],"stop_reason":"end_turn","usage":{"input_tokens":90,"output_tokens":2},` + cm + `}`
	resp, err := DecodeResponse([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if u := resp.Message().Usage; u == nil || u.ClearedInputTokens != 5700 || u.InputTokens != 90 {
		t.Errorf("whole answer: usage %+v; want 5700 cleared", u)
	}
	stream := `event: message_start
data: {"type":"message_start","message":{"id":"msg_2","type":"message","role":"assistant","model":"claude-opus-4-8","content":[],"usage":{"input_tokens":90,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"done"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2},` + cm + `}

event: message_stop
data: {"type":"message_stop"}

`
	r := NewStreamReader()
	if _, err := r.Write([]byte(stream)); err != nil {
		t.Fatal(err)
	}
	sr, err := r.Response()
	if err != nil {
		t.Fatal(err)
	}
	if u := sr.Message().Usage; u == nil || u.ClearedInputTokens != 5700 || u.OutputTokens != 2 {
		t.Errorf("stream: usage %+v; want 5700 cleared", u)
	}
	// No edits applied: nothing cleared.
	plain, _ := DecodeResponse([]byte(strings.Replace(body, ","+cm, "", 1)))
	if u := plain.Message().Usage; u == nil || u.ClearedInputTokens != 0 {
		t.Errorf("no edits: usage %+v", u)
	}
}
