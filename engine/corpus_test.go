package engine

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/corpustest"
	"github.com/ctxd/ctxd/summarizer"
	"github.com/ctxd/ctxd/transcript"
	"github.com/ctxd/ctxd/trigger"
)

var corpusFiles = []string{
	"claude-code/autocompact-150tools.jsonl",
	"claude-code/v1-167tools-sidechains.jsonl",
	"pi/454tools-2compactions.jsonl",
	"swe-agent/marshmallow-1867.traj.json",
}

// Every corpus session: a forced compaction at several points produces a
// valid history (no orphan results, no unanswered calls) and a summary within
// limits, with the extractive summarizer.
func TestForcedCompactionsOnTheCorpus(t *testing.T) {
	for _, file := range corpusFiles {
		t.Run(file, func(t *testing.T) {
			data := corpustest.Read(t, file)
			tr, err := transcript.Import(bytes.NewReader(data), transcript.Options{})
			if err != nil {
				t.Fatal(err)
			}
			tr.CloseAbandoned()
			cfg := testConfig()
			cfg.ContextCompaction.Auto = false // only the forced compactions
			// A budget the small sessions exceed too, so every compaction
			// both summarizes and retains.
			cfg.ContextCompaction.KeepRecentTokens = 2000
			h := newHarness(t, cfg, "")
			h.create("s", 200000)

			points := map[int]bool{len(tr.Messages) / 3: true, 2 * len(tr.Messages) / 3: true, len(tr.Messages) - 1: true}
			pending := 0 // points passed during an open round, compacted at its end
			compactions := 0
			state := &history.State{}
			var firstReq, lastReq *history.Message
			for i, m := range tr.Messages {
				ar := h.append("s", m)
				for _, st := range ar.Messages {
					if st.Role == history.RoleUser {
						c := st
						lastReq = &c
						if firstReq == nil {
							firstReq = &c
						}
					}
				}
				state.Apply(m)
				if points[i] {
					pending++
				}
				if pending == 0 || len(state.Open()) > 0 {
					continue
				}
				pending = 0
				res, err := h.e.Compact(context.Background(), "s", trigger.Manual, true)
				if err != nil {
					t.Fatalf("compaction after message %d: %v", i, err)
				}
				compactions++
				cp := res.Checkpoint
				if cp.SummaryBytes == 0 || cp.SummaryBytes > cfg.ContextCompaction.MaxSummaryBytes {
					t.Fatalf("summary of %d bytes", cp.SummaryBytes)
				}
				full, err := h.e.opts.Log.GetCheckpoint(context.Background(), "s", cp.Seq)
				if err != nil {
					t.Fatal(err)
				}
				for _, heading := range summarizer.Headings() {
					if !strings.Contains(full.Summary, heading) {
						t.Fatalf("summary lacks the heading %q", heading)
					}
				}
				a := h.context("s")
				checkValid(t, a.Messages)
				// The current request survives, verbatim (or bounded when it
				// alone cannot fit), and so does the first (docs/design.md §5.2).
				for _, req := range []*history.Message{lastReq, firstReq} {
					if req != nil && containsMessage(t, a.Messages, *req) < 0 && !carriedBounded(a.Messages, req.Seq) {
						t.Fatalf("compaction after message %d: request seq %d is not in the context", i, req.Seq)
					}
				}
				// A history smaller than keep_recent_tokens is retained whole
				// (docs/design.md §5.2), so only a larger one must shrink.
				if cp.TokensBefore > 4*cfg.ContextCompaction.KeepRecentTokens && cp.TokensAfter >= cp.TokensBefore {
					t.Fatalf("compaction after message %d: tokens %d → %d", i, cp.TokensBefore, cp.TokensAfter)
				}
			}
			if compactions < 2 {
				t.Fatalf("only %d compactions ran", compactions)
			}
			t.Logf("%s: %d messages, %d compactions", file, len(tr.Messages), compactions)
		})
	}
}

// Forced compactions at every position of each corpus session (every
// position where one may run, thinned to about 25 per session and shape),
// in the shapes simple and keep-tail, on the session's own model when the
// catalog binds its thinking: every context the engine returns, and every
// one after each later append, satisfies the provider rules
// (history.CheckRequest, docs/design.md §4a) — the engine withholds any that
// does not, so h.context fails the test.
func TestForcedCompactionAtEveryPositionOnTheCorpus(t *testing.T) {
	files := append(append([]string(nil), corpusFiles...),
		"recorded/pi/pi0.73.1-anthropic-1compaction.jsonl",
		"recorded/claude-code/cc2.1.197-two-turns.jsonl",
		"recorded/codex/cli0.171-function-tools.rollout.jsonl")
	for _, file := range files {
		for _, shape := range []string{trigger.ShapeSimple, trigger.ShapeKeepTail} {
			t.Run(file+"/"+shape, func(t *testing.T) {
				data := corpustest.Read(t, file)
				tr, err := transcript.Import(bytes.NewReader(data), transcript.Options{})
				if err != nil {
					t.Fatal(err)
				}
				tr.CloseAbandoned()
				cfg := testConfig()
				cfg.ContextCompaction.Auto = false
				cfg.ContextCompaction.KeepRecentTokens = 2000
				cfg.Compaction.Shape = shape
				h := newHarness(t, cfg, "")
				model := "test-model"
				if strings.HasPrefix(tr.Model, "claude") || tr.Format == "pi" && hasThinking(tr.Messages) {
					model = thinkingModel
				}
				if _, err := h.e.CreateSession(context.Background(), CreateParams{ID: "s", Model: model, ContextLimit: 200000}); err != nil {
					t.Fatal(err)
				}
				step := max(1, len(tr.Messages)/25)
				state := &history.State{}
				compactions, due := 0, 0
				for i, m := range tr.Messages {
					h.append("s", m)
					state.Apply(m)
					a := h.context("s")
					if vs := history.CheckRequest(history.Sendable(a.Messages), a.Rules); len(vs) > 0 {
						t.Fatalf("after message %d: %v", i, vs)
					}
					if i%step == 0 {
						due++
					}
					if due == 0 || len(state.Open()) > 0 {
						continue
					}
					due = 0
					_, err := h.e.Compact(context.Background(), "s", trigger.Manual, true)
					if errors.Is(err, ErrNothingToCompact) {
						continue
					}
					if err != nil {
						t.Fatalf("compaction after message %d: %v", i, err)
					}
					compactions++
					a = h.context("s")
					if vs := history.CheckRequest(history.Sendable(a.Messages), a.Rules); len(vs) > 0 {
						t.Fatalf("compaction after message %d: %v", i, vs)
					}
				}
				if compactions == 0 {
					t.Fatal("no compaction ran")
				}
				t.Logf("%s (%s, %s): %d messages, %d compactions", file, model, shape, len(tr.Messages), compactions)
			})
		}
	}
}

func hasThinking(msgs []history.Message) bool {
	for _, m := range msgs {
		for _, b := range m.Content {
			if b.Type == history.BlockThinking || b.Type == history.BlockRedactedThinking {
				return true
			}
		}
	}
	return false
}

// carriedBounded reports whether msgs carries the request with seq in its
// bounded form (head and tail with the artifact URI).
func carriedBounded(msgs []history.Message, seq uint64) bool {
	for _, m := range msgs {
		if m.Seq == seq && len(m.Content) == 1 && strings.HasPrefix(m.Content[0].Text, "[ctxd kept the ") {
			return true
		}
	}
	return false
}
