package anthropic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/wire"
)

// The renderer's extend, extending the branch's cached rendering when the context
// only grew, gives Render's messages for every request: growing
// one message at a time (a tool result joining the results of the cached
// last message, a whitespace-only message omitted), after the caller put
// markers on the result, and after a message before the end is rendered
// anew (an elision); and it reuses the cached blocks when it can.
func TestRendererExtendsTheCachedRendering(t *testing.T) {
	r := &renderer{}
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
	var prev []Message
	reused := 0
	check := func(n int, when string) {
		t.Helper()
		got, err := r.extend(msgs[:n], false)
		if err != nil {
			t.Fatal(err)
		}
		want := Render("", nil, msgs[:n]).Messages
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s, %d messages: differs from Render", when, n)
		}
		if len(prev) > MarkerReach && len(got) > 0 && &got[0].Content[0] == &prev[0].Content[0] {
			reused++
		}
		prev = got
		// What PlaceMarkers does to the last messages must not reach the
		// cache.
		for i := max(0, len(got)-MarkerReach); i < len(got); i++ {
			for j := range got[i].Content {
				got[i].Content[j].CacheControl = json.RawMessage(`{"type":"ephemeral"}`)
			}
		}
	}
	for n := 1; n <= len(msgs); n++ {
		check(n, "growing")
	}
	if reused < len(msgs)-MarkerReach*2 {
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

// The renderer keeps its index of the client's messages across requests
// and indexes again only from the first message whose bytes differ from
// those it indexed other than by cache markers: the marker a client moves
// to its newest message (as Claude Code does on every request) costs
// nothing; a message the client touched, a shorter list are indexed
// again from there. After each request the index is the one a full
// indexing of the request gives.
func TestClientIndexReindexesOnlyFromTheFirstChangedMessage(t *testing.T) {
	r := &renderer{}
	var digests wire.Digests
	msgs := []string{`{"role":"user","content":[{"type":"text","text":"start"}]}`}
	step := func(when string, wantIndexed int) {
		t.Helper()
		// The moving marker on the newest message's last block.
		items := make([]json.RawMessage, len(msgs))
		for i, m := range msgs {
			items[i] = json.RawMessage(m)
		}
		last := msgs[len(msgs)-1]
		i := strings.LastIndex(last, "}]}")
		items[len(items)-1] = json.RawMessage(last[:i] + `,"cache_control":{"type":"ephemeral"}` + last[i:])
		wire.ChainsWith(&digests, items, Dialect{}.MatchKey)
		// Keyed from the append's reading, as a managed request is.
		read, ends, err := ParseEach(items, 0)
		if err != nil {
			t.Fatal(err)
		}
		req := &wire.RenderRequest{Items: items, Fast: digests.Fast, Reading: &wire.Reading{Msgs: read, Ends: ends}, Verify: true}
		got, err := r.index(req, read)
		if err != nil {
			t.Fatal(err)
		}
		if got.added != wantIndexed {
			t.Fatalf("%s: %d messages indexed, want %d", when, got.added, wantIndexed)
		}
		// A full indexing, knowing the same fast hashes: the kept index
		// must know the messages it indexed as they are now.
		full, err := (&renderer{}).index(&wire.RenderRequest{Items: items, Fast: digests.Fast}, nil)
		if err != nil {
			t.Fatal(err)
		}
		got.added, full.added = 0, 0
		if !reflect.DeepEqual(got, full) {
			t.Fatalf("%s: the kept index differs from a full indexing:\n%+v\n%+v", when, got.ClientIndex, full.ClientIndex)
		}
	}
	call := func(id string) string {
		return fmt.Sprintf(`{"role":"assistant","content":[{"type":"tool_use","id":%q,"name":"Bash","input":{"command":"ls"}}]}`, id)
	}
	step("first request", 1)
	for i := range 4 {
		id := fmt.Sprintf("toolu_%d", i)
		msgs = append(msgs, call(id), fmt.Sprintf(`{"role":"user","content":[{"type":"tool_result","tool_use_id":%q,"content":"output %d"}]}`, id, i))
		// The marker moved off the previous last message: only the new
		// ones are indexed.
		step(fmt.Sprintf("round %d", i), 2)
	}
	step("the same request again", 0)
	// The client touches its second message (a resent answer whose
	// input it re-encoded): everything from it on is indexed again.
	msgs[1] = `{"role":"assistant","content":[{"type":"tool_use","id":"toolu_0","name":"Bash","input":{ "command" : "ls" }}]}`
	step("touched", len(msgs)-1)
	msgs = msgs[:5]
	step("shorter", 0)
	msgs = append(msgs, `{"role":"user","content":[{"type":"text","text":"go on"}]}`)
	step("longer", 1)
}

// A new client message whose tool result ctxd holds with other text (an
// offload stub) is indexed without a key: its key is never an outgoing
// message's. A result ctxd holds as the client sent it keeps its key, and
// goes out as the client's bytes; the body is the same either way.
func TestRewrittenResultIsIndexedWithoutAKey(t *testing.T) {
	long := strings.Repeat("line of output\n", 200)
	items := []json.RawMessage{
		json.RawMessage(`{"role":"user","content":"run it"}`),
		json.RawMessage(`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"ls"}}]}`),
		json.RawMessage(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":` + strconv.Quote(long) + `}]}`),
	}
	read, ends, err := ParseEach(items, 0)
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"model":"m","messages":[` + string(bytes.Join(func() [][]byte {
		var bs [][]byte
		for _, it := range items {
			bs = append(bs, it)
		}
		return bs
	}(), []byte(","))) + `]}`)
	start := bytes.Index(body, []byte(`[`))
	renderOn := func(r *renderer, held []history.Message, reading bool) (string, *clientIndex) {
		t.Helper()
		var digests wire.Digests
		wire.ChainsWith(&digests, items, Dialect{}.MatchKey)
		req := &wire.RenderRequest{Body: body, MsgStart: start, MsgEnd: len(body) - 1, Items: items,
			Fast: digests.Fast, Marked: digests.Marked, Verify: true}
		if reading {
			req.Reading = &wire.Reading{Msgs: read, Ends: ends}
		}
		out, err := r.Render(held, req)
		if err != nil {
			t.Fatal(err)
		}
		return string(out.Bytes()), r.idx
	}
	render := func(held []history.Message, reading bool) (string, *clientIndex) {
		return renderOn(&renderer{}, held, reading)
	}
	stubbed := slices.Clone(read)
	stubbed[2].Content = []history.Block{{Type: history.BlockText, Text: "[stub: the result is in a file]"}}
	keyed := func(idx *clientIndex, k int) bool {
		d, _, ok := ClientKey(items[k])
		got, found := idx.Latest(d, len(items))
		return ok && found && got == k
	}
	got, idx := render(stubbed, true)
	if keyed(idx, 2) || !keyed(idx, 0) || !keyed(idx, 1) {
		t.Fatalf("keys of the client's messages: %v %v %v, want none for the stubbed result only", keyed(idx, 0), keyed(idx, 1), keyed(idx, 2))
	}
	if want, _ := render(stubbed, false); got != want {
		t.Fatalf("body with the result unkeyed:\n%s\nwith every key:\n%s", got, want)
	}
	got, idx = render(read, true)
	if !keyed(idx, 2) {
		t.Fatal("a result ctxd holds as the client sent it was indexed without a key")
	}
	if !strings.Contains(got, string(items[2])) {
		t.Fatalf("the client's result did not go as its bytes: %s", got)
	}
	// The same renderer, the same client messages read again by the
	// append: ctxd now holds the result whole (its record failed, and the
	// offload of the client's resend kept it whole). The message is keyed
	// again, and goes as the client's bytes.
	r := &renderer{}
	renderOn(r, stubbed, true)
	got, idx = renderOn(r, read, true)
	if !keyed(idx, 2) || !strings.Contains(got, string(items[2])) {
		t.Fatalf("the result held whole again was not keyed again (%v): %s", keyed(idx, 2), got)
	}
}
