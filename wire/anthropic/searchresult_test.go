package anthropic

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/history"
)

// TestSearchResultIsReadAsText: a search_result block, in a tool_result's
// content or a user message, is read as a text block of its title, source
// and texts that keeps the client's bytes (its marker cut); the estimate
// counts that text and not the bytes; rendered with Carry it is the
// client's block byte for byte, without Carry (another reader of the
// history) the text; a rewrite of it is rendered from its fields; stored
// and read back it renders the same.
func TestSearchResultIsReadAsText(t *testing.T) {
	first := `{"type":"search_result","source":"https://example.com/a","title":"Guide","content":[{"type":"text","text":"first hit"},{"type":"text","text":"more of it"}],"citations":{"enabled":true}}`
	second := `{"type":"search_result","source":"kb://42","title":"FAQ","content":[{"type":"text","text":"second hit"}]}`
	top := `{"type":"search_result","source":"https://example.com/b","title":"Top","content":[{"type":"text","text":"given up front"}]}`
	marked := top[:len(top)-1] + `,"cache_control":{"type":"ephemeral"}}`
	raw := `{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[` + first + `,` + second + `]},` + marked + `]}`
	ms, err := ParseMessage(json.RawMessage(raw), map[string]string{"toolu_1": "search"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].Role != history.RoleTool || ms[1].Role != history.RoleUser || !ms[1].Joined {
		t.Fatalf("parsed %+v", ms)
	}
	want := []history.Block{
		{Type: history.BlockText, Text: "Guide\nhttps://example.com/a\n\nfirst hit\n\nmore of it", Raw: json.RawMessage(first)},
		{Type: history.BlockText, Text: "FAQ\nkb://42\n\nsecond hit", Raw: json.RawMessage(second)},
		{Type: history.BlockText, Text: "Top\nhttps://example.com/b\n\ngiven up front", Raw: json.RawMessage(top)},
	}
	got := append(append([]history.Block(nil), ms[0].Content...), ms[1].Content...)
	if len(got) != len(want) {
		t.Fatalf("blocks %+v", got)
	}
	for i := range want {
		if got[i].Type != want[i].Type || got[i].Text != want[i].Text || string(got[i].Raw) != string(want[i].Raw) {
			t.Errorf("block %d: got %s %q %s, want %s %q %s", i, got[i].Type, got[i].Text, got[i].Raw, want[i].Type, want[i].Text, want[i].Raw)
		}
	}

	// Counted as its text: what a text block of the same text counts.
	var e history.Estimator
	plain := ms[0]
	plain.Content = []history.Block{{Type: history.BlockText, Text: want[0].Text}, {Type: history.BlockText, Text: want[1].Text}}
	if a, b := e.Message(ms[0]), e.Message(plain); a != b {
		t.Errorf("the estimate counts %d tokens, a text result of the same text %d", a, b)
	}

	render := func(ms []history.Message, o Options) string {
		w := RenderWith("", nil, ms, o).Messages
		if len(w) != 1 {
			t.Fatalf("rendered %d messages, want one", len(w))
		}
		enc, err := EncodeMessage(&w[0])
		if err != nil {
			t.Fatal(err)
		}
		return string(enc)
	}
	sent := `{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[` + first + `,` + second + `]},` + top + `]}`
	if got := render(ms, Carry); got != sent {
		t.Errorf("rendered with Carry\n%s\nwant\n%s", got, sent)
	}
	if got := render(ms, Options{}); strings.Contains(got, "search_result") || !strings.Contains(got, `{"type":"text","text":"Guide\nhttps://example.com/a\n\nfirst hit\n\nmore of it"}`) {
		t.Errorf("rendered without Carry: %s", got)
	}

	// A rewrite of one result (an offload stub) is rendered from its
	// fields; the other is still the client's block.
	stub := append([]history.Message(nil), ms...)
	stub[0].Content = []history.Block{{Type: history.BlockText, Text: "[stub]"}, ms[0].Content[1]}
	if got := render(stub, Carry); got != strings.Replace(sent, first, `{"type":"text","text":"[stub]"}`, 1) {
		t.Errorf("after a rewrite of the first result\n%s", got)
	}
	edited := append([]history.Message(nil), ms...)
	edited[1].Content = []history.Block{{Type: history.BlockText, Text: "Top (elided)", Raw: ms[1].Content[0].Raw}}
	if got := render(edited, Carry); !strings.HasSuffix(got, `{"type":"text","text":"Top (elided)"}]}`) {
		t.Errorf("a changed text kept the client's bytes: %s", got)
	}

	// Stored and read back, valid and rendered the same.
	var st history.State
	for i := range ms {
		enc, err := history.Encode(ms[i])
		if err != nil {
			t.Fatal(err)
		}
		if ms[i], err = history.Decode(enc); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Check(ms[1]); err != nil {
		t.Errorf("the stored user message is refused: %v", err)
	}
	if got := render(ms, Carry); got != sent {
		t.Errorf("decoded, rendered\n%s", got)
	}
}

// TestSearchResultNotReadStaysWhole: a search_result with no text, a
// source that is not a string, or content that is not text is kept whole
// (a json block) and carried byte for byte, as any block the model lacks.
func TestSearchResultNotReadStaysWhole(t *testing.T) {
	for _, blk := range []string{
		`{"type":"search_result","source":"","title":" ","content":[{"type":"text","text":""}]}`,
		`{"type":"search_result","source":{"url":"https://example.com"},"title":"t","content":[{"type":"text","text":"hit"}]}`,
		`{"type":"search_result","source":"s","title":"t","content":[{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}]}`,
		`{"type":"search_result","source":"s","title":7,"content":[{"type":"text","text":"hit"}]}`,
	} {
		for _, raw := range []string{
			`{"role":"user","content":[` + blk + `]}`,
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[` + blk + `]}]}`,
		} {
			ms, err := ParseMessage(json.RawMessage(raw), nil)
			if err != nil || len(ms) != 1 || len(ms[0].Content) != 1 || ms[0].Content[0].Type != history.BlockJSON {
				t.Errorf("%s: %v %+v", raw, err, ms)
				continue
			}
			w := RenderWith("", nil, ms, Carry).Messages
			enc, _ := EncodeMessage(&w[0])
			if !strings.Contains(string(enc), blk) {
				t.Errorf("%s was not carried: %s", blk, enc)
			}
		}
	}
}
