package anthropic

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/corpustest"
)

// recordedCompaction is the answer of the corpus's server-side compaction
// cassette (compact_20260112): its compaction block's summary and its text.
func recordedCompaction(t *testing.T) (summary, text string) {
	t.Helper()
	var f struct {
		Interactions []struct {
			ID       string `json:"id"`
			Response struct {
				Body struct {
					Content []struct {
						Type    string `json:"type"`
						Content string `json:"content"`
						Text    string `json:"text"`
					} `json:"content"`
				} `json:"body"`
			} `json:"response"`
		} `json:"interactions"`
	}
	if err := json.Unmarshal(corpustest.Read(t, "providers/anthropic-messages-cassettes.json"), &f); err != nil {
		t.Fatal(err)
	}
	for _, in := range f.Interactions {
		if in.ID != "server_side_compaction_compact_20260112" {
			continue
		}
		c := in.Response.Body.Content
		if len(c) != 2 || c[0].Type != "compaction" || c[1].Type != "text" {
			t.Fatalf("cassette content: %+v", c)
		}
		return c[0].Content, c[1].Text
	}
	t.Fatal("no compaction cassette in the corpus")
	return "", ""
}

// The recorded compaction answer, streamed as the API streams it (the
// block starts with content null, its summary comes in compaction_delta
// events), rebuilds to the same canonical message as the recorded JSON
// body: the compaction block first, then the text.
func TestStreamReaderCompactionDelta(t *testing.T) {
	summary, text := recordedCompaction(t)
	ev := func(typ string, v any) string {
		b, _ := json.Marshal(v)
		return fmt.Sprintf("event: %s\ndata: %s\n\n", typ, b)
	}
	half := len(summary) / 2
	stream := ev("message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": "msg_01", "model": "claude-sonnet-4-6", "usage": map[string]any{"input_tokens": 180, "output_tokens": 1}}}) +
		ev("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "compaction", "content": nil}}) +
		ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "compaction_delta", "content": summary[:half]}}) +
		ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "compaction_delta", "content": summary[half:]}}) +
		ev("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0}) +
		ev("content_block_start", map[string]any{"type": "content_block_start", "index": 1, "content_block": map[string]any{"type": "text", "text": ""}}) +
		ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": 1, "delta": map[string]any{"type": "text_delta", "text": text}}) +
		ev("content_block_stop", map[string]any{"type": "content_block_stop", "index": 1}) +
		ev("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn"}, "usage": map[string]any{"output_tokens": 8}}) +
		ev("message_stop", map[string]any{"type": "message_stop"})
	r := NewStreamReader()
	for i := 0; i < len(stream); i += 13 {
		_, _ = r.Write([]byte(stream[i:min(i+13, len(stream))]))
	}
	resp, err := r.Response()
	if err != nil {
		t.Fatal(err)
	}
	m := resp.Message()
	if len(m.Content) != 2 || m.Content[0].Type != history.BlockCompaction || m.Content[0].Text != summary || m.Content[1].Text != text {
		t.Fatalf("streamed compaction answer: %+v", m.Content)
	}
	if !strings.HasPrefix(summary, "The user provided") {
		t.Fatalf("summary %q", summary)
	}
}
