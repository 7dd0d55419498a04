package history

import (
	"reflect"
	"strconv"
	"testing"
)

func TestGroups(t *testing.T) {
	asst := text(RoleAssistant, "done")
	tests := []struct {
		name string
		msgs []Message
		want Analysis
	}{
		{"empty", nil, Analysis{}},
		{"singles", []Message{text(RoleUser, "a"), asst}, Analysis{Groups: []Group{{0, 1, false}, {1, 2, false}}}},
		{
			"parallel calls answered",
			[]Message{text(RoleUser, "go"), calls(call("a", "r"), call("b", "r")), result("b", "x"), result("a", "y"), asst},
			Analysis{Groups: []Group{{0, 1, false}, {1, 4, false}, {4, 5, false}}},
		},
		{
			"interleaved text inside a round",
			[]Message{calls(call("a", "r"), call("b", "r")), result("a", "x"), asst, result("b", "y"), asst},
			Analysis{Groups: []Group{{0, 4, false}, {4, 5, false}}},
		},
		{
			"overlapping rounds merge",
			[]Message{calls(call("a", "r")), calls(call("b", "r")), result("a", "x"), result("b", "y")},
			Analysis{Groups: []Group{{0, 4, false}}},
		},
		{
			"open round at the end",
			[]Message{text(RoleUser, "go"), calls(call("a", "r"), call("b", "w")), result("a", "x")},
			Analysis{
				Groups:     []Group{{0, 1, false}, {1, 3, true}},
				Open:       []Call{{"b", "w", 1}},
				Unanswered: []Call{{"b", "w", 1}},
			},
		},
		{
			"abandoned by a user message, late result is an orphan",
			[]Message{calls(call("a", "r"), call("b", "w")), result("a", "x"), text(RoleUser, "stop"), result("b", "late"), asst},
			Analysis{
				Groups:     []Group{{0, 2, false}, {2, 3, false}, {3, 4, false}, {4, 5, false}},
				Abandoned:  []Abandoned{{Call{"b", "w", 0}, 2}},
				Unanswered: []Call{{"b", "w", 0}},
				Orphans:    []int{3},
			},
		},
		{
			"orphan first and inside a round",
			[]Message{result("z", "x"), calls(call("a", "r")), result("q", "x"), result("a", "y")},
			Analysis{Groups: []Group{{0, 1, false}, {1, 4, false}}, Orphans: []int{0, 2}},
		},
		{
			"duplicate call id",
			[]Message{calls(call("a", "r")), result("a", "x"), calls(call("a", "r")), result("a", "y")},
			Analysis{Groups: []Group{{0, 2, false}, {2, 3, false}, {3, 4, false}}, Duplicates: []int{2}, Orphans: []int{3}},
		},
		{
			"assistant with only duplicate call inside open round",
			[]Message{calls(call("a", "r"), call("a", "r")), result("a", "x")},
			Analysis{Groups: []Group{{0, 2, false}}, Duplicates: []int{0}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Groups(tt.msgs)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Groups =\n%+v\nwant\n%+v", got, tt.want)
			}
			checkPartition(t, got.Groups, len(tt.msgs))
			if got.Valid() != (len(tt.want.Orphans)+len(tt.want.Unanswered)+len(tt.want.Duplicates) == 0) {
				t.Errorf("Valid() = %v", got.Valid())
			}
			// The State agrees with Groups on what is open at the end.
			s := NewState(tt.msgs)
			if open := s.Open(); len(open) != len(got.Open) || (len(open) > 0 && !reflect.DeepEqual(open, got.Open)) {
				t.Errorf("State.Open = %+v, Groups.Open = %+v", open, got.Open)
			}
		})
	}
}

func checkPartition(t *testing.T, gs []Group, n int) {
	t.Helper()
	next := 0
	for i, g := range gs {
		if g.Start != next || g.Len() <= 0 {
			t.Fatalf("group %d = %+v, want start %d and non-empty", i, g, next)
		}
		if g.Open && i != len(gs)-1 {
			t.Fatalf("open group %d is not the last", i)
		}
		next = g.End
	}
	if next != n {
		t.Fatalf("groups cover %d of %d messages", next, n)
	}
}

// BenchmarkGroups shows Groups is linear: ns/op divided by the message count
// stays flat from 1k to 100k messages.
func BenchmarkGroups(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		msgs := make([]Message, 0, n)
		for i := 0; len(msgs) < n; i++ {
			id := string(rune('a'+i%26)) + strconv.Itoa(i)
			msgs = append(msgs, text(RoleUser, "q"), calls(call(id, "r")), result(id, "x"))
		}
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			for b.Loop() {
				Groups(msgs)
			}
		})
	}
}
