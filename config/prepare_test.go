package config

import (
	"fmt"
	"strings"
	"testing"
)

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

// With a buffer_tokens trigger the threshold is per model: a prepare mark
// at or above a named model's threshold is a warning naming the model
// (the summary would not be prepared before the trigger); one below every
// threshold is not.
func TestPreparePercentAboveABufferThresholdWarns(t *testing.T) {
	src := "[context_compaction]\ntrigger = { buffer_tokens = 50000 }\nprepare_percent = %d\n[models.\"m-200k\"]\ncontext_limit = 200000\n"
	_, warnings, problems := loadSrc(t, fmt.Sprintf(src, 90))
	if len(problems) > 0 {
		t.Fatalf("problems: %v", problems)
	}
	var hit *Warning
	for i := range warnings {
		if warnings[i].Key == "context_compaction.prepare_percent" {
			hit = &warnings[i]
		}
	}
	if hit == nil || !strings.Contains(hit.Message, "m-200k (threshold 150000)") {
		t.Fatalf("90 %% above a 150000 threshold of a 200000 window: warnings %v", warnings)
	}
	_, warnings, _ = loadSrc(t, fmt.Sprintf(src, 60))
	for _, w := range warnings {
		if w.Key == "context_compaction.prepare_percent" && strings.Contains(w.Message, "m-200k") {
			t.Errorf("60 %% is below m-200k's threshold, yet: %v", w)
		}
	}
}
