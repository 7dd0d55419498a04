package anthropic

import (
	"encoding/json"
	"testing"

	"github.com/ctxd/ctxd/history"
)

// ClientViolations finds the rules a client's own request breaks: an
// empty new message, and thinking in the final assistant message of a
// request that did not enable it; a request that breaks none passes.
func TestClientViolations(t *testing.T) {
	raws := func(ss ...string) []json.RawMessage {
		out := make([]json.RawMessage, len(ss))
		for i, s := range ss {
			out[i] = json.RawMessage(s)
		}
		return out
	}
	parse := func(msgs []json.RawMessage, from int) []history.Message {
		ms, err := Dialect{}.Parse(msgs, from)
		if err != nil {
			t.Fatal(err)
		}
		return ms
	}
	ok := raws(`{"role":"user","content":"hi"}`, `{"role":"assistant","content":"hello"}`, `{"role":"user","content":"go on"}`)
	if vs := ClientViolations(ok, 0, nil, parse(ok, 0), 0); len(vs) != 0 {
		t.Fatalf("a plain request: %v", vs)
	}
	empty := raws(`{"role":"user","content":"hi"}`, `{"role":"assistant","content":"hello"}`, `{"role":"user","content":[]}`)
	vs := ClientViolations(empty, 0, nil, parse(empty, 2), 2)
	if len(vs) != 1 || vs[0].Rule != history.RuleEmptyMessage || vs[0].Index != 2 {
		t.Fatalf("an empty new user message: %v, want one %s at 2", vs, history.RuleEmptyMessage)
	}
	think := raws(`{"role":"user","content":"hi"}`, `{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"text","text":"x"}]}`)
	vs = ClientViolations(think, 0, nil, parse(think, 0), 0)
	if len(vs) == 0 || vs[0].Rule != history.RuleThinkingOff {
		t.Fatalf("a final assistant message with thinking, thinking not enabled: %v, want %s", vs, history.RuleThinkingOff)
	}
}
