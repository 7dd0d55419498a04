package engine

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/trigger"
)

// Overflow is what a provider's context-length refusal of a session's
// request said (wire/anthropic.ContextLengthFigures,
// wire/openai.ContextLengthFigures).
type Overflow struct {
	// Count is the provider's count of the refused request's input, in
	// tokens; 0 when its error gave none.
	Count uint64
	// Limit is the window it named (for the input), in tokens; 0 when
	// none.
	Limit uint64
}

// ObserveOverflow records what a provider's refusal of the session's
// newest request as too long said (docs/design.md §10 overflow recovery): a
// window it names that is smaller than the session's (or the session's
// unknown one) becomes the session's (WindowLearned, its threshold with
// it) — when it names none, the largest request the provider accepted
// (reported usage) does; its count of the request — ctxd's estimate of the same context
// being what it assembles now — corrects the session's estimate at once
// (the estimate starts from that count until the next reported usage). Both are
// stored with the session, with a diagnostic event
// "overflow_observed", in one write, and kept across restarts. It
// returns the session's Info after. Errors: ErrNotFound, the log's.
func (e *Engine) ObserveOverflow(ctx context.Context, id string, o Overflow) (Info, error) {
	s, err := e.lock(ctx, id)
	if err != nil {
		return Info{}, err
	}
	defer s.mu.Unlock()
	e.refresh(s)
	var extra sessionExtra
	if len(s.meta.Extra) > 0 {
		_ = json.Unmarshal(s.meta.Extra, &extra)
	}
	l := learnedWindow{}
	if extra.Learned != nil {
		l = *extra.Learned
	}
	var said []string
	switch {
	case o.Limit >= MinContextLimit && o.Limit <= MaxContextLimit && (s.win.source == WindowUnknown || o.Limit < s.limit):
		l.Limit, l.Accepted = o.Limit, false
		said = append(said, fmt.Sprintf("the provider's window is %d tokens (the session's was %s)", o.Limit, windowText(s.shownLimit(), s.win.source)))
	case o.Limit == 0 && s.maxAccepted >= MinContextLimit && s.maxAccepted <= MaxContextLimit && (s.win.source == WindowUnknown || s.maxAccepted < s.limit):
		// The refusal names no window (the Responses API's): the largest
		// request the provider accepted is one it has.
		l.Limit, l.Accepted = s.maxAccepted, true
		said = append(said, fmt.Sprintf("the provider names no window; the largest request it accepted, %d tokens, is taken as it (the session's was %s)", s.maxAccepted, windowText(s.shownLimit(), s.win.source)))
	}
	if raw := s.rawTokens(); plausibleCount(o.Count, raw) {
		before, _ := s.estimate()
		l.Count, l.Raw, l.Seq = o.Count, s.rawTokens(), s.lastMsg
		said = append(said, fmt.Sprintf("the provider counted %d tokens where ctxd estimated %d: the estimate starts from its count", o.Count, before))
	}
	if len(said) == 0 {
		return e.info(s), nil
	}
	extra.Learned = &l
	meta := s.meta
	meta.Extra, _ = json.Marshal(extra)
	probe := &session{id: id, meta: meta, sessionState: sessionState{state: s.state}}
	if err := e.configure(probe); err != nil {
		return Info{}, err
	}
	msg := "overflow: "
	for i, x := range said {
		if i > 0 {
			msg += "; "
		}
		msg += x
	}
	d, _ := json.Marshal(map[string]any{"level": api.DiagLevelInfo, "code": api.DiagOverflowObserved, "message": msg,
		"provider_count": o.Count, "provider_limit": o.Limit})
	first, err := e.opts.Log.PutMeta(ctx, id, meta, checkpoint.Event{Kind: checkpoint.KindDiagnostic, Data: d})
	if err != nil {
		return Info{}, mapLogErr(id, err)
	}
	s.meta = meta
	s.lastSeq = max(s.lastSeq, first)
	if err := e.configure(s); err != nil {
		return Info{}, err
	}
	if l.Count > 0 && l.Seq == s.lastMsg {
		s.anchor, s.anchorRaw, s.anchorSeq = l.Count, l.Raw, l.Seq
		// The refused request is the newest count: the usage-based
		// estimate gives way to it.
		s.usage = nil
		s.sinceUsage, s.editedSinceUsage = 0, 0
	}
	e.log.Info("overflow observed", "session", id, "message", msg)
	e.saveRow(s)
	return e.info(s), nil
}

// CompactDeeper is an overflow compaction that retains no message: the
// summary and the requests carried beside it (docs/design.md §5.2), for an
// overflow retry that one overflow compaction left over the window
// (docs/decisions.md "Overflow recovery retries only what fits"). Errors
// as Compact's.
func (e *Engine) CompactDeeper(ctx context.Context, id string) (CompactResult, error) {
	s, err := e.lock(ctx, id)
	if err != nil {
		return CompactResult{}, err
	}
	s.retainNothing = true
	s.mu.Unlock()
	res, err := e.Compact(ctx, id, trigger.Overflow, true)
	if s, lerr := e.lock(context.WithoutCancel(ctx), id); lerr == nil {
		s.retainNothing = false
		s.mu.Unlock()
	}
	return res, err
}
