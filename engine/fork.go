package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ctxd/ctxd/checkpoint"
)

// ForkPoint finds, in session parent's log, the newest point a fork of it
// may start from (ForkSession's through) for a request whose first
// messages parent accounted for: at says, of a client_state event's data
// (AppendOptions.ClientState), how many of the request's messages the log
// held there, ok false when none of them. The point reaches past the
// engine's own events that follow that event — a compaction, its
// checkpoint, a context-edit pass, a ledger entry — up to the next message
// or anything a later request wrote, so the fork inherits the checkpoints
// of the shared prefix (docs/design.md §10). It returns the point's seq (0:
// none) and at's answer there. Errors: Events'.
func (e *Engine) ForkPoint(ctx context.Context, parent string, at func(clientState json.RawMessage) (n int, ok bool)) (through uint64, n int, err error) {
	open := false
	err = e.Events(ctx, parent, 1, false, func(ev checkpoint.Event) error {
		switch ev.Kind {
		case checkpoint.KindClientState:
			open = false
			if k, ok := at(ev.Data); ok {
				through, n, open = ev.Seq, k, true
			}
		case checkpoint.KindCheckpoint, checkpoint.KindCompactionStarted, checkpoint.KindCompactionFailed,
			checkpoint.KindCircuitOpen, checkpoint.KindContextEdit, checkpoint.KindPrefixReset,
			checkpoint.KindDiagnostic, checkpoint.KindLedger, checkpoint.KindUsage:
			// What the engine writes after a request's append, before
			// the next one.
			if open {
				through = ev.Seq
			}
		default:
			open = false
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	return through, n, nil
}

// ForkSession creates session p as a branch of session parent that
// inherits parent's log through seq through (docs/design.md §10: a client
// that rewrote its history forks where it still agrees with the branch it
// leaves): the new session starts with the same events at the same seqs —
// its messages, checkpoints, offloads, context-edit passes — so the shared
// prefix is not compacted again and its summaries are the parent's. The
// parent's savings-ledger entries are kept as imported events (they are
// the parent's, never counted twice); idempotency keys are not inherited.
// The session then goes on as any other: messages appended after through
// are its own. through ≥ 1 and at most parent's last seq. Errors:
// CreateSession's; ErrNotFound (parent); ErrInvalid (*FieldError
// "fork_through": through out of range); the log's errors while copying,
// after which the new session is deleted again.
func (e *Engine) ForkSession(ctx context.Context, p CreateParams, parent string, through uint64) (Info, error) {
	if err := validID(parent); err != nil {
		return Info{}, err
	}
	last, err := e.opts.Log.LastSeq(ctx, parent)
	if err != nil {
		return Info{}, mapLogErr(parent, err)
	}
	if through == 0 || through > last {
		return Info{}, invalidField("fork_through", "seq %d is not an event of session %q (1 to %d)", through, parent, last)
	}
	p.Staged = false // its log is written at once, below
	in, err := e.CreateSession(ctx, p)
	if err != nil {
		return Info{}, err
	}
	// Nobody knows the new id yet: drop the empty copy CreateSession
	// loaded, fill its log, and load it from there.
	e.forget(in.ID)
	if err := e.copyLog(ctx, parent, in.ID, through); err != nil {
		if derr := e.opts.Log.DeleteSession(context.WithoutCancel(ctx), in.ID); derr != nil {
			e.opts.Logger.Warn("fork: the half-copied session was not deleted", "session", in.ID, "err", derr)
		}
		return Info{}, fmt.Errorf("forking session %q from %q at seq %d: %w", in.ID, parent, through, mapLogErr(in.ID, err))
	}
	out, err := e.Session(ctx, in.ID)
	if err != nil {
		return Info{}, err
	}
	out.Warnings = in.Warnings
	return out, nil
}

// inheritedEvent is the Data of the imported event a fork stores in place
// of a parent's event that belongs to the parent only (its ledger).
type inheritedEvent struct {
	From string          `json:"inherited_from"`
	Kind checkpoint.Kind `json:"kind"`
	Data json.RawMessage `json:"data,omitempty"`
}

// forkBatch bounds the events of one append while copying a log.
const forkBatch = 128

// copyLog appends session from's events 1..through to the empty session
// to, in order and at the same seqs: checkpoints through PutCheckpoint,
// the rest in batches.
func (e *Engine) copyLog(ctx context.Context, from, to string, through uint64) error {
	var batch []checkpoint.Event
	flush := func() error {
		err := e.appendSplit(ctx, to, batch)
		batch = batch[:0]
		return err
	}
	errDone := errors.New("done")
	err := e.opts.Log.Range(ctx, from, 1, func(ev checkpoint.Event) error {
		if ev.Seq > through {
			return errDone
		}
		if ev.Kind == checkpoint.KindCheckpoint {
			if err := flush(); err != nil {
				return err
			}
			cp, err := e.opts.Log.GetCheckpoint(ctx, from, ev.Seq)
			if err != nil {
				return err
			}
			cp.Seq = 0
			got, err := e.opts.Log.PutCheckpoint(ctx, to, cp)
			if err != nil {
				return err
			}
			if got.Seq != ev.Seq {
				return fmt.Errorf("%w: the checkpoint of seq %d was copied to seq %d", checkpoint.ErrCorrupt, ev.Seq, got.Seq)
			}
			return nil
		}
		seq := ev.Seq
		ev.Seq, ev.Idempotency = 0, nil
		if ev.Message != nil {
			m := *ev.Message
			m.Seq = 0
			ev.Message = &m
		}
		if ev.Kind == checkpoint.KindLedger {
			d, _ := json.Marshal(inheritedEvent{From: from, Kind: ev.Kind, Data: ev.Data})
			ev.Kind, ev.Data = checkpoint.KindImported, d
		}
		batch = append(batch, ev)
		if len(batch) >= forkBatch {
			if err := flush(); err != nil {
				return fmt.Errorf("copying events up to seq %d: %w", seq, err)
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, errDone) {
		return err
	}
	if err := flush(); err != nil {
		return err
	}
	if last, err := e.opts.Log.LastSeq(ctx, to); err != nil || last != through {
		return fmt.Errorf("%w: the copy ends at seq %d, not %d (%v)", checkpoint.ErrCorrupt, last, through, err)
	}
	return nil
}

// appendSplit appends events, halving a batch the log finds too large for
// one transaction.
func (e *Engine) appendSplit(ctx context.Context, id string, events []checkpoint.Event) error {
	if len(events) == 0 {
		return nil
	}
	_, err := e.opts.Log.Append(ctx, id, events)
	if errors.Is(err, checkpoint.ErrTooLarge) && len(events) > 1 {
		h := len(events) / 2
		if err := e.appendSplit(ctx, id, events[:h]); err != nil {
			return err
		}
		return e.appendSplit(ctx, id, events[h:])
	}
	return err
}
