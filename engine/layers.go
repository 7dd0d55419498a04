package engine

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/contextedit"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/offload"
)

// offloadMessages runs layer 1 (docs/design.md §6 "Offload") over the messages of
// an append: each oversized tool result is stored whole and replaced by its
// stub. It returns the messages to store and, for each offloaded one, its
// offload event, keyed by index. A failed write leaves the result whole and
// its event is an offload_failed one (counted by Metrics.OffloadFailed).
// Called with s.mu held, before the messages are stored: the artifact and
// file exist before any event refers to them. For a staged append (st
// set) the file is written but not synced and the artifact not stored:
// both are made durable by the staged write, before its events
// (offload.Offloader.Stage, Staged.Commit).
func (e *Engine) offloadMessages(ctx context.Context, s *session, msgs []history.Message, st *Staged) ([]history.Message, map[int]checkpoint.Event) {
	type tried struct {
		m       history.Message
		rec     *offload.Record
		fail    *offload.Failure
		pending *offload.Pending
	}
	var tools []int
	for i := range msgs {
		if msgs[i].Role == history.RoleTool {
			tools = append(tools, i)
		}
	}
	// Each write waits for its file to be durable: the results of one
	// append (a whole conversation the proxy sees for the first time has
	// dozens) are written side by side, so their waits overlap.
	res := make([]tried, len(tools))
	try := func(k int) {
		r := &res[k]
		if st != nil {
			r.m, r.rec, r.fail, r.pending = s.offloader.Stage(ctx, s.id, msgs[tools[k]])
		} else {
			r.m, r.rec, r.fail = s.offloader.Try(ctx, s.id, msgs[tools[k]])
		}
	}
	if len(tools) == 1 {
		try(0)
	} else {
		var wg sync.WaitGroup
		sem := make(chan struct{}, offloadWriters)
		for k := range tools {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				try(k)
			}()
		}
		wg.Wait()
	}
	var events map[int]checkpoint.Event
	for k, i := range tools {
		m, rec, fail := res[k].m, res[k].rec, res[k].fail
		if fail != nil {
			// The result stays whole; say so in the log and the append's
			// response (docs/design.md §6 "A failed write … says so").
			e.metrics.OffloadFailed()
			if d, err := json.Marshal(fail); err == nil {
				if events == nil {
					events = map[int]checkpoint.Event{}
				}
				events[i] = checkpoint.Event{Kind: checkpoint.KindOffloadFailed, Data: d}
			}
			continue
		}
		if rec == nil {
			continue
		}
		d, err := json.Marshal(rec)
		if err != nil {
			continue
		}
		msgs[i] = m
		if p := res[k].pending; p != nil {
			st.pending = append(st.pending, p)
		}
		if events == nil {
			events = map[int]checkpoint.Event{}
		}
		events[i] = checkpoint.Event{Kind: checkpoint.KindOffload, Data: d}
	}
	return msgs, events
}

// offloadWriters bounds the offload writes of one append made at once.
const offloadWriters = 8

// planPass runs layer 2 (docs/design.md §6 "Context editing", mode local) after an
// append: when a pass fires it is recorded in the log — after a staged
// append, joined to its events (appendLog) — then applied. It returns the
// events it wrote, with their seqs. Called with s.mu held.
func (e *Engine) planPass(ctx context.Context, s *session) []checkpoint.Event {
	if s.editMode != contextedit.ModeLocal || s.inThinkingLoop() {
		// A pass inside an open tool loop of a thinking-bound model waits
		// for the loop's end (docs/design.md §4a).
		return nil
	}
	// A pass needs raw tool-result text over the limit and eliding the
	// eligible results (not elided, older than keep_recent_turns, long
	// enough, tool not protected) to save at least min_chars_per_pass
	// (docs/design.md §6). Both sums come from counts made once at append,
	// so the common case — no pass — costs no re-counting of the history's
	// text on every append; contextedit.PlanPaths decides exactly.
	cfg := s.cfg.ContextEditing
	var raw, saving uint64
	for _, en := range s.active {
		raw += en.chars
		if cfg.ClearToolInputs {
			for _, c := range en.inputs {
				r, _, _ := contextedit.InputSaving(cfg, nil, c.id, c.name, c.chars, true)
				raw += r
			}
		}
	}
	if raw <= cfg.MaxTotalToolResultChars {
		return nil
	}
	for _, en := range s.active {
		recent := en.turn+cfg.KeepRecentTurns > s.assistants
		if cfg.ClearToolInputs {
			for _, c := range en.inputs {
				_, saved, _ := contextedit.InputSaving(cfg, &s.ledger, c.id, c.name, c.chars, recent)
				saving += saved
			}
		}
		if en.msg.Role != history.RoleTool {
			continue
		}
		saving += contextedit.ResultSaving(cfg, &s.ledger, en.msg, en.chars, en.tool, recent, s.offloads[en.msg.ToolCallID])
	}
	if saving < cfg.MinCharsPerPass {
		return nil
	}
	active := make([]history.Message, len(s.active))
	for i, en := range s.active {
		active[i] = en.msg
	}
	p := contextedit.PlanPaths(s.cfg.ContextEditing, active, &s.ledger, s.model.ThinkingBinding, func(id string) string { return s.offloads[id] })
	if p == nil {
		return nil
	}
	// Cache cost against savings (docs/design.md §4): a pass that would
	// not pay for its rewrite before the next compaction is deferred; the
	// next append weighs it again.
	w := e.weighPass(s, *p)
	if !w.PaysBack() {
		s.deferredPasses++
		s.lastDeferred = w
		return nil
	}
	p.Weighed = &w
	d, err := json.Marshal(p)
	if err != nil {
		return nil
	}
	events := []checkpoint.Event{{Kind: checkpoint.KindContextEdit, Data: d}}
	if s.model.ThinkingBinding && e.thinkingBefore(s, p.WithheldThinkingBefore) {
		// One event saying the rewrite stopped the replay of earlier
		// thinking (docs/design.md §4).
		r, _ := json.Marshal(prefixReset{Cause: "context_edit", WithheldBefore: p.WithheldThinkingBefore})
		events = append(events, checkpoint.Event{Kind: checkpoint.KindPrefixReset, Data: r})
	}
	seq, err := e.appendLog(ctx, s, events)
	if err != nil {
		// Not recorded, so not applied: the next append plans it again.
		e.log.Warn("recording a context-edit pass", "session", s.id, "err", err)
		return nil
	}
	s.lastSeq = seq + uint64(len(events)) - 1
	s.applyPass(*p)
	for i := range events {
		events[i].Seq = seq + uint64(i)
	}
	return events
}

// weighPass is what p would cost and save (docs/design.md §4), read on a
// copy of the ledger with p applied: the tokens from the first message it
// changes on (the next request writes them to the cache again), the
// tokens every later request no longer sends, and the requests expected
// before the next compaction rewrites the context anyway — what is left
// under the threshold after the pass, over the session's average growth
// per answer (0 when the window is unknown). Called with s.mu held.
func (e *Engine) weighPass(s *session, p contextedit.Pass) contextedit.Weighing {
	orig := s.ledger
	s.ledger = orig.Clone()
	s.ledger.Apply(p)
	var w contextedit.Weighing
	var before, after, answers uint64
	for i := range s.active {
		t := s.sentTokens(s.active[i].msg)
		before += s.active[i].tokens
		after += t
		if w.RewrittenTokens > 0 || t != s.active[i].tokens {
			w.RewrittenTokens += t
		}
		if s.active[i].msg.Role == history.RoleAssistant {
			answers++
		}
	}
	s.ledger = orig
	if before > after {
		w.SavedTokens = before - after
	}
	if s.threshold == 0 {
		return w
	}
	tokens, _ := s.estimate()
	left := uint64(0)
	if tokens < w.SavedTokens+s.threshold {
		left = s.threshold + w.SavedTokens - tokens
	}
	growth := max(after/max(answers, 1), 1)
	w.Requests = max(left/growth, 1)
	return w
}

// thinkingBefore reports whether an active assistant message before seq
// carries thinking that is still replayed.
func (e *Engine) thinkingBefore(s *session, seq uint64) bool {
	for _, en := range s.active {
		if en.msg.Seq >= seq {
			break
		}
		if en.msg.Seq >= s.ledger.WithheldThinkingBefore() && en.msg.Role == history.RoleAssistant && contextedit.HasThinking(en.msg) {
			return true
		}
	}
	return false
}
