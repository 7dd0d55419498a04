package replay

import (
	"context"
	"fmt"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/transcript"
	"github.com/ctxd/ctxd/trigger"
)

// CompactResult is what `ctxctl compact --transcript` reports (docs/cli.md).
type CompactResult struct {
	Format           string `json:"format"`
	Messages         int    `json:"messages"`
	ContextLimit     uint64 `json:"context_limit"`
	Threshold        uint64 `json:"threshold"`
	TokensBefore     uint64 `json:"tokens_before"`
	TokensAfter      uint64 `json:"tokens_after"`
	RetainedMessages int    `json:"retained_messages"`
	SummaryBytes     uint64 `json:"summary_bytes"`
	Binding          string `json:"binding"`
	PrunedRetry      bool   `json:"pruned_retry"`
	Stalled          bool   `json:"stalled"`
	Summary          string `json:"summary"`
	// DataDir is the data directory the compaction ran in: the one given,
	// or a temporary one, removed on return, whose paths (recall files,
	// offloaded results) the summary may name.
	DataDir string `json:"data_dir"`
}

// CompactTranscript loads tr into a session and compacts the whole of it
// once, as `ctxctl compact SESSION` would. Automatic compaction is
// off while loading, so the one compaction covers everything.
// Errors: ErrNoContextLimit, the engine's (a transcript whose last tool call
// has no result cannot be compacted: engine.ErrConflict).
func CompactTranscript(ctx context.Context, tr *transcript.Transcript, opts Options) (*CompactResult, error) {
	cfg := opts.Config
	cfg.ContextCompaction.Auto = false
	env, info, err := openSession(ctx, cfg, tr, opts, nil)
	if err != nil {
		return nil, err
	}
	defer env.Close()
	e := env.Engine
	limit := info.ContextLimit
	// One append per message keeps each within a store transaction.
	for i, m := range tr.Messages {
		m.Seq, m.Tokens = 0, 0
		if _, err := e.Append(ctx, SessionID, []history.Message{m}); err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		if opts.Progress != nil {
			opts.Progress(i+1, len(tr.Messages))
		}
	}
	res, err := e.Compact(ctx, SessionID, trigger.Manual, true)
	if err != nil {
		return nil, err
	}
	cp := res.Checkpoint
	if cp == nil {
		return nil, fmt.Errorf("%w: no checkpoint was written", engine.ErrConflict)
	}
	after, err := e.Context(ctx, SessionID, engine.ContextOptions{NoPreSend: true})
	if err != nil {
		return nil, err
	}
	out := &CompactResult{
		Format: tr.Format, Messages: len(tr.Messages), ContextLimit: limit, Threshold: info.Threshold,
		TokensBefore: cp.TokensBefore, TokensAfter: cp.TokensAfter, SummaryBytes: cp.SummaryBytes,
		Binding: cp.Binding, PrunedRetry: cp.PrunedRetry, Stalled: cp.Stalled, Summary: cp.Summary,
		DataDir: env.Dir(),
	}
	if cp.FirstRetainedSeq > 0 {
		for _, m := range after.Messages {
			if m.Seq >= cp.FirstRetainedSeq && m.Seq <= cp.SnapshotSeq {
				out.RetainedMessages++
			}
		}
	}
	return out, nil
}
