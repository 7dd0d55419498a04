package proxy

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/wire"
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

// indexClient keeps a branch's index of the client's messages across
// requests and indexes again only from the first message whose bytes
// differ from those it indexed other than by cache markers: the marker a
// client moves to its newest message (as Claude Code does on every
// request) costs nothing; a message the client touched, a shorter list
// are indexed again from there. After each request the index is the one a
// full indexing of the request gives.
func TestClientIndexReindexesOnlyFromTheFirstChangedMessage(t *testing.T) {
	p := &Proxy{}
	b := &branch{}
	var digests wire.Digests
	c := newConversation().user("start")
	step := func(when string, wantIndexed int) {
		t.Helper()
		req, err := parseRequest([]byte(c.body()))
		if err != nil {
			t.Fatal(err)
		}
		wire.ChainsWith(&digests, req.messages, req.d.MatchKey)
		req.fast = digests.Fast
		// Keyed from the append's reading, as a managed request is.
		if _, err := req.parse(req.prefix); err != nil {
			t.Fatal(err)
		}
		got, err := p.indexClient(b, req)
		if err != nil {
			t.Fatal(err)
		}
		if got.added != wantIndexed {
			t.Fatalf("%s: %d messages indexed, want %d", when, got.added, wantIndexed)
		}
		full, err := p.indexClient(&branch{}, &request{d: req.d, messages: req.messages, prefix: req.prefix})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.keys, full.keys) || !reflect.DeepEqual(got.plain, full.plain) ||
			!reflect.DeepEqual(got.verbatim, full.verbatim) || !reflect.DeepEqual(got.results, full.results) ||
			!reflect.DeepEqual(got.key, full.key) || !reflect.DeepEqual(got.has, full.has) || !reflect.DeepEqual(got.norm, full.norm) {
			t.Fatalf("%s: the kept index differs from a full indexing:\n%v\n%v", when, got.keys, full.keys)
		}
		if !reflect.DeepEqual(got.fast, req.fast) {
			t.Fatalf("%s: the index does not know the messages it indexed", when)
		}
	}
	step("first request", 1)
	for i := range 4 {
		id := fmt.Sprintf("toolu_%d", i)
		c.assistant(assistantCall(id, "Bash", `{"command":"ls"}`))
		c.results([2]string{id, fmt.Sprintf("output %d", i)})
		// The marker moved off the previous last message: only the new
		// ones are indexed.
		step(fmt.Sprintf("round %d", i), 2)
	}
	step("the same request again", 0)
	// The client touches its second message (a resent answer whose
	// input it re-encoded): everything from it on is indexed again.
	c.msgs[1] = `{"role":"assistant","content":[{"type":"tool_use","id":"toolu_0","name":"Bash","input":{ "command" : "ls" }}]}`
	step("touched", len(c.msgs)-1)
	c.msgs = c.msgs[:5]
	step("shorter", 0)
	c.msgs = append(c.msgs, `{"role":"user","content":[{"type":"text","text":"go on"}]}`)
	step("longer", 1)
}
