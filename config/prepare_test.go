package config

import "testing"

func TestRulePreparePercent(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{name: "derived", src: "[context_compaction]\nprepare_percent = 0\n"},
		{name: "below the trigger", src: "[context_compaction]\ntrigger = { percent = 80 }\nprepare_percent = 79\n"},
		{name: "off", src: "[context_compaction]\nprepare_percent = 100\n"},
		{name: "with a buffer trigger", src: "[context_compaction]\ntrigger = { buffer_tokens = 20000 }\nprepare_percent = 90\n"},
		{name: "at the trigger", src: "[context_compaction]\nprepare_percent = 70\n",
			key: "context_compaction.prepare_percent", pos: "2:1", msg: "below the trigger's percent (70)"},
		{name: "over 100", src: "[context_compaction]\nprepare_percent = 101\n",
			key: "context_compaction.prepare_percent", pos: "2:1", msg: "100 (off)"},
	})
}

func TestRuleIdle(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{name: "auto", src: "[context_compaction]\nidle = \"auto\"\n"},
		{name: "on", src: "[context_compaction]\nidle = \"on\"\n"},
		{name: "off", src: "[context_compaction]\nidle = \"off\"\n"},
		{name: "other", src: "[context_compaction]\nidle = \"sometimes\"\n",
			key: "context_compaction.idle", pos: "2:1", msg: `must be "auto", "on" or "off"`},
	})
}

func TestPrepareMark(t *testing.T) {
	for _, tc := range []struct {
		name             string
		cc               ContextCompaction
		limit, threshold uint64
		want             uint64
	}{
		{"derived from 70 per cent", ContextCompaction{}, 200000, 140000, 120000},
		{"explicit", ContextCompaction{PreparePercent: 50}, 200000, 140000, 100000},
		{"off", ContextCompaction{PreparePercent: PrepareOff}, 200000, 140000, 0},
		{"unknown window", ContextCompaction{}, 0, 0, 0},
		{"low threshold: half of it", ContextCompaction{}, 200000, 10000, 5000},
		{"explicit above a buffer threshold: the threshold", ContextCompaction{PreparePercent: 95}, 200000, 180000, 180000},
	} {
		if got := tc.cc.PrepareMark(tc.limit, tc.threshold); got != tc.want {
			t.Errorf("%s: PrepareMark(%d, %d) = %d, want %d", tc.name, tc.limit, tc.threshold, got, tc.want)
		}
	}
}
