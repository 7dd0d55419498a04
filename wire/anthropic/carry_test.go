package anthropic

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/history"
)

// TestCarryRendersBlocksAsSent: with Options.Carry a json block that is a
// content block is rendered as that block byte for byte (its cache marker
// left to the marker placement), anything else as text; without Carry
// every json block is text (json blocks from other providers).
func TestCarryRendersBlocksAsSent(t *testing.T) {
	cases := []struct{ in, carried string }{
		{`{"type":"tool_reference","tool_name":"Read"}`, `{"type":"tool_reference","tool_name":"Read"}`},
		{`{"cache_control":{"type":"ephemeral"},"type":"x_future","a":1}`, `{"type":"x_future","a":1}`},
		{`{"type":"x_future","cache_control":{"type":"ephemeral"},"a":[1,2]}`, `{"type":"x_future","a":[1,2]}`},
		{`{"type":"x_future","a":"\u003c","cache_control":{"type":"ephemeral","ttl":"1h"}}`, `{"type":"x_future","a":"\u003c"}`},
		{`{"responses_item":{"type":"x"}}`, ""},
		{`{"type":7}`, ""},
		{`[1,2]`, ""},
	}
	for _, c := range cases {
		msg := history.Message{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockJSON, JSON: json.RawMessage(c.in)}}}
		got, _ := json.Marshal(RenderWith("", nil, []history.Message{msg}, Options{Carry: true}).Messages[0].Content[0])
		want := c.carried
		if want == "" {
			w, _ := json.Marshal(Block{Type: "text", Text: c.in})
			want = string(w)
		}
		if string(got) != want {
			t.Errorf("carry %s: got %s, want %s", c.in, got, want)
		}
		plain, _ := json.Marshal(Render("", nil, []history.Message{msg}).Messages[0].Content[0])
		if w, _ := json.Marshal(Block{Type: "text", Text: c.in}); string(plain) != string(w) {
			t.Errorf("without carry %s became %s", c.in, plain)
		}
	}
	b := Block{Type: "x_future", Raw: json.RawMessage(`{"type":"x_future","a":1}`), CacheControl: Ephemeral}
	if got, _ := json.Marshal(b); string(got) != `{"type":"x_future","a":1,"cache_control":{"type":"ephemeral"}}` {
		t.Errorf("marker on a carried block: %s", got)
	}
}

// TestJoinedMessageCarriesItsBlocks: a user message of tool results and
// other blocks reads as tool messages and a Joined user message whose
// text with citations and image in another key order keep the client's
// bytes; rendered, it is one message with those blocks byte for byte.
// A rewrite of one block (its text or image changed) renders that block
// from its fields and leaves the others as they were.
func TestJoinedMessageCarriesItsBlocks(t *testing.T) {
	text := `{"type":"text","text":"see","citations":[{"type":"char_location","cited_text":"x","document_index":0,"start_char_index":0,"end_char_index":1}]}`
	img := `{"type":"image","source":{"data":"iVBORw0KGgo=","media_type":"image/png","type":"base64"}}`
	plain := `{"type":"text","text":"plain"}`
	raw := `{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"out"},` + text + `,` + img + `,` + plain + `]}`
	ms, err := ParseMessage(json.RawMessage(raw), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].Role != history.RoleTool || ms[1].Role != history.RoleUser || !ms[1].Joined {
		t.Fatalf("parsed %+v", ms)
	}
	if ms[1].Content[2].Raw != nil {
		t.Errorf("a text block ctxd renders as sent keeps bytes: %s", ms[1].Content[2].Raw)
	}
	render := func(ms []history.Message) []byte {
		w := RenderWith("", nil, ms, Carry).Messages
		if len(w) != 1 {
			t.Fatalf("rendered %d messages, want one", len(w))
		}
		e, _ := json.Marshal(&w[0])
		return e
	}
	want := `{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"out"}]},` + text + `,` + img + `,` + plain + `]}`
	if got := render(ms); string(got) != want {
		t.Errorf("rendered\n%s\nwant\n%s", got, want)
	}
	// A rewrite of the tool result (an offload stub) changes it alone.
	stub := append([]history.Message(nil), ms...)
	stub[0].Content = []history.Block{{Type: history.BlockText, Text: "stub"}}
	if got := render(stub); string(got) != strings.Replace(want, `"text":"out"`, `"text":"stub"`, 1) {
		t.Errorf("after the result's rewrite\n%s", got)
	}
	// A rewrite of the text block is rendered from its fields.
	edited := append([]history.Message(nil), ms...)
	edited[1].Content = append([]history.Block(nil), ms[1].Content...)
	edited[1].Content[0].Text = "elided"
	edited[1].Content[1] = history.Block{Type: history.BlockImage, MediaType: "image/png", Artifact: "artifact://a1"}
	got := string(render(edited))
	if !strings.Contains(got, `{"type":"text","text":"elided"}`) || strings.Contains(got, "citations") || strings.Contains(got, "iVBOR") {
		t.Errorf("a rewritten block kept the client's bytes:\n%s", got)
	}
	// Stored and read back, the message renders the same.
	for i := range ms {
		enc, err := history.Encode(ms[i])
		if err != nil {
			t.Fatal(err)
		}
		if ms[i], err = history.Decode(enc); err != nil {
			t.Fatal(err)
		}
		var st history.State
		if i == 1 {
			if err := st.Check(ms[i]); err != nil {
				t.Errorf("the stored message is refused: %v", err)
			}
		}
	}
	if got := render(ms); string(got) != want {
		t.Errorf("decoded, rendered\n%s", got)
	}
}
