package accuracy

import (
	"math"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/transcript"
)

func TestPercentiles(t *testing.T) {
	v := []float64{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	got := Percentiles(v, 50, 90, 100, 0)
	if got[0] != 5 || got[1] != 9 || got[2] != 10 || !math.IsNaN(got[3]) {
		t.Fatalf("Percentiles = %v", got)
	}
	if v[0] != 5 {
		t.Fatal("values modified")
	}
	if got := Percentiles(nil, 50); got[0] != 0 {
		t.Fatalf("empty = %v", got)
	}
}

func resp(ctx, out uint64, text string) history.Message {
	return history.Message{Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockText, Text: text}},
		Usage: &history.Usage{InputTokens: ctx, OutputTokens: out}}
}

func user(text string) history.Message {
	return history.Message{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: text}}}
}

func TestGrowthPairs(t *testing.T) {
	var e history.Estimator
	long := strings.Repeat("word ", 1000)
	tr := &transcript.Transcript{Messages: []history.Message{
		resp(1000, 5, "a"), user(long), // growth recorded 2000
		resp(3000, 10, "b"), user(long),
		{Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockText, Text: "no usage"}}},
		resp(2000, 1, "c"), // context shrank
		resp(9000, 1, "after"),
	}, OriginalCompactions: []transcript.OriginalCompaction{{BeforeResponse: 4, MessageIndex: 6}}}

	ps := GrowthPairs(tr, e, Method{Factor: 1})
	if len(ps) != 2 {
		t.Fatalf("pairs = %+v, want 2 (the compaction ends them)", ps)
	}
	want0 := e.Message(tr.Messages[0]) + e.Message(tr.Messages[1])
	if p := ps[0]; p.Prev != 0 || p.Next != 2 || p.Recorded != 2000 || p.Estimated != want0 || p.Response != 1 {
		t.Fatalf("pair 0 = %+v, estimate want %d", p, want0)
	}
	if p := ps[1]; p.Prev != 2 || p.Next != 5 || p.Recorded != -1000 || p.Chars4 != (1+5000+8+3)/4 {
		t.Fatalf("pair 1 = %+v", p)
	}

	// Reported output replaces a plausible response estimate only.
	ps = GrowthPairs(tr, e, Method{Factor: 1, ReportedOutput: true})
	if ps[0].Estimated != 5+e.Message(tr.Messages[1]) { // 5 ≥ half the estimate of "a"
		t.Fatalf("reported: %+v", ps[0])
	}
	if ps[1].Estimated != 10+e.Message(tr.Messages[3])+e.Message(tr.Messages[4]) { // the response without usage is estimated
		t.Fatalf("reported: %+v", ps[1])
	}
	tr.Messages[2].Usage.OutputTokens = 1 // below half of the estimate of "b": a streaming snapshot
	if ps = GrowthPairs(tr, e, Method{Factor: 1, ReportedOutput: true}); ps[1].Estimated != e.Message(tr.Messages[2])+e.Message(tr.Messages[3])+e.Message(tr.Messages[4]) {
		t.Fatalf("implausible output used: %+v", ps[1])
	}
	tr.Messages[2].Usage.OutputTokens = 10

	// Online: the second pair uses a factor learned from the first.
	ps = GrowthPairs(tr, e, Method{Factor: 1, Online: true})
	if ps[0].Factor != 1 || ps[1].Factor <= 1 {
		t.Fatalf("online factors %v, %v", ps[0].Factor, ps[1].Factor)
	}
	if GrowthPairs(tr, e, Method{}) != nil {
		t.Fatal("factor 0 accepted")
	}

	s := Summarize(ps)
	if s.Pairs != 1 || s.P50 != math.Abs(ps[0].Error()) || s.Chars4P90 != math.Abs(ps[0].Chars4Error()) {
		t.Fatalf("Summarize = %+v", s)
	}
}

func TestClaudeCodeAgents(t *testing.T) {
	in := `{"uuid":"m1","isSidechain":false}
{"uuid":"a1","parentUuid":null,"isSidechain":true}
{"uuid":"b1","parentUuid":"m1","isSidechain":true}
{"uuid":"a2","parentUuid":"a1","isSidechain":true}
not json
{"uuid":"b2","parentUuid":"b1","isSidechain":true}
`
	got := ClaudeCodeAgents([]byte(in))
	if len(got) != 2 || strings.Count(string(got[0]), "\n") != 1 || !strings.Contains(string(got[0]), `"a2"`) || !strings.Contains(string(got[1]), `"b2"`) {
		t.Fatalf("agents = %q", got)
	}
}
