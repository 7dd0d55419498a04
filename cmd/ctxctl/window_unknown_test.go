package main

import (
	"strings"
	"testing"

	"github.com/ctxd/ctxd/api"
)

// A session whose window is unknown has no threshold yet: its token and
// check lines say so instead of showing "of threshold 0" or a placeholder.
func TestUnknownWindowLinesShowNoThreshold(t *testing.T) {
	tok := api.Tokens{Value: 1418, Source: api.TokensEstimated}
	if got := tokensLine(tok, 0); strings.Contains(got, "threshold 0") || !strings.Contains(got, "no threshold while the window is unknown") {
		t.Errorf("tokensLine with no threshold: %q", got)
	}
	if got := tokensLine(tok, 140000); !strings.Contains(got, "1418 of threshold 140000 (1%, ") {
		t.Errorf("tokensLine with a threshold: %q", got)
	}
	c := &api.TriggerCheck{Signal: "post_check", Tokens: tok, Reason: "post_check: the window is unknown (configure …); 1418 tokens so far"}
	if got := checkLine(c); strings.Contains(got, "vs threshold") || !strings.Contains(got, "no threshold: did not fire — the window is unknown") {
		t.Errorf("checkLine with no threshold: %q", got)
	}
}

// The speculative line says the prepare mark and idle compaction as the
// daemon reports them.
func TestSpeculativeLine(t *testing.T) {
	if got := speculativeLine(&api.Session{PrepareMark: 120000, IdleCompaction: true}); got != "summary prepared from 120000 tokens; idle compaction on" {
		t.Errorf("on: %q", got)
	}
	if got := speculativeLine(&api.Session{}); got != "summaries not prepared in advance; idle compaction off" {
		t.Errorf("off: %q", got)
	}
}
