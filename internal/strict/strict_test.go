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
