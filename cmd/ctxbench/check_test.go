package main

import (
	"testing"
	"time"

	"github.com/ctxd/ctxd/api"
)

func msg(role api.Role, text string) api.Message {
	return api.Message{Role: role, Content: []api.Block{{Type: api.BlockText, Text: text}}}
}

// seqOf builds stored entries from texts at seqs start, start+1, …
func seqOf(start uint64, texts ...string) []stored {
	out := make([]stored, len(texts))
	for i, t := range texts {
		m := msg(api.RoleUser, t)
		out[i] = stored{seq: start + uint64(i), fp: fingerprintOf(&m)}
	}
	return out
}

func TestCompare(t *testing.T) {
	cases := []struct {
		name  string
		acked []stored
		log   []stored
		want  Integrity
	}{
		{"identical", seqOf(1, "a", "b", "c"), seqOf(1, "a", "b", "c"), Integrity{}},
		{"repeated text is not a duplicate", seqOf(1, "ok", "ok", "b"), seqOf(1, "ok", "ok", "b"), Integrity{}},
		{"lost", seqOf(1, "a", "b", "c"), seqOf(1, "a", "c"), Integrity{Lost: 1, SeqMismatch: 1}},
		{"duplicated", seqOf(1, "a", "b"), seqOf(1, "a", "b", "b"), Integrity{Duplicated: 1}},
		{"swapped", seqOf(1, "a", "b", "c"), seqOf(1, "a", "c", "b"), Integrity{Reordered: 1, SeqMismatch: 2}},
		{"moved to the end", seqOf(1, "a", "b", "c", "d"), seqOf(1, "b", "c", "d", "a"), Integrity{Reordered: 1, SeqMismatch: 4}},
		{"reversed", seqOf(1, "a", "b", "c", "d"), seqOf(1, "d", "c", "b", "a"), Integrity{Reordered: 3, SeqMismatch: 4}},
		{"unacknowledged tail", seqOf(1, "a"), seqOf(1, "a", "z"), Integrity{Unacknowledged: 1}},
		{"other events between", seqOf(1, "a", "b"), append(seqOf(1, "a"), seqOf(3, "b")...), Integrity{SeqMismatch: 1}},
		{"empty", nil, nil, Integrity{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := compare(tc.acked, tc.log)
			tc.want.Sessions, tc.want.Acknowledged, tc.want.Stored = 1, len(tc.acked), len(tc.log)
			if got != tc.want {
				t.Fatalf("compare:\n got %+v\nwant %+v", got, tc.want)
			}
			if wantOK := tc.want.Lost+tc.want.Duplicated+tc.want.Reordered+tc.want.SeqMismatch == 0; got.OK() != wantOK {
				t.Fatalf("OK() = %v, want %v", got.OK(), wantOK)
			}
		})
	}
}

func TestFingerprint(t *testing.T) {
	a := msg(api.RoleUser, "same")
	b := a
	b.Seq, b.Tokens, b.Time = 9, 40, time.Unix(1, 0)
	if fingerprintOf(&a) != fingerprintOf(&b) {
		t.Error("seq, tokens and time changed the fingerprint")
	}
	for name, m := range map[string]api.Message{
		"role":    msg(api.RoleAssistant, "same"),
		"text":    msg(api.RoleUser, "other"),
		"call id": {Role: api.RoleUser, ToolCallID: "x", Content: a.Content},
		"error":   {Role: api.RoleUser, IsError: true, Content: a.Content},
	} {
		if fingerprintOf(&m) == fingerprintOf(&a) {
			t.Errorf("a different %s has the same fingerprint", name)
		}
	}
}

func TestLongestIncreasing(t *testing.T) {
	for _, tc := range []struct {
		xs   []int
		want int
	}{
		{nil, 0}, {[]int{1}, 1}, {[]int{0, 1, 2}, 3}, {[]int{2, 1, 0}, 1}, {[]int{0, 2, 1, 3}, 3}, {[]int{3, 0, 1, 2}, 3},
	} {
		if got := longestIncreasing(tc.xs); got != tc.want {
			t.Errorf("longestIncreasing(%v) = %d, want %d", tc.xs, got, tc.want)
		}
	}
}

func TestPercentileAndSummarize(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	s := summarize(ds)
	if s.Count != 100 || s.P50 != 50 || s.P99 != 99 || s.Max != 100 || s.Mean != 50.5 {
		t.Fatalf("summarize(1..100 ms) = %+v", s)
	}
	if got := percentile([]time.Duration{7}, 99); got != 7 {
		t.Errorf("percentile of one value = %v", got)
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("percentile of none = %v", got)
	}
	if (summarize(nil) != Latencies{}) {
		t.Error("summarize(nil) is not zero")
	}
	// Nearest rank: p99 of 10 values is the largest.
	ten := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if got := percentile(ten, 99); got != 10 {
		t.Errorf("p99 of 10 values = %v, want the largest", got)
	}
}

func TestGauge(t *testing.T) {
	g := gauge([]int{3, 0, 6, 1})
	if g.Samples != 4 || g.Min != 0 || g.Max != 6 || g.Avg != 2.5 {
		t.Fatalf("gauge = %+v", g)
	}
	if g := gauge(nil); g.Samples != 0 || g.Series != nil {
		t.Fatalf("gauge(nil) = %+v", g)
	}
}

func TestParseProcStatus(t *testing.T) {
	m, err := parseProcStatus([]byte("Name:\tctxd\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\nThreads:\t9\n"))
	if err != nil || m.RSS != 100 || m.PeakRSS != 200 {
		t.Fatalf("parseProcStatus = %+v, %v", m, err)
	}
	if _, err := parseProcStatus([]byte("Name:\tctxd\n")); err == nil {
		t.Error("no error without VmRSS")
	}
}

func TestMetricValues(t *testing.T) {
	text := []byte(`# HELP ctxd_compactions_total Finished compactions by outcome.
# TYPE ctxd_compactions_total counter
ctxd_compactions_total{outcome="failed"} 2
ctxd_compactions_total{outcome="ok"} 17
ctxd_compactions_total_extra 5
go_memstats_heap_inuse_bytes 1.048576e+07
`)
	c := metricValues(text, "ctxd_compactions_total")
	if len(c) != 2 || c[`outcome="ok"`] != 17 || c[`outcome="failed"`] != 2 {
		t.Fatalf("compactions = %v", c)
	}
	if h := metricValues(text, "go_memstats_heap_inuse_bytes")[""]; h != 10485760 {
		t.Fatalf("heap = %v", h)
	}
}

func TestCutSteps(t *testing.T) {
	call := api.Message{Role: api.RoleAssistant, Content: []api.Block{{Type: api.BlockToolCall, ID: "c1", Name: "bash"}},
		Usage: &api.Usage{OutputTokens: 12}}
	res := api.Message{Role: api.RoleTool, ToolCallID: "c1", Content: []api.Block{{Type: api.BlockText, Text: "ok"}}}
	answer := msg(api.RoleAssistant, "done, twelve chars")
	s := cutSteps([]api.Message{msg(api.RoleUser, "go"), call, res, answer, msg(api.RoleUser, "next")})
	if len(s.head) != 1 || len(s.steps) != 2 || len(s.steps[0].after) != 1 || len(s.steps[1].after) != 1 || s.messages() != 5 {
		t.Fatalf("cutSteps: head %d, steps %+v", len(s.head), s.steps)
	}
	if s.steps[0].outputTokens != 12 || s.steps[1].outputTokens != 5 {
		t.Errorf("output tokens %d, %d; want the recorded 12 and 18/4+1", s.steps[0].outputTokens, s.steps[1].outputTokens)
	}
}

func TestGeneratedScriptAlternates(t *testing.T) {
	s := generatedScript(7, 40)
	if len(s.steps) < 40 {
		t.Fatalf("%d steps for 40 rounds", len(s.steps))
	}
	// After each response, the next message (if any) is never another
	// assistant message: tool results or a user prompt come between.
	for i, st := range s.steps[:len(s.steps)-1] {
		if len(st.after) == 0 {
			t.Fatalf("step %d: two responses in a row", i)
		}
	}
	if again := generatedScript(7, 40); fingerprintOf(&again.steps[3].after[0]) != fingerprintOf(&s.steps[3].after[0]) {
		t.Error("the same seed generated another script")
	}
}
