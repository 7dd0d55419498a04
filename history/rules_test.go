package history

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func thinking(s string) Block { return Block{Type: BlockThinking, Text: s, Signature: "sig-" + s} }

func asst(bs ...Block) Message { return Message{Role: RoleAssistant, Content: bs} }

// TestCheckRequest: each rule of docs/design.md §4a, broken and kept; and the
// incremental Checker gives the same answer for every split of each list.
func TestCheckRequest(t *testing.T) {
	u := text(RoleUser, "do it")
	tests := []struct {
		name  string
		msgs  []Message
		rules Rules
		want  []string // "index:rule"
	}{
		{"empty", nil, Rules{}, nil},
		{"user only", []Message{u}, Rules{}, nil},
		{"a whole round", []Message{u, calls(call("a", "r"), call("b", "r")), result("a", "1"), result("b", "2"), text(RoleAssistant, "done")}, Rules{}, nil},
		{"result missing at the end", []Message{u, calls(call("a", "r"))}, Rules{}, []string{"1:" + RuleMissingResult}},
		{"result missing at the end, open tail", []Message{u, calls(call("a", "r"), call("b", "r")), result("a", "1")}, Rules{OpenTail: true}, nil},
		{"second result after a later assistant message", []Message{u, calls(call("c1", "r"), call("c2", "r")), result("c1", "1"), text(RoleAssistant, "hm"), result("c2", "2")},
			Rules{}, []string{"2:" + RuleMissingResult, "4:" + RuleOrphanResult}},
		{"result of no call", []Message{u, result("x", "1")}, Rules{}, []string{"1:" + RuleOrphanResult}},
		{"result twice", []Message{u, calls(call("a", "r")), result("a", "1"), result("a", "1")}, Rules{}, []string{"3:" + RuleOrphanResult}},
		{"user between call and result", []Message{u, calls(call("a", "r")), u, result("a", "1")}, Rules{}, []string{"1:" + RuleMissingResult, "3:" + RuleOrphanResult}},
		{"duplicate id", []Message{u, calls(call("a", "r")), result("a", "1"), calls(call("a", "r")), result("a", "1")}, Rules{}, []string{"3:" + RuleDuplicateCallID, "4:" + RuleOrphanResult}},
		{"empty text block", []Message{text(RoleUser, " \n")}, Rules{}, []string{"0:" + RuleEmptyText}},
		{"message without content", []Message{u, {Role: RoleAssistant}}, Rules{}, []string{"1:" + RuleEmptyMessage}},
		{"empty tool result is fine", []Message{u, calls(call("a", "r")), {Role: RoleTool, ToolCallID: "a"}}, Rules{}, nil},
		{"first message assistant", []Message{text(RoleAssistant, "hi"), u}, Rules{}, []string{"0:" + RuleFirstNotUser}},

		{"thinking loop kept", []Message{u, asst(thinking("t1"), call("a", "r")), result("a", "1"), asst(thinking("t2"), call("b", "r")), result("b", "2")}, Rules{Thinking: ThinkingOn}, nil},
		{"redacted thinking leads the loop", []Message{u, asst(Block{Type: BlockRedactedThinking, Data: "x"}, call("a", "r")), result("a", "1")}, Rules{Thinking: ThinkingOn}, nil},
		{"final loop message lost its thinking", []Message{u, asst(thinking("t1"), call("a", "r")), result("a", "1"), asst(call("b", "r")), result("b", "2")}, Rules{Thinking: ThinkingOn}, []string{"3:" + RuleLoopThinking}},
		{"earlier loop message without thinking is not the final one", []Message{u, asst(call("a", "r")), result("a", "1"), asst(thinking("t2"), call("b", "r")), result("b", "2")}, Rules{Thinking: ThinkingOn}, nil},
		{"thinking unknown: no loop rule", []Message{u, asst(call("a", "r")), result("a", "1")}, Rules{}, nil},
		{"loop ended by a user prompt", []Message{u, asst(call("a", "r")), result("a", "1"), text(RoleAssistant, "ok"), u}, Rules{Thinking: ThinkingOn}, nil},
		{"thinking not first", []Message{u, asst(Block{Type: BlockText, Text: "x"}, thinking("t"), call("a", "r")), result("a", "1")}, Rules{},
			[]string{"1:" + RuleThinkingFirst}},
		{"thinking last", []Message{u, asst(thinking("t"))}, Rules{}, []string{"1:" + RuleThinkingLast}},
		{"thinking off, final assistant with thinking", []Message{u, asst(thinking("t"), Block{Type: BlockText, Text: "x"})}, Rules{Thinking: ThinkingOff}, []string{"1:" + RuleThinkingOff}},
		{"thinking off, earlier thinking is fine", []Message{u, asst(thinking("t"), Block{Type: BlockText, Text: "x"}), u}, Rules{Thinking: ThinkingOff}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vs := CheckRequest(tc.msgs, tc.rules)
			var got []string
			for _, v := range vs {
				got = append(got, strconv.Itoa(v.Index)+":"+v.Rule)
				if v.Message == "" {
					t.Errorf("%v has no message", v)
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("violations %v, want %v (%v)", got, tc.want, vs)
			}
			if err := vs.Err(); (err != nil) != (len(tc.want) > 0) || (err != nil && !errors.Is(err, ErrProviderRule)) {
				t.Fatalf("Err() = %v", err)
			}
			// The incremental Checker: every split of the list, read in two
			// pieces, gives the same answer, and the answer for the first
			// piece taken before the second is read does not change.
			for k := 0; k <= len(tc.msgs); k++ {
				var c Checker
				c.Extend(tc.msgs[:k])
				mid := c.Checked()
				c.Extend(tc.msgs[k:])
				if got := c.Checked().Violations(tc.rules); !reflect.DeepEqual(got, vs) {
					t.Fatalf("split at %d: %v, want %v", k, got, vs)
				}
				if c.Len() != len(tc.msgs) || mid.Len() != k {
					t.Fatalf("split at %d: Len %d and %d", k, c.Len(), mid.Len())
				}
				for _, r := range []Rules{tc.rules, {}, {OpenTail: true}, {Thinking: ThinkingOn}, {Thinking: ThinkingOff}} {
					if got, want := mid.Violations(r), CheckRequest(tc.msgs[:k], r); !reflect.DeepEqual(got, want) {
						t.Fatalf("first %d messages under %+v: %v, want %v", k, r, got, want)
					}
				}
			}
		})
	}
}

// The messages quote the providers' own texts.
func TestCheckRequestQuotesTheProvider(t *testing.T) {
	msgs := []Message{text(RoleUser, "go"), asst(thinking("t1"), call("toolu_1", "r")), result("toolu_1", "1"), asst(call("toolu_2", "r")), result("toolu_2", "2")}
	vs := CheckRequest(msgs, Rules{Thinking: ThinkingOn})
	if len(vs) != 1 || !strings.Contains(vs[0].Message, "Expected `thinking` or `redacted_thinking`, but found `tool_use`. When `thinking` is enabled, a final `assistant` message must start with a thinking block") {
		t.Fatalf("got %v", vs)
	}
	vs = CheckRequest([]Message{text(RoleUser, "go"), calls(call("toolu_019tYDrbzifrra2KYzmYqWvk", "r"))}, Rules{})
	if len(vs) != 1 || !strings.Contains(vs[0].Message, "`tool_use` ids were found without `tool_result` blocks immediately after: toolu_019tYDrbzifrra2KYzmYqWvk.") {
		t.Fatalf("got %v", vs)
	}
}

func TestSendable(t *testing.T) {
	msgs := []Message{
		text(RoleUser, "go"),
		{Role: RoleAssistant, Content: []Block{{Type: BlockText, Text: "  "}}},
		{Role: RoleAssistant, Content: []Block{{Type: BlockText, Text: ""}, {Type: BlockText, Text: "x"}}},
		{Role: RoleTool, ToolCallID: "a", Content: []Block{{Type: BlockText, Text: " "}}},
	}
	got := Sendable(msgs)
	if len(got) != 3 || len(got[1].Content) != 1 || got[1].Content[0].Text != "x" || got[2].Role != RoleTool || len(got[2].Content) != 0 {
		t.Fatalf("Sendable = %+v", got)
	}
	if len(msgs[2].Content) != 2 {
		t.Fatal("Sendable changed its input")
	}
	clean := msgs[:1]
	if s := Sendable(clean); &s[0] != &clean[0] {
		t.Fatal("a clean list is not returned as is")
	}
}

func TestDropTrailingThinking(t *testing.T) {
	m := asst(thinking("a"), Block{Type: BlockText, Text: "x"}, thinking("b"))
	got, ok := DropTrailingThinking(m)
	if !ok || len(got.Content) != 2 || got.Content[1].Text != "x" || len(m.Content) != 3 {
		t.Fatalf("got %+v, %v", got, ok)
	}
	got, ok = DropTrailingThinking(asst(thinking("only")))
	if !ok || len(got.Content) != 1 || got.Content[0].Text != InterruptedText {
		t.Fatalf("thinking only: %+v", got)
	}
	if vs := CheckRequest([]Message{text(RoleUser, "go"), got}, Rules{}); len(vs) > 0 {
		t.Fatal(vs)
	}
	if _, ok := DropTrailingThinking(asst(thinking("a"), call("c", "r"))); ok {
		t.Fatal("a message ending with a call changed")
	}
}

// A message holding a provider compaction block counts from that block on;
// only assistant messages may hold one.
func TestCompactionBlock(t *testing.T) {
	var e Estimator
	long := Block{Type: BlockText, Text: strings.Repeat("the quick brown fox ", 2000)}
	summary := Block{Type: BlockCompaction, Text: "a short summary"}
	m := asst(long, summary, Block{Type: BlockText, Text: "hello"})
	if got, want := e.Message(m), e.Message(asst(summary, Block{Type: BlockText, Text: "hello"})); got != want {
		t.Fatalf("estimate %d, want %d (from the compaction block on)", got, want)
	}
	msgs := []Message{text(RoleUser, "x"), m, text(RoleUser, "y")}
	if i := CompactionIndex(msgs); i != 1 {
		t.Fatalf("CompactionIndex = %d", i)
	}
	if err := (&State{}).Check(m); err != nil {
		t.Fatal(err)
	}
	if err := (&State{}).Check(Message{Role: RoleUser, Content: []Block{summary}}); err == nil {
		t.Fatal("a compaction block in a user message was accepted")
	}
	if e.Tools(nil) != 0 || e.Tools([]ToolDef{{Name: "t"}}) < ToolsPreambleTokens+ToolDefOverheadTokens {
		t.Fatal("tool overheads not counted")
	}
	// The provider compacts before it samples: its answer's thinking comes
	// right after the compaction block, which §4a accepts; thinking after
	// text still breaks the rule.
	compacted := asst(summary, thinking("t"), Block{Type: BlockText, Text: "hello"})
	if vs := CheckRequest([]Message{text(RoleUser, "x"), compacted, text(RoleUser, "y")}, Rules{Thinking: ThinkingOn}); len(vs) > 0 {
		t.Fatalf("compaction then thinking: %v", vs)
	}
	late := asst(summary, Block{Type: BlockText, Text: "hello"}, thinking("t"), Block{Type: BlockText, Text: "bye"})
	if vs := CheckRequest([]Message{text(RoleUser, "x"), late, text(RoleUser, "y")}, Rules{Thinking: ThinkingOn}); len(vs) != 1 || vs[0].Rule != RuleThinkingFirst {
		t.Fatalf("thinking after text: %v", vs)
	}
}

// BenchmarkCheckRequest: the provider-rule check that runs before every
// context is returned, beside Groups (the pairing check replay ran before)
// on the same 2,000-message thinking history as the baseline.
func BenchmarkCheckRequest(b *testing.B) {
	msgs := make([]Message, 0, 2000)
	for i := 0; len(msgs) < 2000; i++ {
		id := "c" + strconv.Itoa(i)
		msgs = append(msgs, text(RoleUser, "q"), asst(thinking("t"), call(id, "r")), result(id, "x"))
	}
	b.Run("groups baseline", func(b *testing.B) {
		for b.Loop() {
			Groups(msgs)
		}
	})
	b.Run("sendable+check", func(b *testing.B) {
		for b.Loop() {
			CheckRequest(Sendable(msgs), Rules{Thinking: ThinkingOn})
		}
	})
}
