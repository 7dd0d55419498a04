package proxy

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/engine"
)

// forkAt is where a request that extends none of its lane's branches
// still agrees with the branch it was forked from: through is the last
// event of the parent's log the new branch inherits (0: none, the branch
// starts empty), at how many of the client's messages those events
// account for.
type forkAt struct {
	through uint64
	at      int
}

// forkPoint finds, in parent's log, the newest point where the parent had
// accounted for exactly the first messages of the request: a client_state
// record whose chain is the request's chain over as many messages (cs),
// and, when the record holds the answer the proxy recorded after them,
// the request resending that answer (the dialect's answerLen: a client
// that touched it still resends it; one that edited a tool input does
// not). The point reaches past the engine's own events that follow it —
// a compaction, its checkpoint, a context-edit pass, a ledger entry — up
// to the next message or anything a later request wrote, so the new
// branch inherits the checkpoints of the shared prefix (docs/design.md
// §10). The zero forkAt when there is none or the log cannot be read.
func (p *Proxy) forkPoint(ctx context.Context, parent *branch, req *request, cs []digest) forkAt {
	var best forkAt
	open := false
	err := p.eng.Events(ctx, parent.id, 1, false, func(ev checkpoint.Event) error {
		switch ev.Kind {
		case checkpoint.KindClientState:
			open = false
			var r record
			if json.Unmarshal(ev.Data, &r) != nil || r.N <= 0 || r.N >= len(cs) || hex.EncodeToString(cs[r.N][:]) != r.Chain {
				return nil
			}
			at := r.N
			if r.Resp != nil {
				k := req.d.AnswerLen(req.messages, r.N, r.Resp.Equal)
				if k == 0 {
					return nil
				}
				at += k
			}
			best, open = forkAt{through: ev.Seq, at: at}, true
		case checkpoint.KindCheckpoint, checkpoint.KindCompactionStarted, checkpoint.KindCompactionFailed,
			checkpoint.KindCircuitOpen, checkpoint.KindContextEdit, checkpoint.KindPrefixReset,
			checkpoint.KindDiagnostic, checkpoint.KindLedger, checkpoint.KindUsage:
			// What the engine writes after a request's append, before
			// the next one.
			if open {
				best.through = ev.Seq
			}
		default:
			open = false
		}
		return nil
	})
	if err != nil {
		p.log.Warn("fork point not found: the branch starts empty", "parent", parent.id, "err", err)
		return forkAt{}
	}
	return best
}

// createBranchSession creates the session of a new branch: a fork of
// parent's log at fork when it has a point (engine.ForkSession), else an
// empty session. A fork the engine cannot make (its log unreadable) falls
// back to an empty session; the fork returned says which was made.
func (p *Proxy) createBranchSession(ctx context.Context, params engine.CreateParams, parent *branch, fork forkAt) (forkAt, error) {
	if parent == nil || fork.through == 0 {
		_, err := p.eng.CreateSession(ctx, params)
		return forkAt{}, err
	}
	forked := params
	forked.Labels = maps.Clone(params.Labels)
	forked.Labels[engine.LabelInherits] = parent.id
	_, err := p.eng.ForkSession(ctx, forked, parent.id, fork.through)
	var fe *engine.FieldError
	if err == nil || errors.Is(err, engine.ErrExists) || (errors.As(err, &fe) && fe.Field != "fork_through") {
		return fork, err
	}
	p.log.Warn("fork failed: the branch starts empty", "parent", parent.id, "through", fork.through, "err", err)
	_, err = p.eng.CreateSession(ctx, params)
	return forkAt{}, err
}
