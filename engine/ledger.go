package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/ledger"
	"github.com/ctxd/ctxd/summarizer"
)

// RecordLedger appends entries to the session's savings ledger
// (docs/design.md §10), priced with the current configuration, as ledger
// events of its log: kept across restarts, seen by event streams. Errors:
// ErrInvalid, ErrNotFound, the log's.
func (e *Engine) RecordLedger(ctx context.Context, id string, entries ...ledger.Entry) error {
	if len(entries) == 0 {
		return nil
	}
	s, err := e.lock(ctx, id)
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	return e.recordLedgerLocked(ctx, s, entries)
}

// RecordRequest enters one proxied request in the session's ledger
// (RecordLedger), billed on conv, the cache models of the session's
// requests, which the caller keeps from one request to the next. The
// entry's rewrites (ledger.Observation.Rewrites, read here) are ctxd's recorded
// rewrites after the previous entry's context (conv.Seq) up to this
// request's, assembledAt (the session's last seq when its context was
// assembled; 0: unknown, up to now): a rewrite recorded later — a
// compaction the request set off, ending before its answer is entered —
// is the next request's. It returns the entry, unpriced. Errors: those of
// RecordLedger.
func (e *Engine) RecordRequest(ctx context.Context, id string, conv *ledger.Conversation, o ledger.Observation, assembledAt uint64) (ledger.Entry, error) {
	upTo := assembledAt
	if upTo == 0 {
		upTo = math.MaxUint64
	}
	if conv.Seq > 0 && upTo > conv.Seq {
		o.Rewrites = e.rewritesIn(ctx, id, conv.Seq, upTo)
	}
	en := conv.Entry(o)
	if err := e.RecordLedger(ctx, id, en); err != nil {
		return ledger.Entry{}, err
	}
	if assembledAt > 0 {
		conv.Seq = max(conv.Seq, assembledAt)
	} else if seq, err := e.LastSeq(ctx, id); err == nil {
		conv.Seq = seq
	}
	return en, nil
}

// rewritesIn lists the ledger causes of the session's rewrites after seq
// after and up to seq upTo, each once, in order.
func (e *Engine) rewritesIn(ctx context.Context, id string, after, upTo uint64) []string {
	var out []string
	_ = e.Events(ctx, id, after+1, false, func(ev checkpoint.Event) error {
		if ev.Seq > upTo {
			return errRewritesRead
		}
		if c := ledger.RewriteCause(ev.Kind); c != "" && !slices.Contains(out, c) {
			out = append(out, c)
		}
		return nil
	})
	return out
}

// errRewritesRead stops rewritesIn's read at its bound.
var errRewritesRead = errors.New("rewrites read")

func (e *Engine) recordLedgerLocked(ctx context.Context, s *session, entries []ledger.Entry) error {
	cfg := e.Config()
	events := make([]checkpoint.Event, len(entries))
	for i := range entries {
		en := &entries[i]
		if en.Time.IsZero() {
			en.Time = time.Now().UTC()
		}
		if en.Kind == ledger.KindRequest || en.Kind == ledger.KindSummarizer {
			en.Price(cfg)
		}
		b, err := json.Marshal(en)
		if err != nil {
			return fmt.Errorf("%w: ledger entry: %v", ErrInvalid, err)
		}
		events[i] = checkpoint.Event{Kind: checkpoint.KindLedger, Time: en.Time, Data: b}
	}
	seq, err := e.opts.Log.Append(ctx, s.id, events)
	if err != nil {
		return mapLogErr(s.id, err)
	}
	s.lastSeq = max(s.lastSeq, seq+uint64(len(events))-1)
	for _, en := range entries {
		s.applyLedger(en)
		e.metrics.Ledger(en)
	}
	e.saveRow(s)
	return nil
}

// Ledger returns the session's ledger entries, oldest first, and their
// totals. A read that follows a checkpoint event includes the entries the
// compaction recorded with it (what became of the speculative summary, an
// idle compaction's saving). Errors: ErrInvalid, ErrNotFound, the log's.
func (e *Engine) Ledger(ctx context.Context, id string) ([]ledger.Entry, ledger.Totals, error) {
	e.waitUnlocked(id)
	var out []ledger.Entry
	var t ledger.Totals
	err := e.Events(ctx, id, 1, false, func(ev checkpoint.Event) error {
		if ev.Kind != checkpoint.KindLedger {
			return nil
		}
		var en ledger.Entry
		if err := json.Unmarshal(ev.Data, &en); err != nil {
			return fmt.Errorf("event %d: ledger: %w", ev.Seq, checkpoint.ErrCorrupt)
		}
		out = append(out, en)
		if en.Kind != ledger.KindMode {
			t.Add(en)
		}
		return nil
	})
	return out, t, err
}

// Mode returns the session's own proxy mode (ledger.ModeEnforce or
// ledger.ModeObserve), "" when it has none and the configuration's
// [proxy] mode applies. Errors: ErrInvalid, ErrNotFound.
func (e *Engine) Mode(ctx context.Context, id string) (string, error) {
	s, err := e.lock(ctx, id)
	if err != nil {
		return "", err
	}
	defer s.mu.Unlock()
	return s.mode, nil
}

// SetMode sets the session's own proxy mode: ledger.ModeEnforce,
// ledger.ModeObserve, or "" to follow the configuration again. It is a
// ledger entry of kind mode; setting the mode a session has records
// nothing. Errors: ErrInvalid (naming mode), ErrNotFound, the log's.
func (e *Engine) SetMode(ctx context.Context, id, mode string) error {
	switch mode {
	case "", ledger.ModeEnforce, ledger.ModeObserve:
	default:
		return invalidField("mode", "must be %q, %q or empty (the configuration's [proxy] mode), got %q", ledger.ModeEnforce, ledger.ModeObserve, mode)
	}
	s, err := e.lock(ctx, id)
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	if s.mode == mode {
		return nil
	}
	return e.recordLedgerLocked(ctx, s, []ledger.Entry{{Kind: ledger.KindMode, Mode: mode}})
}

// summarizerEntries are the ledger entries of a compaction's summarizer
// calls: one per attempt that reached a provider, with the usage it
// reported and whose credential paid. mode is the session's mode.
func summarizerEntries(attempts []summarizer.Attempt, bindings []config.Binding, mode string) []ledger.Entry {
	return summarizerEntriesFor(attempts, bindings, mode, "")
}

// summarizerEntriesFor is summarizerEntries with the calls' Purpose.
func summarizerEntriesFor(attempts []summarizer.Attempt, bindings []config.Binding, mode, purpose string) []ledger.Entry {
	var out []ledger.Entry
	for _, at := range attempts {
		if at.Provider == summarizer.ProviderExtractive || (at.Usage == nil && at.Status == 0) {
			continue
		}
		en := ledger.Entry{Kind: ledger.KindSummarizer, Mode: mode, Binding: at.Binding, Provider: at.Provider,
			Credential: ledger.CredentialDaemon, Reported: ledger.FromHistory(at.Usage), Failed: at.Err != nil, Purpose: purpose}
		for _, b := range bindings {
			if b.Name == at.Binding {
				en.Model = b.Model
				if b.Credential != nil {
					en.Credential = ledger.CredentialClient
				}
			}
		}
		out = append(out, en)
	}
	return out
}

// modeOf is the session's mode in effect: its own, else the
// configuration's [proxy] mode for a proxied session, else enforce.
func (e *Engine) modeOf(s *session) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mode != "" {
		return s.mode
	}
	if s.meta.Labels[LabelProxy] != "" && e.Config().Proxy.Mode != "" {
		return e.Config().Proxy.Mode
	}
	return ledger.ModeEnforce
}

// LedgerTotals sums the ledger summaries of every stored session, read
// from their listing rows a page at a time (no session is loaded), and
// counts the sessions that have a ledger. Errors: the log's, ctx's.
func (e *Engine) LedgerTotals(ctx context.Context) (ledger.Summary, int, error) {
	var sum ledger.Summary
	n := 0
	after := ""
	for {
		page, next, err := e.ListSessionPage(ctx, after, MaxListLimit)
		if err != nil {
			return sum, n, err
		}
		for _, in := range page {
			if in.Ledger != nil {
				sum.Add(*in.Ledger)
				n++
			}
		}
		if next == "" {
			return sum, n, nil
		}
		after = next
	}
}

// waitUnlocked waits until nobody in this process holds session id's lock, when
// it is loaded. A compaction writes its checkpoint and the ledger entries
// that follow it under one hold of the lock, so a log read after waitUnlocked
// never sees the checkpoint without them.
func (e *Engine) waitUnlocked(id string) {
	e.mu.Lock()
	s := e.sessions[id]
	e.mu.Unlock()
	if s != nil {
		s.mu.Lock()
		s.mu.Unlock()
	}
}
