package contextedit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
)

// hb builds a history: Seq = index + 1, tool results answering their calls.
type hb struct {
	msgs  []history.Message
	calls int
}

type res struct {
	tool  string
	chars int
}

func (h *hb) add(m history.Message) {
	m.Seq = uint64(len(h.msgs) + 1)
	m.Time = time.Date(2025, 1, 1, 0, 0, len(h.msgs), 0, time.UTC)
	m.Tokens = 99
	h.msgs = append(h.msgs, m)
}

func (h *hb) user(text string) *hb {
	h.add(history.Message{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: text}}})
	return h
}

// turn appends one assistant message calling one tool per res (with a signed
// thinking block first when thinking), then the results: res.chars
// characters each, mixing 1-, 2-, 3- and 4-byte characters.
func (h *hb) turn(thinking bool, results ...res) *hb {
	var a history.Message
	a.Role = history.RoleAssistant
	if thinking {
		a.Content = append(a.Content, history.Block{Type: history.BlockThinking, Text: fmt.Sprintf("thinking %d", len(h.msgs)), Signature: "sig"})
	}
	a.Content = append(a.Content, history.Block{Type: history.BlockText, Text: "let me look"})
	ids := make([]string, len(results))
	for i, r := range results {
		h.calls++
		ids[i] = fmt.Sprintf("call_%d", h.calls)
		a.Content = append(a.Content, history.Block{Type: history.BlockToolCall, ID: ids[i], Name: r.tool, Input: json.RawMessage(`{}`)})
	}
	h.add(a)
	for i, r := range results {
		h.add(history.Message{Role: history.RoleTool, ToolCallID: ids[i], ToolName: r.tool, IsError: i%2 == 1,
			Content: []history.Block{{Type: history.BlockText, Text: text(r.chars)}}})
	}
	return h
}

func text(n int) string {
	var b strings.Builder
	pattern := []rune("ab é中😀\n")
	for i := range n {
		b.WriteRune(pattern[i%len(pattern)])
	}
	return b.String()
}

func testCfg() config.ContextEditing {
	return config.ContextEditing{
		Enabled: true, Mode: config.EditModeLocal, KeepRecentTurns: 2, MinCharsToElide: 100,
		MaxTotalToolResultChars: 10000, MinCharsPerPass: 5000, ProtectToolNames: []string{"todo", "plan"},
	}
}

// render applies l to every message and encodes the result.
func render(t *testing.T, l *Ledger, msgs []history.Message, path func(string) string) []byte {
	t.Helper()
	var out bytes.Buffer
	for _, m := range msgs {
		p := ""
		if path != nil {
			p = path(m.ToolCallID)
		}
		b, err := history.Encode(l.Render(m, p))
		if err != nil {
			t.Fatal(err)
		}
		out.Write(b)
		out.WriteByte('\n')
	}
	return out.Bytes()
}

func blocksEqual(a, b []history.Block) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

func ids(h *hb, seqs ...int) []string {
	var out []string
	for _, s := range seqs {
		out = append(out, h.msgs[s-1].ToolCallID)
	}
	return out
}

func TestPassLifecycle(t *testing.T) {
	cfg := testCfg()
	h := &hb{}
	h.user("go")
	for range 6 {
		h.turn(false, res{"bash", 3000}) // seqs: assistant 2,4,6,8,10,12; results 3,5,…,13
	}
	var l Ledger
	p := Plan(cfg, h.msgs, &l, false)
	if p == nil {
		t.Fatal("no pass over 18000 characters of tool results")
	}
	if want := ids(h, 3, 5, 7, 9); !slices.Equal(p.Elided, want) || p.ElidedCount != 4 {
		t.Fatalf("elided %v, want %v (two recent turns kept)", p.Elided, want)
	}
	stub := uint64(utf8.RuneCountInString(Stub(h.msgs[2], "")))
	if p.CharsSaved != 4*(3000-stub) {
		t.Errorf("chars saved %d, want %d", p.CharsSaved, 4*(3000-stub))
	}
	if p.WithheldThinkingBefore != 0 {
		t.Error("thinking withheld without thinking_binding")
	}
	l.Apply(*p)

	// Right after: nothing new is eligible.
	if p2 := Plan(cfg, h.msgs, &l, false); p2 != nil {
		t.Fatalf("second pass right after the first: %+v", p2)
	}
	first := render(t, &l, h.msgs, nil)
	if again := render(t, &l, h.msgs, nil); !bytes.Equal(first, again) {
		t.Fatal("render differs between calls")
	}

	// One more turn makes one more result eligible: ~2900 saved < 5000.
	h.turn(false, res{"bash", 3000})
	if p2 := Plan(cfg, h.msgs, &l, false); p2 != nil {
		t.Fatalf("pass fired on too little new text: %+v", p2)
	}
	// The requests between passes extend each other byte for byte.
	next := render(t, &l, h.msgs, nil)
	if !bytes.HasPrefix(next, first) {
		t.Fatal("request is not an extension of the previous one")
	}
	// Two: enough.
	h.turn(false, res{"bash", 3000})
	p2 := Plan(cfg, h.msgs, &l, false)
	if p2 == nil {
		t.Fatal("no second pass with ~5800 new eligible characters")
	}
	if want := ids(h, 11, 13); !slices.Equal(p2.Elided, want) {
		t.Fatalf("second pass elided %v, want %v", p2.Elided, want)
	}
	l.Apply(*p2)
	if l.Passes() != 2 || l.Len() != 6 {
		t.Errorf("ledger: %d passes, %d elided", l.Passes(), l.Len())
	}

	// A ledger rebuilt from the recorded passes (through their JSON, as in
	// the event log) renders the same bytes.
	var rebuilt Ledger
	for _, pass := range []*Pass{p, p2} {
		b, err := json.Marshal(pass)
		if err != nil {
			t.Fatal(err)
		}
		var back Pass
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		rebuilt.Apply(back)
	}
	if !bytes.Equal(render(t, &l, h.msgs, nil), render(t, &rebuilt, h.msgs, nil)) {
		t.Error("rebuilt ledger renders differently")
	}
}

func TestRenderElided(t *testing.T) {
	h := (&hb{}).user("go").turn(false, res{"bash", 500}, res{"grep", 700})
	var l Ledger
	l.Apply(Pass{Elided: ids(h, 3, 4), ElidedCount: 2})
	m := h.msgs[3]
	got := l.Render(m, "/var/lib/ctxd/offload/s/call_2-abc.txt")
	want := "[ctxd elided this old tool result to save context: grep, 700 characters. The whole result is in /var/lib/ctxd/offload/s/call_2-abc.txt; read or grep it if you need it again.]"
	if len(got.Content) != 1 || !blocksEqual(got.Content, []history.Block{{Type: history.BlockText, Text: want}}) {
		t.Fatalf("content %+v", got.Content)
	}
	if got.Role != m.Role || got.ToolCallID != m.ToolCallID || got.ToolName != m.ToolName || got.IsError != m.IsError ||
		!got.Time.Equal(m.Time) || got.Seq != m.Seq || got.Tokens != 0 {
		t.Errorf("metadata not kept: %+v", got)
	}
	if !m.IsError {
		t.Fatal("test wants an error result")
	}
	plain := l.Render(h.msgs[2], "")
	if want := "[ctxd elided this old tool result to save context: bash, 500 characters. Run the tool again if you need it.]"; plain.Content[0].Text != want {
		t.Errorf("stub %q", plain.Content[0].Text)
	}
	if h.msgs[2].Content[0].Text != text(500) {
		t.Error("Render modified its input")
	}
	// Not elided, user and assistant messages: returned as they are.
	for _, i := range []int{0, 1} {
		a, _ := history.Encode(h.msgs[i])
		b, _ := history.Encode(l.Render(h.msgs[i], "x"))
		if !bytes.Equal(a, b) {
			t.Errorf("message %d changed", i)
		}
	}
	var nilLedger *Ledger
	if nilLedger.Elided("call_1") || nilLedger.Render(h.msgs[2], "").Content[0].Text != text(500) {
		t.Error("nil ledger is not empty")
	}
}

func TestPlanRules(t *testing.T) {
	withCfg := func(f func(*config.ContextEditing)) config.ContextEditing {
		c := testCfg()
		f(&c)
		return c
	}
	six := func(tool string) *hb {
		h := (&hb{}).user("go")
		for range 6 {
			h.turn(false, res{tool, 3000})
		}
		return h
	}
	cases := []struct {
		name string
		cfg  config.ContextEditing
		h    *hb
		want []int // seqs elided; nil: no pass
	}{
		{"crosses the threshold", testCfg(), six("bash"), []int{3, 5, 7, 9}},
		{"at the threshold, not over", withCfg(func(c *config.ContextEditing) { c.MaxTotalToolResultChars = 18000 }), six("bash"), nil},
		{"savings below min_chars_per_pass", withCfg(func(c *config.ContextEditing) { c.MinCharsPerPass = 4 * 3000 }), six("bash"), nil},
		{"protected tool never elided", testCfg(), six("todo"), nil},
		{"authored protect list without todo", withCfg(func(c *config.ContextEditing) { c.ProtectToolNames = []string{"plan"} }), six("todo"), []int{3, 5, 7, 9}},
		{"empty protect list", withCfg(func(c *config.ContextEditing) { c.ProtectToolNames = nil }), six("plan"), []int{3, 5, 7, 9}},
		{"disabled", withCfg(func(c *config.ContextEditing) { c.Enabled = false }), six("bash"), nil},
		{"server mode", withCfg(func(c *config.ContextEditing) { c.Mode = config.EditModeServer }), six("bash"), nil},
		{"auto resolved to local", withCfg(func(c *config.ContextEditing) { c.Mode = config.EditModeAuto }), six("bash"), []int{3, 5, 7, 9}},
		{"keep_recent_turns 0", withCfg(func(c *config.ContextEditing) { c.KeepRecentTurns = 0 }), six("bash"), []int{3, 5, 7, 9, 11, 13}},
		{"keep_recent_turns 5", withCfg(func(c *config.ContextEditing) { c.KeepRecentTurns = 5; c.MinCharsPerPass = 100 }), six("bash"), []int{3}},
		{"fewer turns than kept", withCfg(func(c *config.ContextEditing) { c.KeepRecentTurns = 7 }), six("bash"), nil},
		{"min_chars_to_elide", withCfg(func(c *config.ContextEditing) { c.MinCharsToElide = 3001 }), six("bash"), nil},
		{
			// A turn is an assistant message and all its results: the two
			// newest turns keep their three results each.
			"multi-call turns", testCfg(),
			(&hb{}).user("go").
				turn(false, res{"bash", 2000}, res{"read", 2000}, res{"todo", 2000}). // 2; 3 4 5
				turn(false, res{"bash", 2000}, res{"grep", 50}).                      // 6; 7 8
				turn(false, res{"bash", 2000}, res{"bash", 2000}, res{"bash", 2000}). // 9; 10 11 12
				turn(false, res{"bash", 2000}, res{"bash", 2000}, res{"bash", 2000}), // 13; 14 15 16
			[]int{3, 4, 7},
		},
		{
			// Text-only assistant messages are turns too.
			"text-only turns count", testCfg(),
			(&hb{}).user("go").turn(false, res{"bash", 6000}, res{"bash", 6000}).turn(false).turn(false),
			[]int{3, 4},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := Plan(tc.cfg, tc.h.msgs, &Ledger{}, false)
			if tc.want == nil {
				if p != nil {
					t.Fatalf("pass fired: %v", p.Elided)
				}
				return
			}
			if p == nil {
				t.Fatal("no pass")
			}
			if want := ids(tc.h, tc.want...); !slices.Equal(p.Elided, want) {
				t.Errorf("elided %v, want %v", p.Elided, want)
			}
			if p.ElidedCount != len(p.Elided) || p.CharsSaved < tc.cfg.MinCharsPerPass {
				t.Errorf("pass %+v", p)
			}
		})
	}
}

func TestPlanOffloadPaths(t *testing.T) {
	h := (&hb{}).user("go")
	for range 6 {
		h.turn(false, res{"bash", 3000})
	}
	paths := func(id string) string { return "/data/offload/s/" + id + ".txt" }
	p := PlanPaths(testCfg(), h.msgs, nil, false, paths)
	plain := Plan(testCfg(), h.msgs, nil, false)
	if p == nil || plain == nil {
		t.Fatal("no pass")
	}
	var l Ledger
	l.Apply(*p)
	var saved uint64
	for _, m := range h.msgs {
		if l.Elided(m.ToolCallID) {
			saved += ResultChars(m) - ResultChars(l.Render(m, paths(m.ToolCallID)))
		}
	}
	if saved != p.CharsSaved || plain.CharsSaved <= p.CharsSaved {
		t.Errorf("chars saved %d (rendered %d, without paths %d)", p.CharsSaved, saved, plain.CharsSaved)
	}
}

func TestThinkingWithheld(t *testing.T) {
	h := (&hb{}).user("go")
	for range 6 {
		h.turn(true, res{"bash", 3000}) // assistants at 2,4,…,12 with thinking
	}
	h.add(history.Message{Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockRedactedThinking, Data: "enc"}}}) // 14, thinking only
	h.turn(true, res{"bash", 10})                                                                                                     // 15; 16

	p := Plan(testCfg(), h.msgs, nil, true)
	if p == nil {
		t.Fatal("no pass")
	}
	// Kept turns: 14 and 15; elided: results 3,5,7,9,11,13; rewrite point 13.
	if want := ids(h, 3, 5, 7, 9, 11, 13); !slices.Equal(p.Elided, want) {
		t.Fatalf("elided %v, want %v", p.Elided, want)
	}
	if p.WithheldThinkingBefore != 14 {
		t.Fatalf("withheld before %d, want 14", p.WithheldThinkingBefore)
	}
	var l Ledger
	l.Apply(*p)
	for _, m := range h.msgs {
		r := l.Render(m, "")
		if m.Role != history.RoleAssistant {
			continue
		}
		has := HasThinking(r)
		if m.Seq < 14 && has {
			t.Errorf("seq %d: thinking produced before the rewrite point replayed", m.Seq)
		}
		if m.Seq >= 14 && !blocksEqual(r.Content, m.Content) {
			t.Errorf("seq %d: later message changed", m.Seq)
		}
		if m.Seq < 14 {
			// Other blocks are kept whole and in order.
			want := slices.DeleteFunc(slices.Clone(m.Content), isThinking)
			if !blocksEqual(r.Content, want) {
				t.Errorf("seq %d: non-thinking blocks changed", m.Seq)
			}
		}
	}
	// A later thinking-only message still holds its block.
	if r := l.Render(h.msgs[13], ""); r.Content[0].Type != history.BlockRedactedThinking {
		t.Errorf("seq 14 lost its thinking")
	}
	// A thinking-only message before the point keeps non-empty content.
	only := history.Message{Seq: 3, Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockThinking, Text: "x", Signature: "s"}}}
	if r := l.Render(only, ""); len(r.Content) != 1 || r.Content[0].Text != WithheldText {
		t.Errorf("thinking-only message rendered as %+v", r.Content)
	}
	// The point only moves forward.
	l.Apply(Pass{WithheldThinkingBefore: 5})
	if l.WithheldThinkingBefore() != 14 {
		t.Error("withheld point moved back")
	}

	// keep_recent_turns = 0: the last assistant message keeps its thinking,
	// which a provider needs to continue the tool loop.
	cfg := testCfg()
	cfg.KeepRecentTurns = 0
	h2 := (&hb{}).user("go")
	for range 4 {
		h2.turn(true, res{"bash", 4000})
	}
	p2 := Plan(cfg, h2.msgs, nil, true)
	if p2 == nil || p2.WithheldThinkingBefore != 8 {
		t.Fatalf("pass %+v, want thinking withheld before seq 8 (the last assistant)", p2)
	}
}

func TestServerEdit(t *testing.T) {
	got := ServerEdit(config.Defaults().ContextEditing)
	want := `{"edits":[{"type":"clear_tool_uses_20250919","trigger":{"type":"input_tokens","value":33334},"keep":{"type":"tool_uses","value":3},"clear_at_least":{"type":"input_tokens","value":16667},"exclude_tools":["todo","plan"],"clear_tool_inputs":true}]}`
	if string(got) != want {
		t.Errorf("ServerEdit =\n%s\nwant\n%s", got, want)
	}
	cfg := testCfg()
	cfg.ProtectToolNames = nil
	cfg.KeepRecentTurns = 0
	cfg.ClearToolInputs = false
	if got := string(ServerEdit(cfg)); got != `{"edits":[{"type":"clear_tool_uses_20250919","trigger":{"type":"input_tokens","value":3334},"keep":{"type":"tool_uses","value":0},"clear_at_least":{"type":"input_tokens","value":1667}}]}` {
		t.Errorf("ServerEdit = %s", got)
	}
	cfg.Enabled = false
	if ServerEdit(cfg) != nil {
		t.Error("disabled config has a server edit")
	}
}

func TestMode(t *testing.T) {
	cases := []struct {
		mode      string
		enabled   bool
		supported bool
		want      string
	}{
		{config.EditModeLocal, true, false, ModeLocal},
		{config.EditModeLocal, true, true, ModeLocal},
		{config.EditModeServer, true, true, ModeServer},
		{config.EditModeServer, true, false, ModeServer},
		{config.EditModeAuto, true, true, ModeServer},
		{config.EditModeAuto, true, false, ModeLocal},
		{config.EditModeAuto, false, true, ModeOff},
		{config.EditModeLocal, false, false, ModeOff},
		{"bogus", true, true, ModeOff},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/enabled=%v/supported=%v", tc.mode, tc.enabled, tc.supported), func(t *testing.T) {
			got, why := Mode(config.ContextEditing{Enabled: tc.enabled, Mode: tc.mode}, tc.supported)
			if got != tc.want || why == "" {
				t.Errorf("Mode = %q (%s), want %q", got, why, tc.want)
			}
			if tc.mode == config.EditModeServer && !tc.supported && !strings.Contains(why, "does not list") {
				t.Errorf("no warning: %s", why)
			}
		})
	}
}

func TestPassJSON(t *testing.T) {
	b, _ := json.Marshal(Pass{Elided: []string{"a"}, ElidedCount: 1, CharsSaved: 9})
	if string(b) != `{"elided":["a"],"elided_count":1,"chars_saved":9}` {
		t.Errorf("%s", b)
	}
	b, _ = json.Marshal(Pass{Elided: []string{"a"}, ElidedCount: 1, CharsSaved: 9, WithheldThinkingBefore: 4})
	if string(b) != `{"elided":["a"],"elided_count":1,"chars_saved":9,"withheld_thinking_before":4}` {
		t.Errorf("%s", b)
	}
}

func TestResultChars(t *testing.T) {
	m := history.Message{Role: history.RoleTool, Content: []history.Block{
		{Type: history.BlockText, Text: "é中😀"},
		{Type: history.BlockJSON, JSON: json.RawMessage(`{"a":"中"}`)},
		{Type: history.BlockImage, MediaType: "image/png", Data: "AAAA"},
	}}
	if got := ResultChars(m); got != 3+9 {
		t.Errorf("ResultChars = %d, want 12", got)
	}
}

func TestProtectToolNamesMatchWithoutCase(t *testing.T) {
	cfg := config.ContextEditing{Enabled: true, Mode: "local", KeepRecentTurns: 0, MinCharsToElide: 10,
		MaxTotalToolResultChars: 100, MinCharsPerPass: 10, ProtectToolNames: []string{"todowrite"}}
	var msgs []history.Message
	seq := uint64(1)
	for i, tool := range []string{"TodoWrite", "Bash"} {
		id := fmt.Sprintf("c%d", i)
		msgs = append(msgs,
			history.Message{Seq: seq, Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockToolCall, ID: id, Name: tool, Input: json.RawMessage(`{}`)}}},
			history.Message{Seq: seq + 1, Role: history.RoleTool, ToolCallID: id, ToolName: tool, Content: []history.Block{{Type: history.BlockText, Text: strings.Repeat("x", 200)}}})
		seq += 2
	}
	p := Plan(cfg, msgs, nil, false)
	if p == nil || len(p.Elided) != 1 || p.Elided[0] != "c1" {
		t.Fatalf("pass = %+v, want only the Bash result elided", p)
	}
}

func TestWithholdOnlyMovesForward(t *testing.T) {
	var l Ledger
	l.Withhold(10)
	l.Withhold(5)
	l.Apply(Pass{WithheldThinkingBefore: 7})
	if got := l.WithheldThinkingBefore(); got != 10 {
		t.Fatalf("WithheldThinkingBefore = %d, want 10", got)
	}
	m := history.Message{Seq: 9, Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockThinking, Text: "t", Signature: "s"}, {Type: history.BlockText, Text: "x"}}}
	if r := l.Render(m, ""); HasThinking(r) || len(r.Content) != 1 {
		t.Fatalf("thinking before the point still rendered: %+v", r)
	}
}
