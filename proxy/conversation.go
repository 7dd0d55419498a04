package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/internal/bodybuf"
	"github.com/ctxd/ctxd/ledger"
	"github.com/ctxd/ctxd/wire"
)

// A conversation's state in the proxy (docs/design.md §10): a lane per
// client conversation, its branches, each bound to an engine session,
// and the record of what was sent and answered (the client state the
// engine keeps).

// record is what the proxy keeps of a branch, as a client_state event
// written with the messages it accounts for (engine.AppendOptions), so a
// restarted daemon matches the client's next request exactly as before.
type record struct {
	// Key is the conversation key (identity.ConversationKey).
	Key string `json:"key"`
	// N is how many of the client's messages are accounted for, and Chain
	// the hash chain over them (markers removed), hex.
	N     int    `json:"n"`
	Chain string `json:"chain"`
	// Resp identifies the answer recorded after the request of N messages;
	// the client's message N must be it. Nil when none was recorded.
	Resp *wire.AnswerSig `json:"resp,omitempty"`
	// BranchOf names the branch this one replaced after a client rewrite;
	// SupersededBy the branch that replaced this one.
	BranchOf     string `json:"branch_of,omitempty"`
	SupersededBy string `json:"superseded_by,omitempty"`
	// Reason says why this branch began.
	Reason string `json:"reason,omitempty"`
	// LastError is the newest upstream error, passed to the client as it
	// came (status and the provider's message, never a header).
	LastError string `json:"last_error,omitempty"`
}

// lane is one conversation: its branches (ctxd sessions), newest last. Its
// semaphore serializes the conversation's requests.
type lane struct {
	// users counts the requests using the lane (guarded by Proxy.mu).
	users    int
	key      string
	sem      chan struct{}
	loaded   bool
	branches []*branch
	// digests of the previous request's messages (wire.ChainsWith).
	digests wire.Digests
	// bytes is the lane's size as last noted (noteLane) and used the
	// order of its last use (both guarded by Proxy.mu).
	bytes int64
	used  uint64
}

// branch is one ctxd session of a conversation.
type branch struct {
	id  string
	rec record
	// sysHash and toolsHash are the fast hashes of the client's system
	// and tools bytes last given to the engine (wire.Request.PrefixHash, ToolsHash);
	// zero after a restart.
	sysHash, toolsHash uint64
	// r is the branch's renderer, of the dialect rd, with its caches
	// (wire.Renderer; guarded by Proxy.mu for the cache bound, used
	// under the lane's lock).
	r  wire.Renderer
	rd dialect
	// chain is the hash chain of the client's last request accounted for
	// (chains), to find where a rewrite forked; nil after a restart.
	chain []digest
	// state is the client_state this proxy last read or wrote for the
	// branch: another node of a fleet wrote when the log's differs (fresh).
	state json.RawMessage
	// unrecorded: the branch's session was created and holds nothing
	// (its first request was never recorded); the next request that
	// extends no branch records into it, as into a new one.
	unrecorded bool
	// pendingLimit is the window (tokens) of the X-Ctxd-Context-Limit
	// header of the request that created the branch, while the upstream
	// has not yet accepted its credential: applied once it has (0: none).
	pendingLimit uint64
	// conv is the ledger's cache models of the branch's requests
	// (docs/design.md §10).
	conv ledger.Conversation
	// bytes is the size of its caches as last noted (keepRenderer;
	// guarded by Proxy.mu).
	bytes int64
}

// forkedFrom is the branch a request that extends none of the lane's
// branches was forked from: the one sharing the longest prefix with it
// (cs is the request's hash chain), the newest among equals; the newest
// branch when none shares a message (the client replaced its history,
// e.g. by its own compaction) or its chain is unknown (after a restart).
func (l *lane) forkedFrom(cs []digest) *branch {
	var best *branch
	bestLen := 0
	for _, b := range l.branches {
		if k := wire.Shared(b.chain, cs); k > 0 && k >= bestLen {
			best, bestLen = b, k
		}
	}
	if best == nil && len(l.branches) > 0 {
		best = l.branches[len(l.branches)-1]
	}
	return best
}

func (l *lane) lock(ctx context.Context) error {
	select {
	case l.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *lane) unlock() { <-l.sem }

// lane returns the conversation's lane, counted as in use until release.
func (p *Proxy) lane(key string) *lane {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.lanes[key]
	if l == nil {
		l = &lane{key: key, sem: make(chan struct{}, 1)}
		p.lanes[key] = l
	}
	l.users++
	p.useSeq++
	l.used = p.useSeq
	return l
}

func (p *Proxy) release(l *lane) {
	p.mu.Lock()
	l.users--
	p.mu.Unlock()
}

// load finds the branches a previous run recorded: sessions are named by
// the key, branch after branch, so they are found without a listing.
func (p *Proxy) load(ctx context.Context, l *lane) error {
	if l.loaded {
		return nil
	}
	for k := 0; ; k++ {
		id := engine.ProxySessionID(p.secret, l.key, k)
		st, err := p.eng.ClientState(ctx, id)
		if errors.Is(err, engine.ErrNotFound) {
			break
		}
		if err != nil {
			return err
		}
		b := &branch{id: id, state: st}
		if st != nil {
			if err := json.Unmarshal(st, &b.rec); err != nil {
				return fmt.Errorf("session %s: client_state: %w", id, err)
			}
		} else if info, err := p.eng.Session(ctx, id); err == nil && info.Messages == 0 {
			// Created for a request whose record was never written (the
			// daemon stopped before the upstream accepted it, trail.go):
			// the conversation's next request records into it.
			b.unrecorded = true
		}
		b.rec.Key = l.key
		l.branches = append(l.branches, b)
	}
	l.loaded = true
	return nil
}

// fresh loads the lane, and makes it the log's when another node of a
// fleet served the conversation (docs/design.md §9): a branch whose
// client_state in the log is not the one this proxy last read or wrote, or
// a branch it has not seen, means the lane is stale, and it is rebuilt from
// the log as after a restart. Without a shared log nobody else writes, and
// nothing is read.
func (p *Proxy) fresh(ctx context.Context, l *lane) error {
	if !l.loaded || !p.eng.Shared() {
		return p.load(ctx, l)
	}
	stale := false
	for _, b := range l.branches {
		st, err := p.eng.ClientState(ctx, b.id)
		if err != nil && !errors.Is(err, engine.ErrNotFound) {
			return err
		}
		if err != nil || !bytes.Equal(st, b.state) {
			stale = true
			break
		}
	}
	if !stale {
		_, err := p.eng.ClientState(ctx, engine.ProxySessionID(p.secret, l.key, len(l.branches)))
		if err == nil {
			stale = true
		} else if !errors.Is(err, engine.ErrNotFound) {
			return err
		}
	}
	if stale {
		l.branches, l.loaded = nil, false
	}
	return p.load(ctx, l)
}

// applyPendingLimit gives the session of b the window its client asked for
// (X-Ctxd-Context-Limit) now that the upstream accepted the client's
// credential.
func (p *Proxy) applyPendingLimit(ctx context.Context, b *branch) {
	n := b.pendingLimit
	b.pendingLimit = 0
	if _, err := p.eng.UpdateSession(ctx, b.id, engine.Patch{ContextLimit: &n}); err != nil {
		p.log.Warn("applying the client's window", "session", b.id, "header", HeaderContextLimit, "err", err)
	}
}

// dropBranch deletes the session a request created when the upstream did
// not accept the request (docs/design.md §10): a refused request leaves
// no state. Called under the lane's lock.
func (p *Proxy) dropBranch(ctx context.Context, l *lane, pl *plan) {
	if err := p.eng.DeleteSession(ctx, pl.b.id); err != nil && !errors.Is(err, engine.ErrNotFound) {
		p.log.Warn("deleting the session of a refused request", "session", pl.b.id, "err", err)
	}
	if n := len(l.branches); n > 0 && l.branches[n-1] == pl.b {
		l.branches = l.branches[:n-1]
	}
	p.creds.Forget(pl.b.id)
	p.quota.Forget(pl.b.id)
}

// supersede records on prev that b replaced it (the client rewrote its
// history), once the upstream accepted b's first request.
func (p *Proxy) supersede(ctx context.Context, prev, b *branch) {
	p.branches.Add(1)
	prev.rec.SupersededBy = b.id
	if st, err := json.Marshal(prev.rec); err == nil {
		if _, err := p.eng.AppendWith(ctx, prev.id, nil, engine.AppendOptions{ClientState: st}); err != nil {
			p.log.Warn("recording a superseded branch", "session", prev.id, "err", err)
		} else {
			prev.state = st
		}
	}
	p.log.Info("client rewrote its history: new branch", "session", b.id, "branch_of", prev.id)
}

// plan is a managed request ready to forward.
type plan struct {
	b    *branch
	out  *bodybuf.Body
	diag string
	// observe: the client's request is sent, out is what ctxd would have
	// sent (docs/design.md §10).
	observe bool
	// limit, threshold and tokens are the session's window (0 while
	// unknown), threshold and estimate when out was last assembled, in
	// tokens.
	limit, threshold, tokens uint64
	// assembledAt is the session's last seq when out was assembled
	// (engine.AppendOptions.AssembledAt).
	assembledAt uint64
	// resend: the request is one already recorded (a retry); its answer is
	// not recorded again when one was recorded for it (record.Resp).
	resend bool
	// hideUsage: ctxd asked a Chat upstream for the usage chunk the
	// client did not ask for; it is hidden from the client.
	hideUsage bool
	// server: the body carries the provider's compaction (shape server,
	// servershape.go), with beta its Anthropic beta header; noServer: the
	// upstream refused it, it is not added again.
	server, noServer bool
	beta             string
	// created: this request created the branch's session (deleted again
	// when the upstream does not accept it); prev is the branch it
	// replaces, marked superseded once the upstream accepted.
	created bool
	prev    *branch
	// tail is the client's new messages, sent as they came after ctxd's
	// context and never recorded, when they break a provider rule in a
	// conversation ctxd manages (clientRule says which); nil otherwise.
	tail       []json.RawMessage
	clientRule error
	// staged is the request's append, held in memory until the upstream
	// accepts the request (trail.go); nil when nothing was appended.
	staged *stagedRequest
	// cold: a cold first request, sent as the client's on an estimate and
	// recorded once the upstream accepted it (cold.go); b is then a
	// branch that does not exist yet, and tokens the estimate.
	cold *coldRequest
}

// maxBranchGap bounds the existing session names newBranch steps over.
const maxBranchGap = 64

// syncPrefix gives the engine a changed system prompt or tool set (a
// recorded rewrite, docs/design.md §4), so its estimate counts them.
func (p *Proxy) syncPrefix(ctx context.Context, b *branch, req *request) error {
	sd, td := req.PrefixHash(), req.ToolsHash()
	if sd == b.sysHash && td == b.toolsHash {
		return nil
	}
	sys, tools := req.d.SystemText(req.System, req.Messages[:req.Prefix]), req.d.Tools(req.Tools)
	_, err := p.eng.UpdateSession(ctx, b.id, engine.Patch{System: &sys, Tools: &tools})
	var fe *engine.FieldError
	if errors.As(err, &fe) && strings.HasPrefix(fe.Field, "tools") {
		_, err = p.eng.UpdateSession(ctx, b.id, engine.Patch{System: &sys})
	}
	if err != nil {
		return fmt.Errorf("updating the system prompt and tools: %w", err)
	}
	b.sysHash, b.toolsHash = sd, td
	return nil
}

// digest is a link of a conversation's hash chain (wire.Chains).
type digest = wire.Digest
