package engine

import (
	"context"
	"time"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/ledger"
	"github.com/ctxd/ctxd/trigger"
	"github.com/ctxd/ctxd/workers"
)

// Idle compaction timed to the prompt cache (docs/design.md §5.1): the
// provider keeps a request's cached prefix for the lifetime it asked for
// (Anthropic: 5 minutes, 1 hour with "ttl": "1h"; OpenAI:
// prompt_cache_retention), refreshed by every request that reads it. A
// session idle until IdleLead before that lifetime ends pays, at its next
// request, a cache write of its whole context; compacting it before the
// cache lapses lets the summarizer read the history from the cache (0.1×
// the input price) and the next request write only the summary and the
// tail (1.25×). CompactIdle queues that compaction where it pays back.

// Cache lifetimes (docs/design.md §5.1).
const (
	// CacheTTLDefault is the prompt cache's lifetime when the request
	// asked for none: Anthropic's 5 minutes, OpenAI's in-memory retention.
	CacheTTLDefault = 5 * time.Minute
	// CacheTTLLong is Anthropic's 1-hour lifetime ("ttl": "1h").
	CacheTTLLong = time.Hour
	// IdleLead is how long before the cache lapses a session becomes due
	// for an idle compaction: time for the summarizer's request to reach
	// the cache while it lives (a sweep every IdleSweepInterval finds it).
	IdleLead = 90 * time.Second
	// IdleSweepInterval is how often the daemon looks for idle sessions
	// (RunIdle).
	IdleSweepInterval = 15 * time.Second
)

// Relative prices of the cache model idle compaction weighs, per input
// token (docs/performance.md): a cache read costs 0.1×, a cache write
// 1.25×; an output token, when the model has no price, 5×.
const (
	cacheReadFactor     = 0.1
	cacheWriteFactor    = 1.25
	defaultOutputFactor = 5.0
)

// IdleCompaction is one idle compaction CompactIdle queued.
type IdleCompaction struct {
	Session string `json:"session"`
	// Tokens is the context when it was queued, and ExpectedAfter the
	// estimate after it, in tokens.
	Tokens        uint64 `json:"tokens"`
	ExpectedAfter uint64 `json:"expected_after"`
	// PaybackTokens is the expected payback in input-token equivalents
	// (the next request's full cache write it spares, less the
	// compaction's summarizer call and the write of the new context).
	PaybackTokens int64 `json:"payback_tokens"`
	// CacheExpires is when the session's prompt cache lapses.
	CacheExpires time.Time `json:"cache_expires"`
}

// idlePlan is the summarizer-side estimate an idle compaction was queued
// with, in input-token equivalents, for its ledger entry.
type idlePlan struct {
	summarizerTokens float64
	ttl              time.Duration
}

// noteRequest records that the session's provider request was just
// answered with usage u at now: its prompt cache lives from now for the
// lifetime the request asked for. Called with s.mu held.
func (e *Engine) noteRequest(s *session, u *history.Usage, now time.Time) {
	s.cacheAt = now
	switch {
	case u != nil && u.CacheCreation1hInputTokens > 0:
		s.cacheTTL = CacheTTLLong
	case s.cacheTTL == 0:
		s.cacheTTL = CacheTTLDefault
	}
}

// idleEnabled reports whether idle compaction is on for the session:
// context_compaction.idle "on"; "auto" unless its summarizer is paid by
// the client's credential. Called with s.mu held.
func (e *Engine) idleEnabled(s *session) bool {
	switch s.cfg.ContextCompaction.Idle {
	case config.IdleOn:
		return true
	case config.IdleOff:
		return false
	}
	return !e.clientPays(s)
}

// idleDue returns the idle compaction of the session due at now, ok false
// when none: the cache lapses within IdleLead and has not yet; idle
// compaction is on and automatic compaction could run; the context is at
// or above the derived prepare mark and a compaction would replace
// something; and the next request's full cache write would cost more than
// the compaction. Called with s.mu held.
func (e *Engine) idleDue(s *session, now time.Time) (IdleCompaction, idlePlan, bool) {
	var ic IdleCompaction
	var plan idlePlan
	if s.cacheAt.IsZero() || s.idleDone.Equal(s.cacheAt) || s.limit == 0 {
		return ic, plan, false
	}
	ttl := s.cacheTTL
	if ttl == 0 {
		ttl = CacheTTLDefault
	}
	expires := s.cacheAt.Add(ttl)
	if now.Before(expires.Add(-IdleLead)) || !now.Before(expires) {
		return ic, plan, false
	}
	if !s.cfg.ContextCompaction.Auto || s.circuitOpen || s.compacting || s.openRound() ||
		s.shape == trigger.ShapeServer || !s.newGroupSinceCheckpoint() || !e.idleEnabled(s) {
		return ic, plan, false
	}
	tokens, _ := s.estimate()
	if floor := (config.ContextCompaction{}).PrepareMark(s.limit, s.threshold); floor == 0 || tokens < floor {
		return ic, plan, false
	}
	if e.nothingToCompact(s, trigger.Idle) != "" {
		return ic, plan, false
	}
	// What the compaction leaves: the fixed prefix, the summary, at most
	// the retention budget of recent messages and what a prepared summary
	// leaves after it.
	summary := s.cfg.Compaction.ExtractiveSummaryBytes / 4
	if p := e.usablePrepared(s); p != nil {
		summary = e.est.Message(preparedMessage(p))
	}
	target := e.retentionTarget(s, s.shape, summary)
	after := e.fixedPrefix(s) + s.calibrate(summary) + min(target, tokens)
	if after >= tokens {
		return ic, plan, false
	}
	plan = idlePlan{summarizerTokens: e.idleSummarizerCost(s, tokens, summary), ttl: ttl}
	payback := float64(tokens)*cacheWriteFactor - plan.summarizerTokens - float64(after)*cacheWriteFactor
	if payback <= 0 {
		return ic, plan, false
	}
	return IdleCompaction{Session: s.id, Tokens: tokens, ExpectedAfter: after, PaybackTokens: int64(payback), CacheExpires: expires}, plan, true
}

// idleSummarizerCost is the expected cost of the session's summarizer
// call over a context of tokens with a summary of summary tokens, in
// input-token equivalents: nothing when a prepared summary is installed
// or the summarizer is the embedded extractive one; else the history read
// from the cache and the summary written as output. Called with s.mu held.
func (e *Engine) idleSummarizerCost(s *session, tokens, summary uint64) float64 {
	if e.usablePrepared(s) != nil {
		return 0
	}
	bindings, _, _ := e.sessionBindings(s)
	if len(bindings) == 0 || bindings[0].Provider == config.ProviderExtractive {
		return 0
	}
	out := defaultOutputFactor
	if p, ok := ledger.PriceOf(e.Config(), bindings[0].Model); ok && p.Input > 0 {
		out = p.Output / p.Input
	}
	return float64(tokens)*cacheReadFactor + float64(summary)*out
}

// CompactIdle queues an idle compaction of every loaded session due at
// the engine's clock (Options.Now; docs/design.md §5.1 "Timed to the
// prompt cache") as background work, at most one per cache lifetime of a
// session, and returns what it queued. A session's next request reads the
// result; the compaction's ledger entry (ledger.KindIdle) shows its
// expected payback.
func (e *Engine) CompactIdle(ctx context.Context) []IdleCompaction {
	now := e.opts.Now()
	e.mu.Lock()
	list := make([]*session, 0, len(e.sessions))
	for _, s := range e.sessions {
		list = append(list, s)
	}
	e.mu.Unlock()
	var out []IdleCompaction
	for _, s := range list {
		if ctx.Err() != nil {
			break
		}
		s.mu.Lock()
		if s.evicted {
			s.mu.Unlock()
			continue
		}
		e.refresh(s)
		ic, plan, ok := e.idleDue(s, now)
		if ok && e.opts.Pool.Active(s.id) == nil {
			s.idleDone = s.cacheAt
			if _, err := e.submit(s.id, trigger.Idle, workers.Background); err != nil {
				e.log.Info("idle compaction not queued", "session", s.id, "err", err)
			} else {
				s.idlePlan = &plan
				out = append(out, ic)
			}
		}
		s.mu.Unlock()
	}
	return out
}

// RunIdle runs CompactIdle every interval (IdleSweepInterval when 0)
// until ctx ends; it returns nil then.
func (e *Engine) RunIdle(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		interval = IdleSweepInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			for _, ic := range e.CompactIdle(ctx) {
				e.log.Info("idle compaction queued before the prompt cache lapses", "session", ic.Session,
					"tokens", ic.Tokens, "expected_after", ic.ExpectedAfter, "payback_tokens", ic.PaybackTokens, "cache_expires", ic.CacheExpires)
			}
		}
	}
}

// recordIdle enters an idle compaction's checkpoint in the ledger with
// its expected payback: the next request's full cache write it spares
// (tokens before at 1.25×) less the write of the new context (tokens
// after at 1.25×) and the summarizer call, in input-token equivalents and
// in US dollars at the session model's input price. Called with s.mu held.
func (e *Engine) recordIdle(ctx context.Context, s *session, tokensBefore, tokensAfter uint64) {
	plan := idlePlan{ttl: s.cacheTTL}
	if s.idlePlan != nil {
		plan = *s.idlePlan
		s.idlePlan = nil
	}
	payback := (float64(tokensBefore)-float64(tokensAfter))*cacheWriteFactor - plan.summarizerTokens
	en := ledger.Entry{Kind: ledger.KindIdle, Model: s.meta.Model, TokensBefore: tokensBefore, TokensAfter: tokensAfter,
		CacheTTLSeconds: uint64(plan.ttl / time.Second), PaybackTokens: int64(payback)}
	if p, ok := ledger.PriceOf(e.Config(), s.meta.Model); ok {
		en.Payback = payback * p.Input / 1e6
	}
	if err := e.recordLedgerLocked(context.WithoutCancel(ctx), s, []ledger.Entry{en}); err != nil {
		e.log.Warn("idle compaction not recorded in the ledger", "session", s.id, "err", err)
	}
}
