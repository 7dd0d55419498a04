package engine

import (
	"bytes"
	"context"
	"testing"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/corpustest"
	"github.com/ctxd/ctxd/transcript"
	"github.com/ctxd/ctxd/trigger"
)

// The current request is the newest prompt a person wrote and the first
// request the first task a person gave (docs/design.md §5.2), on the three
// agents' real recordings: Claude Code's second turn followed by its
// reminder-only user text and a system message, Codex's
// <environment_context> item before the task, and pi's task. After a
// manual compaction both are carried verbatim, never the reminder, the
// system message or the environment item.
func TestRequestsArePersonPrompts(t *testing.T) {
	reminder := history.Message{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: "<system-reminder>\nThe task tools haven't been used recently.\n</system-reminder>"}}}
	system := history.Message{Role: history.RoleSystem, Content: []history.Block{{Type: history.BlockText, Text: "<system-reminder>agents: Explore, Plan</system-reminder>"}}}
	for _, tc := range []struct {
		file, first, current string
		extra                []history.Message
	}{
		{"recorded/claude-code/cc2.1.197-two-turns.jsonl", "Run seq 1 30000, then read notes.txt, then run wc -l notes.txt and report.", "Now do it all again.", []history.Message{reminder, system}},
		{"recorded/codex/cli0.171-function-tools.rollout.jsonl", "Run seq 1 30000, then read notes.txt, then run wc -l notes.txt and report.", "Run seq 1 30000, then read notes.txt, then run wc -l notes.txt and report.", nil},
		{"recorded/pi/pi0.73.1-anthropic-1compaction.jsonl", "Run seq 1 30000, then read notes.txt, then run wc -l notes.txt and report.", "Run seq 1 30000, then read notes.txt, then run wc -l notes.txt and report.", []history.Message{reminder}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			tr, err := transcript.Import(bytes.NewReader(corpustest.Read(t, tc.file)), transcript.Options{})
			if err != nil {
				t.Fatal(err)
			}
			msgs, _ := history.CloseAbandoned(nil, tr.Messages)
			if tc.file == "recorded/codex/cli0.171-function-tools.rollout.jsonl" && !history.InjectedText(msgs[0].Content[0].Text) {
				t.Fatalf("the recording no longer opens with Codex's environment item: %.80q", msgs[0].Content[0].Text)
			}
			cfg := testConfig()
			cfg.ContextCompaction.KeepRecentTokens = 0 // the requests are all that is kept
			h := newHarness(t, cfg, "")
			h.create("s", 200000)
			h.append("s", append(msgs, tc.extra...)...)
			if _, err := h.e.Compact(context.Background(), "s", trigger.Manual, true); err != nil {
				t.Fatal(err)
			}
			a := h.context("s")
			texts := map[string]bool{}
			var injected []string
			for _, m := range a.Messages {
				if m.Role == history.RoleUser && len(m.Content) == 1 {
					texts[m.Content[0].Text] = true
					if history.InjectedText(m.Content[0].Text) && m.Content[0].Text != reminder.Content[0].Text {
						injected = append(injected, m.Content[0].Text)
					}
				}
			}
			if !a.Compacted && len(h.events("s", "checkpoint")) == 0 {
				t.Fatalf("no checkpoint: %s", a.Diagnostic)
			}
			for _, want := range []string{tc.first, tc.current} {
				if !texts[want] {
					t.Errorf("%q is not carried after the compaction", want)
				}
			}
			for _, s := range injected {
				if len(s) > 60 {
					s = s[:60]
				}
				t.Errorf("an injected text is carried as a request: %q", s)
			}
		})
	}
}
