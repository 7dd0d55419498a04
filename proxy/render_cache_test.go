package proxy

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/wire/anthropic"
)

// renderWire, extending the branch's cached rendering when the context
// only grew, gives anthropic.Render's messages for every request: growing
// one message at a time (a tool result joining the results of the cached
// last message, a whitespace-only message omitted), after the caller put
// markers on the result, and after a message before the end is rendered
// anew (an elision); and it reuses the cached blocks when it can.
func TestRenderWireExtendsTheCachedRendering(t *testing.T) {
	p := &Proxy{}
	b := &branch{}
	txt := func(r history.Role, s string) history.Message {
		return history.Message{Role: r, Content: []history.Block{{Type: history.BlockText, Text: s}}}
	}
	msgs := []history.Message{txt(history.RoleUser, "go")}
	for i := 0; i < 12; i++ {
		a, c := fmt.Sprintf("a%d", i), fmt.Sprintf("c%d", i)
		msgs = append(msgs,
			history.Message{Role: history.RoleAssistant, Content: []history.Block{
				{Type: history.BlockToolCall, ID: a, Name: "read", Input: json.RawMessage(`{}`)},
				{Type: history.BlockToolCall, ID: c, Name: "read", Input: json.RawMessage(`{}`)}}},
			history.Message{Role: history.RoleTool, ToolCallID: a, Content: []history.Block{{Type: history.BlockText, Text: "one " + a}}},
			history.Message{Role: history.RoleTool, ToolCallID: c, IsError: i%3 == 0, Content: []history.Block{{Type: history.BlockText, Text: "two " + c}}})
		if i == 5 {
			msgs = append(msgs, txt(history.RoleAssistant, "  "), txt(history.RoleUser, "more"))
		}
	}
	var prev []anthropic.Message
	reused := 0
	check := func(n int, when string) {
		t.Helper()
		got, err := p.renderWire(b, msgs[:n])
		if err != nil {
			t.Fatal(err)
		}
		want := anthropic.Render("", nil, msgs[:n]).Messages
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s, %d messages: differs from Render", when, n)
		}
		if len(prev) > anthropic.MarkerReach && len(got) > 0 && &got[0].Content[0] == &prev[0].Content[0] {
			reused++
		}
		prev = got
		// What anthropic.PlaceMarkers does to the last messages must not reach the
		// cache.
		for i := max(0, len(got)-anthropic.MarkerReach); i < len(got); i++ {
			for j := range got[i].Content {
				got[i].Content[j].CacheControl = json.RawMessage(`{"type":"ephemeral"}`)
			}
		}
	}
	for n := 1; n <= len(msgs); n++ {
		check(n, "growing")
	}
	if reused < len(msgs)-anthropic.MarkerReach*2 {
		t.Fatalf("the cached rendering was reused %d times in %d requests", reused, len(msgs))
	}
	// An elision renders message 2 anew: a new slice of blocks.
	msgs[2].Content = []history.Block{{Type: history.BlockText, Text: "[elided]"}}
	check(len(msgs), "after an elision")
	check(len(msgs), "the same again")
	// A resend without the last message, then the whole list.
	check(len(msgs)-1, "shorter")
	check(len(msgs), "whole")
}
