package history

import (
	"encoding/json"
	"strings"
	"testing"
)

// benchMessages is a tool round of realistic size: an assistant message
// with text and a tool call, and a 16 KiB tool result.
func benchMessages() []Message {
	prose := proseMB()
	return []Message{
		{Role: RoleAssistant, Content: []Block{
			{Type: BlockText, Text: prose[:600]},
			{Type: BlockToolCall, ID: "toolu_01", Name: "Read", Input: json.RawMessage(`{"file_path":"/src/main.go","limit":400}`)},
		}},
		{Role: RoleTool, ToolCallID: "toolu_01", ToolName: "Read", Content: []Block{{Type: BlockText, Text: prose[:16<<10]}}},
	}
}

// messageTexts is every text Estimator.Message counts in ms, joined: what
// one raw tokenizer Count over the same content sees.
func messageTexts(ms []Message) string {
	var b strings.Builder
	for _, m := range ms {
		b.WriteString(m.ToolCallID)
		b.WriteString(m.ToolName)
		for _, blk := range m.Content {
			b.WriteString(blk.Text)
			b.WriteString(blk.ID)
			b.WriteString(blk.Name)
			b.Write(blk.Input)
			b.Write(blk.JSON)
		}
	}
	return b.String()
}

// BenchmarkEstimateVsRawCount compares the Estimator's Message cost (chunked
// counting per text plus overheads) with the tokenizer's raw Count on the
// same text in one call: the estimator's bookkeeping should cost little
// beside the tokenizer itself.
func BenchmarkEstimateVsRawCount(b *testing.B) {
	ms := benchMessages()
	s := messageTexts(ms)
	b.Run("Estimator.Message", func(b *testing.B) {
		var e Estimator
		b.SetBytes(int64(len(s)))
		for b.Loop() {
			for _, m := range ms {
				e.Message(m)
			}
		}
	})
	b.Run("RawCount", func(b *testing.B) {
		b.SetBytes(int64(len(s)))
		for b.Loop() {
			if _, err := codec().Count(s); err != nil {
				b.Fatal(err)
			}
		}
	})
}
