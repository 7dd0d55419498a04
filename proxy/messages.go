package proxy

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/identity"
	"github.com/ctxd/ctxd/internal/bodybuf"
	"github.com/ctxd/ctxd/internal/netlimit"
	"github.com/ctxd/ctxd/ledger"
	"github.com/ctxd/ctxd/quota"
	"github.com/ctxd/ctxd/wire"
)

// serveManaged serves a managed endpoint of dialect d: POST /v1/messages,
// /v1/responses or /v1/chat/completions (docs/design.md §10).
func (p *Proxy) serveManaged(w http.ResponseWriter, r *http.Request, d dialect) {
	body, bb, ok := p.readBody(w, r, d, d)
	// trailing: the answer's record runs after the response ended
	// (trail.go), and unlocks and releases the lane and the body's buffer
	// itself.
	var (
		l                *lane
		locked, trailing bool
	)
	defer func() {
		if trailing {
			return
		}
		if locked {
			l.unlock()
		}
		if l != nil {
			p.release(l)
		}
		bb.Release()
	}()
	if !ok {
		return
	}
	req, err := parseBody(body, d)
	if err != nil {
		p.passThrough(w, r, bodybuf.Pooled(body, bb), outcomePassedThrough, "not managed: "+err.Error())
		return
	}
	req.buf = bb
	req.clientCompacting = d.ClientCompacting(r.Header, req.Messages)
	if msg := p.countLimits(req); msg != "" {
		p.m.Request(apiLabel(d), outcomeRefused)
		d.WriteError(w, http.StatusRequestEntityTooLarge, "request_too_large", msg)
		return
	}
	if _, err := identity.ContextLimit(r.Header); err != nil {
		// A window the client asked for and ctxd cannot honour is never
		// ignored silently (docs/proxy.md "Windows").
		p.m.Request(apiLabel(d), outcomeRefused)
		d.WriteError(w, http.StatusBadRequest, "invalid_request_error", "ctxd proxy: "+err.Error())
		return
	}
	if field := req.ServerState(); field != "" {
		// The conversation lives on the provider (server-side state ctxd
		// cannot see): forwarded as it came.
		p.passThrough(w, r, req.clientBody(), outcomePassedThrough, "not managed: "+field+" names a conversation kept by the provider, which ctxd cannot see; send the whole input (store=false) to have ctxd manage it")
		return
	}
	fp := identity.Fingerprint(p.secret, r.Header)
	agent := identity.AgentSession(r.Header, req.Metadata)
	if agent == "" {
		agent = req.PromptCacheKey
	}
	l = p.lane(identity.ConversationKey(p.secret, fp, agent, req.Model, req.Tools, req.System, req.Messages))
	if err := l.lock(r.Context()); err != nil {
		return
	}
	locked = true

	pl, err := p.coldPlan(r.Context(), l, req, r.Header, fp, agent)
	if pl == nil && err == nil {
		pl, err = p.prepare(r.Context(), l, req, r.Header, fp, agent, false)
	}
	if err != nil {
		if r.Context().Err() != nil {
			return
		}
		if errors.Is(err, quota.ErrQuota) {
			p.m.Request(apiLabel(d), outcomeRefused)
			d.WriteError(w, http.StatusForbidden, "permission_error", "ctxd proxy: "+err.Error())
			return
		}
		outcome := outcomePassedThrough
		if errors.Is(err, errClientRule) {
			outcome = outcomeClientRule
			p.clientRules.Add(1)
			p.log.Info("client request breaks a provider rule; forwarded as sent", "session", l.key[:12], "err", err)
		} else if errors.Is(err, errViolation) || errors.Is(err, engine.ErrProviderRule) {
			outcome = outcomeViolation
			p.violations.Add(1)
			p.log.Error("assembled context not sent: it breaks docs/design.md §4a (a bug); the client's request goes instead", "session", l.key[:12], "err", err)
		} else {
			p.log.Warn("request passed through unmanaged", "err", err)
		}
		p.passThrough(w, r, req.clientBody(), outcome, "not managed: "+err.Error())
		return
	}
	var mode string
	if pl.cold != nil {
		// Its session does not exist yet: its header's mode, else the
		// proxy's.
		mode, err = p.modeOf(r.Header.Get(HeaderMode), "")
	} else {
		mode, err = p.mode(r.Context(), pl.b.id, r.Header)
	}
	if err != nil {
		if r.Context().Err() != nil {
			return
		}
		if pl.created {
			p.dropBranch(context.WithoutCancel(r.Context()), l, pl)
		} else {
			p.discardRequest(pl)
		}
		p.m.Request(apiLabel(d), outcomeRefused)
		d.WriteError(w, http.StatusBadRequest, "invalid_request_error", "ctxd proxy: "+err.Error())
		return
	}
	p.managed.Add(1)
	p.m.Request(apiLabel(d), outcomeManaged)
	if pl.tail != nil {
		p.clientRules.Add(1)
		p.log.Info("client's new messages break a provider rule; sent as the client's after ctxd's context, not recorded", "session", pl.b.id, "err", pl.clientRule)
		pl.diag = joinDiag(pl.diag, fmt.Sprintf("the client's %d new messages break a provider rule (%v): sent as the client's after ctxd's context, not recorded", len(pl.tail), pl.clientRule))
	}

	x := &exchange{pl: pl, req: req, body: pl.out, d: d, fp: fp, recoverable: !req.clientCompacting}
	if mode == ledger.ModeObserve {
		// Observe mode (docs/design.md §10): the client's bytes go
		// upstream; ctxd's context was built and is only entered in the
		// ledger. No recovery, no provider compaction: nothing of ctxd's
		// reaches the provider.
		pl.observe, pl.hideUsage, pl.server, pl.beta = true, false, false, ""
		x.body, x.recoverable = req.clientBody(), false
	}
	if pl.created || pl.cold != nil {
		// A new branch exists once the upstream accepts the request:
		// named on the answer then (modifyResponse), never on a refusal.
		x.sessionID = pl.b.id
	} else {
		w.Header().Set(HeaderSessionID, pl.b.id)
	}
	if pl.diag != "" {
		w.Header().Set(HeaderDiagnostic, headerSafe(pl.diag))
	}
	if pl.staged != nil {
		// The request's record is written as soon as the upstream
		// accepts it, beside the answer's forwarding (trail.go).
		x.onAccept = func() { p.commitAsync(pl) }
	}
	if p.attemptToEnd(w, r, x) {
		// The answer broke off once it had begun (the client left, the
		// upstream's connection broke): recorded like any other below —
		// the request, and the answer cut short — and then the response
		// is aborted as the reverse proxy would.
		defer panic(http.ErrAbortHandler)
	}
	ctx := context.WithoutCancel(r.Context())
	if !x.accepted && pl.created {
		// Nothing costs before it is earned: the upstream did not accept
		// the request that created the branch, so the branch goes.
		p.dropBranch(ctx, l, pl)
		return
	}
	if !x.accepted {
		// Refused (or the client left) before any byte of an answer: the
		// request's messages are dropped, and the log is as it was.
		p.discardRequest(pl)
	}
	// The answer's record comes after the response ended (its last
	// chunk is written when this handler returns), still holding the
	// conversation's lane: its next request waits for the record.
	trailing = true
	p.trail(func() {
		defer bb.Release()
		defer p.release(l)
		defer l.unlock()
		if x.accepted && pl.cold != nil && !p.recordCold(ctx, pl, req, fp) {
			return
		}
		if x.accepted && pl.prev != nil {
			p.supersede(ctx, pl.prev, pl.b)
		}
		if x.accepted && !p.commitRequest(ctx, pl) {
			// The request is not in the log: neither is its answer (the
			// history would have a gap); the client resends both.
			return
		}
		if pl.b.pendingLimit > 0 && p.creds.Accepted(fp) {
			p.applyPendingLimit(ctx, pl.b)
		}
		p.recordAnswer(ctx, x)
	})
}

// attemptToEnd is attempt, reporting whether the answer broke off once it
// had begun: the reverse proxy then panics with http.ErrAbortHandler,
// recovered here so that the caller records the request and its answer
// before aborting the response. Any other panic goes on.
func (p *Proxy) attemptToEnd(w http.ResponseWriter, r *http.Request, x *exchange) (aborted bool) {
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				panic(v)
			}
			aborted = true
		}
	}()
	p.attempt(w, r, x)
	return false
}

// prepare matches the request to its branch, appends what is new, and
// builds the outgoing body.
//
// recordOnly (a cold request the upstream accepted, cold.go): the request
// is recorded and staged, and no context is assembled.
func (p *Proxy) prepare(ctx context.Context, l *lane, req *request, h http.Header, fp, agent string, recordOnly bool) (_ *plan, err error) {
	var created *plan
	defer func() {
		if err != nil && created != nil {
			// The request goes unmanaged: the session it created goes
			// too (nothing costs before it is earned).
			p.dropBranch(context.WithoutCancel(ctx), l, created)
		}
	}()
	if err := p.fresh(ctx, l); err != nil {
		return nil, err
	}
	defer p.noteLane(l)
	cs := wire.ChainsWith(&l.digests, req.Messages, req.d.MatchKey)
	req.marked, req.fast = l.digests.Marked, l.digests.Fast
	m := len(req.Messages)
	pl := &plan{hideUsage: req.d.HidesUsage(req.Stream, req.StreamOptions)}
	var from int
	pl.b, from, pl.resend = l.extended(req, cs)
	reuse := false
	if k := len(l.branches); pl.b == nil && k > 0 && l.branches[k-1].unrecorded {
		pl.b, from, reuse = l.branches[k-1], 0, true
	}
	var msgs []history.Message
	if from < m {
		var err error
		if msgs, err = req.parse(max(from, req.Prefix)); err != nil {
			return nil, err
		}
	}
	if vs := req.d.ClientViolations(req.Messages, req.Prefix, req.Thinking, msgs, from); len(vs) > 0 {
		// Not recorded: the engine would hold a history no context of it
		// could be sent from.
		if pl.b == nil {
			return nil, fmt.Errorf("%w: %w", errClientRule, vs.Err())
		}
		// A managed conversation stays managed (docs/design.md §10): ctxd's
		// context of what it holds goes, then the client's new messages
		// as it sent them, for the provider to judge; nothing of them is
		// recorded. The wire's prefix stays ctxd's, so the cache keeps it.
		if reuse {
			return nil, fmt.Errorf("%w: %w", errClientRule, vs.Err())
		}
		pl.tail, pl.clientRule, msgs = req.Messages[from:], vs.Err(), nil
	}
	var grow uint64
	if !pl.resend && pl.tail == nil {
		for i := from; i < m; i++ {
			grow += uint64(len(req.Messages[i]))
		}
		if err := p.quota.Grow(ctx, p.cfg.Quotas, fp, "bytes", grow); err != nil {
			return nil, err
		}
	}
	if pl.b == nil {
		b, prev, fork, err := p.newBranch(ctx, l, req, h, fp, agent, cs)
		if err != nil {
			return nil, err
		}
		pl.b, pl.prev, pl.created = b, prev, true
		created = pl
		if fork.at > 0 {
			// The branch inherited the parent's log for the first
			// fork.at messages: only the rest is its own.
			if msgs, err = req.parse(max(fork.at, req.Prefix)); err != nil {
				return nil, err
			}
		}
	} else {
		if reuse {
			// As a new branch: dropped again when the upstream refuses.
			pl.b.unrecorded = false
			pl.created = true
			created = pl
			p.quota.Count(fp, pl.b.id)
		} else {
			// A stored branch of this credential's conversation exists
			// only because the upstream accepted a request of it
			// (dropBranch): the credential was authenticated, before a
			// restart too.
			p.creds.Accept(fp)
		}
		if err := p.syncPrefix(ctx, pl.b, req); err != nil {
			return nil, err
		}
	}
	// Held before anything can compact (the post-check of this append,
	// the pre-send check below).
	p.holdCredential(pl.b.id, req, h, fp)
	rec := pl.b.rec
	if !pl.resend && pl.tail == nil {
		rec.N, rec.Chain, rec.Resp = m, hex.EncodeToString(cs[m][:]), nil
		state, _ := json.Marshal(rec)
		// Staged, not written: the record is durable once the upstream
		// accepts the request (trail.go).
		st, err := p.eng.Stage(ctx, pl.b.id, msgs, engine.AppendOptions{ClientState: state})
		if err != nil {
			return nil, fmt.Errorf("recording the request: %w", err)
		}
		pl.staged = &stagedRequest{st: st, rec: pl.b.rec, state: pl.b.state, chain: pl.b.chain, fp: fp, grow: grow}
		pl.b.rec, pl.b.state = rec, state
		pl.b.chain = cs
	}
	if recordOnly {
		return pl, nil
	}
	out, diag, err := p.assemble(ctx, pl, req)
	if err != nil {
		if created == nil && pl.staged != nil {
			// Forwarded unmanaged: the request stays recorded, as the
			// messages of a conversation ctxd manages.
			p.commitRequest(context.WithoutCancel(ctx), pl)
		}
		return nil, err
	}
	pl.out, pl.diag = out, diag
	if n, _ := identity.ContextLimit(h); n > 0 && !identity.HasCredential(h) {
		pl.diag = joinDiag(pl.diag, identity.NoCredentialLimit)
	}
	return pl, nil
}

// extended is the newest branch of l that the request extends (cs is its
// hash chain), with the index of the request's first message it does not
// hold (after the answer recorded on it), and whether the request is the
// branch's last one again (resend); nil when it extends none. It reads
// the lane only.
func (l *lane) extended(req *request, cs []digest) (_ *branch, from int, resend bool) {
	m := len(req.Messages)
	for i := len(l.branches) - 1; i >= 0; i-- {
		b := l.branches[i]
		n := b.rec.N
		if n == 0 || n > m || hex.EncodeToString(cs[n][:]) != b.rec.Chain {
			continue
		}
		switch {
		case m == n:
			return b, m, true
		case b.rec.Resp == nil:
			return b, n, false
		default:
			if k := req.d.AnswerLen(req.Messages, n, b.rec.Resp.Equal); k > 0 {
				return b, n + k, false
			}
		}
	}
	return nil, 0, false
}

// recordAnswer appends the answer, rebuilt from what passed, with its
// usage (the post-check, docs/design.md §5.1), or records the upstream's error.
func (p *Proxy) recordAnswer(ctx context.Context, x *exchange) {
	pl, req := x.pl, x.req
	var (
		m       history.Message
		inError string
		err     error
		read    bool
	)
	switch {
	case x.stream != nil:
		m, inError, err = x.stream.Answer()
		read = true
	case x.buf != nil && !x.buf.Over() && x.status < 300:
		m, inError, err = x.d.DecodeAnswer(x.buf.Bytes())
		read = true
	}
	if read && err == nil && inError == "" && x.status < 300 {
		if en := p.recordLedger(ctx, pl, req, m.Usage, false); en != nil && pl.observe && !en.Cold {
			// Observe mode: the answer is recorded with the usage ctxd's
			// request would have had, so the post-check and calibration
			// see ctxd's context, as in enforce mode.
			m.Usage = en.Counterfactual.History()
		}
	}
	if err != nil && inError == "" && x.status < 300 {
		// A stream cut short: the provider bills what its start
		// reported.
		if us, ok := x.stream.(wire.UsageSoFar); ok {
			if u := us.UsageSoFar(); u != nil {
				p.recordLedger(ctx, pl, req, u, true)
			}
		}
	}
	if pl.tail != nil {
		// The request's messages were not recorded: neither is its
		// answer (the history would have a gap).
		return
	}
	rec := pl.b.rec
	var msgs []history.Message
	switch {
	case x.status >= 300:
		rec.LastError = p.red.String(upstreamError(x.d, x.status, x.errBody))
	case inError != "":
		rec.LastError = p.red.String("in the stream: " + inError)
	case err != nil:
		p.log.Info("answer not recorded", "session", pl.b.id, "err", err)
		return
	case !read:
		p.log.Info("answer not recorded", "session", pl.b.id, "reason", unread(x))
		return
	case pl.resend && rec.Resp != nil:
		// The first answer is recorded already. A resend after a failed
		// answer (an upstream error, a cut stream) is the same turn: its
		// answer is the first to be recorded.
		return
	default:
		if len(m.Content) == 0 {
			return
		}
		m.Time = time.Now().UTC()
		msgs = []history.Message{m}
		rec.Resp = wire.SigOf(m)
		rec.LastError = ""
	}
	st, _ := json.Marshal(rec)
	// The answer to the client's own compaction queues no compaction of
	// ctxd's: the client replaces the history it summarized.
	if _, err := p.eng.AppendWith(ctx, pl.b.id, msgs, engine.AppendOptions{ClientState: st, NoCompaction: req.clientCompacting, AssembledAt: pl.assembledAt}); err != nil {
		// The client resends the answer with its next request, which is
		// then appended like any new message.
		p.log.Warn("answer not recorded", "session", pl.b.id, "err", err)
		return
	}
	pl.b.rec, pl.b.state = rec, st
	p.quota.Add(x.fp, pl.b.id, quota.Bytes(msgs))
}

// unread says why x's answer was not read, to record it.
func unread(x *exchange) string {
	switch {
	case !x.accepted:
		return "no answer: the client left, or the upstream failed, before the upstream's first byte"
	case x.buf != nil && x.buf.Over():
		return fmt.Sprintf("the answer is over %d bytes, the most ctxd reads of one", maxAnswerBytes)
	}
	return "the answer was not read"
}

// readBody reads r's body within proxy.limits.body_bytes and the body
// read timeout. On a body over the limit or too slow it answers the
// refusal in d's error format, counted under label's api (nil: "other");
// on a client gone it answers nothing; ok is false in both. The caller
// releases bb whatever ok is.
func (p *Proxy) readBody(w http.ResponseWriter, r *http.Request, label, d dialect) (body []byte, bb *bodybuf.Buf, ok bool) {
	body, bb, err := bodybuf.Read(w, r, int64(p.limits.BodyBytes))
	if err == nil {
		return body, bb, true
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		p.m.Request(apiLabel(label), outcomeRefused)
		drainTooLarge(w, r, int64(p.limits.BodyBytes))
		d.WriteError(w, http.StatusRequestEntityTooLarge, "request_too_large", fmt.Sprintf("ctxd proxy: request body over %d bytes (proxy.limits.body_bytes)", p.limits.BodyBytes))
		return nil, bb, false
	}
	if errors.Is(err, netlimit.ErrBodyTimeout) {
		// 408 naming the limits, and the connection closed.
		p.m.Request(apiLabel(label), outcomeRefused)
		w.Header().Set("Connection", "close")
		writeError(w, r, http.StatusRequestTimeout, "timeout_error", fmt.Sprintf("ctxd proxy: the request body arrived too slowly (proxy.limits.body_timeout_ms = %d without bytes, or under proxy.limits.body_min_rate = %d bytes/s after it)", p.limits.BodyTimeoutMS, p.limits.BodyMinRate))
	}
	return nil, bb, false // the client left
}
