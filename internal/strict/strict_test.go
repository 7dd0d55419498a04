package strict

import (
	"strings"
	"testing"

	"github.com/ctxd/ctxd/history"
)

func TestAnthropic(t *testing.T) {
	ok := `{"messages":[{"role":"user","content":[{"type":"text","text":"go"}]},
		{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"tool_use","id":"c1","name":"r","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"c1","content":[{"type":"text","text":"x"}]}]}]}`
	if vs, err := Anthropic([]byte(ok), history.ThinkingOn, false); err != nil || len(vs) > 0 {
		t.Fatalf("a valid request refused: %v %v", vs, err)
	}
	lost := strings.Replace(ok, `{"type":"thinking","thinking":"t","signature":"s"},`, "", 1)
	vs, err := Anthropic([]byte(lost), history.ThinkingOn, false)
	if err != nil || len(vs) != 1 || vs[0].Rule != history.RuleLoopThinking {
		t.Fatalf("lost thinking: %v %v", vs, err)
	}
	if _, err := Anthropic([]byte(`[1]`), history.ThinkingOn, false); err == nil {
		t.Fatal("a non-request accepted")
	}
}

// TestAnthropicReadsWhatTheProviderAccepts: content as a string (a
// message's, a tool_result's) and blocks ctxd's typed blocks would not
// decode (a search_result's source is a string; a document) are read and
// checked, not refused as "not a Messages request"; a blank text block
// among them is still refused.
func TestAnthropicReadsWhatTheProviderAccepts(t *testing.T) {
	ok := `{"messages":[{"role":"user","content":"search the docs"},
		{"role":"assistant","content":[{"type":"tool_use","id":"c1","name":"search","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"c1","content":[{"type":"search_result","source":"https://example.com","title":"t","content":[{"type":"text","text":"hit"}]}]},
			{"type":"document","source":{"type":"text","media_type":"text/plain","data":"notes"}},
			{"type":"search_result","source":"kb://1","title":"u","content":[{"type":"text","text":"more"}]}]},
		{"role":"assistant","content":[{"type":"tool_use","id":"c2","name":"read","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"c2","content":"plain output"}]}]}`
	if vs, err := Anthropic([]byte(ok), history.ThinkingOff, false); err != nil || len(vs) > 0 {
		t.Fatalf("a valid request refused: %v %v", vs, err)
	}
	blank := strings.Replace(ok, `"content":"search the docs"`, `"content":[{"type":"text","text":" "}]`, 1)
	if vs, err := Anthropic([]byte(blank), history.ThinkingOff, false); err != nil || len(vs) != 1 || vs[0].Rule != history.RuleEmptyText {
		t.Fatalf("a blank text block: %v %v", vs, err)
	}
	orphan := strings.Replace(ok, `"tool_use_id":"c2"`, `"tool_use_id":"c9"`, 1)
	if vs, err := Anthropic([]byte(orphan), history.ThinkingOff, false); err != nil || len(vs) == 0 {
		t.Fatalf("a result answering no call, after a string content: %v %v", vs, err)
	}
}
