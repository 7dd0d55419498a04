package proxy

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"

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

// forkPoint is where a request (cs its hash chain) that extends none of
// its lane's branches forks from parent (engine.ForkPoint): the newest
// record of parent whose chain is the request's over as many messages,
// and, when the record holds the answer the proxy recorded after them,
// the request resending that answer (the dialect's AnswerLen: a client
// that touched it still resends it; one that edited a tool input does
// not). The zero forkAt when there is none or the log cannot be read.
func (p *Proxy) forkPoint(ctx context.Context, parent *branch, req *request, cs []digest) forkAt {
	through, at, err := p.eng.ForkPoint(ctx, parent.id, func(st json.RawMessage) (int, bool) {
		var r record
		if json.Unmarshal(st, &r) != nil || r.N <= 0 || r.N >= len(cs) || hex.EncodeToString(cs[r.N][:]) != r.Chain {
			return 0, false
		}
		if r.Resp == nil {
			return r.N, true
		}
		k := req.d.AnswerLen(req.Messages, r.N, r.Resp.Equal)
		return r.N + k, k > 0
	})
	if err != nil {
		p.log.Warn("fork point not found: the branch starts empty", "parent", parent.id, "err", err)
		return forkAt{}
	}
	return forkAt{through: through, at: at}
}

// createBranchSession creates the session of a new branch: a fork of
// parent's log at fork when it has a point (engine.ForkSession), else an
// empty session, in memory only: it is stored with the request's staged
// append once the upstream accepts the request (docs/design.md §10
// "Recorded when accepted"), and dropped with nothing stored when it
// refuses it (dropBranch). A fork the engine cannot make (its log
// unreadable) falls back to an empty session; the fork returned says which
// was made.
func (p *Proxy) createBranchSession(ctx context.Context, params engine.CreateParams, parent *branch, fork forkAt) (forkAt, error) {
	if parent == nil || fork.through == 0 {
		params.Staged = true
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
	params.Staged = true
	_, err = p.eng.CreateSession(ctx, params)
	return forkAt{}, err
}
