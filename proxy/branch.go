package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/identity"
	"github.com/ctxd/ctxd/quota"
)

// newBranch starts a ctxd session for a conversation the proxy has not
// recorded, or whose client rewrote its history: the session holds the
// client's whole list from the start, or, forked from a branch (forkedFrom)
// that accounted for a prefix of it, that branch's log up to there
// (forkPoint: its checkpoints are inherited, the fork says how many of the
// client's messages they hold). The branch it was forked from records
// that it was superseded.
func (p *Proxy) newBranch(ctx context.Context, l *lane, req *request, h http.Header, fp, agent string, cs []digest) (*branch, *branch, forkAt, error) {
	k := len(l.branches)
	labels := map[string]string{engine.LabelProxy: req.d.Name(), engine.LabelCredential: quota.CredHash(fp), "proxy.model": req.Model}
	if agent != "" {
		labels["proxy.agent_session"] = agent
	}
	var prev *branch
	reason := ""
	if k > 0 {
		prev = l.forkedFrom(cs)
		labels["proxy.branch_of"] = prev.id
		reason = "the client's history no longer extends what was recorded (its own compaction, a rewind or an edit)"
	}
	var fork forkAt
	if prev != nil {
		fork = p.forkPoint(ctx, prev, req, cs)
	}
	params := engine.CreateParams{Model: req.Model, System: req.d.SystemText(req.System, req.Messages[:req.Prefix]), Tools: req.d.Tools(req.Tools), Labels: labels,
		Provider: engineProvider(req.d), WireContextLimit: identity.WireContextLimit(h)}
	if uid, ok := peerUID(ctx); ok && uid != uint32(os.Getuid()) {
		// Another local user's agent cannot read the daemon user's
		// offload directory: its results stay in the context (docs/proxy.md
		// "Security").
		params.Overlay = foreignOverlay
		labels["proxy.client_uid"] = strconv.FormatUint(uint64(uid), 10)
	}
	// Who pays: a window override is honoured only for a credential the
	// upstream accepted; one it has not yet is applied once it has
	// (branch.pendingLimit), and none without a credential (prepare).
	n, _ := identity.ContextLimit(h)
	pending := uint64(0)
	if n > 0 && identity.HasCredential(h) {
		if p.creds.Accepted(fp) {
			params.ContextLimit = n
		} else {
			pending = n
		}
	}
	if err := p.quota.Check(ctx, p.cfg.Quotas, fp); err != nil {
		return nil, nil, forkAt{}, err
	}
	var err error
	for tries := 0; ; tries++ {
		params.ID = engine.ProxySessionID(p.secret, l.key, k)
		made, cerr := p.createBranchSession(ctx, params, prev, fork)
		var fe *engine.FieldError
		if errors.As(cerr, &fe) && strings.HasPrefix(fe.Field, "tools") {
			// Tools the engine cannot take (server tools without a schema)
			// only cost the estimate their tokens.
			params.Tools = nil
			made, cerr = p.createBranchSession(ctx, params, prev, fork)
		}
		err = cerr
		if err == nil {
			fork = made
		}
		if !errors.Is(err, engine.ErrExists) || tries >= maxBranchGap {
			break
		}
		// A session of this name exists that the lane does not hold (an
		// earlier branch was deleted, so loading stopped before this
		// one): never reuse its history; the next name.
		k++
	}
	if err != nil {
		return nil, nil, forkAt{}, fmt.Errorf("creating the session: %w", err)
	}
	b := &branch{id: params.ID, rec: record{Key: l.key, Reason: reason}, pendingLimit: pending}
	if prev != nil {
		b.rec.BranchOf = prev.id
	}
	p.quota.Count(fp, b.id)
	b.sysHash, b.toolsHash = req.PrefixHash(), req.ToolsHash()
	l.branches = append(l.branches, b)
	if len(l.branches) == 1 {
		p.conversations.Add(1)
	}
	for n := uint64(len(l.branches)); ; {
		old := p.maxBranches.Load()
		if n <= old || p.maxBranches.CompareAndSwap(old, n) {
			break
		}
	}
	return b, prev, fork, nil
}

// engineProvider is the engine's provider of a dialect's sessions: its
// upstream's.
func engineProvider(d dialect) string {
	if d.Upstream() == "anthropic" {
		return engine.ProviderAnthropic
	}
	return engine.ProviderOpenAI
}
