package proxy

import (
	"strings"
	"testing"

	"github.com/ctxd/ctxd/wire/anthropic"
)

func TestCheckRequest(t *testing.T) {
	u := func(bs ...anthropic.Block) anthropic.Message { return anthropic.Message{Role: "user", Content: bs} }
	a := func(bs ...anthropic.Block) anthropic.Message {
		return anthropic.Message{Role: "assistant", Content: bs}
	}
	text := func(s string) anthropic.Block { return anthropic.Block{Type: "text", Text: s} }
	think := anthropic.Block{Type: "thinking", Thinking: "t", Signature: "s"}
	call := func(id string) anthropic.Block { return anthropic.Block{Type: "tool_use", ID: id, Name: "Bash"} }
	res := func(id string) anthropic.Block { return anthropic.Block{Type: "tool_result", ToolUseID: id} }
	for _, c := range []struct {
		name     string
		msgs     []anthropic.Message
		thinking bool
		want     string // "" = valid
	}{
		{"plain", []anthropic.Message{u(text("q")), a(text("a")), u(text("q2"))}, false, ""},
		{"open loop with thinking", []anthropic.Message{u(text("q")), a(think, call("t1")), u(res("t1"))}, true, ""},
		{"open loop without thinking, thinking on", []anthropic.Message{u(text("q")), a(call("t1")), u(res("t1"))}, true, "starts with tool_use"},
		{"open loop without thinking, thinking off", []anthropic.Message{u(text("q")), a(call("t1")), u(res("t1"))}, false, ""},
		{"thinking not first", []anthropic.Message{u(text("q")), a(text("x"), think, call("t1")), u(res("t1"))}, true, "must start with it"},
		{"thinking last", []anthropic.Message{u(text("q")), a(think), u(text("q"))}, true, "cannot be thinking"},
		{"first is assistant", []anthropic.Message{a(text("a")), u(text("q"))}, false, "not user"},
		{"result without call", []anthropic.Message{u(text("q")), a(text("a")), u(res("t9"))}, false, "answers no tool_use"},
		{"call without result", []anthropic.Message{u(text("q")), a(call("t1")), u(text("q"))}, false, "no tool_result"},
		{"ends with a call", []anthropic.Message{u(text("q")), a(call("t1"))}, false, "without tool_result"},
		{"duplicate id", []anthropic.Message{u(text("q")), a(call("t1")), u(res("t1")), a(call("t1")), u(res("t1"))}, false, "used twice"},
		{"empty text", []anthropic.Message{u(text(""))}, false, "empty text"},
		{"no content", []anthropic.Message{u(text("q")), a()}, false, "no content"},
	} {
		err := checkRequest(c.msgs, c.thinking)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
