package proxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/netlimit"
	"github.com/ctxd/ctxd/internal/rawjson"
	"github.com/ctxd/ctxd/ledger"
	"github.com/ctxd/ctxd/trigger"
	"github.com/ctxd/ctxd/wire"
	"github.com/ctxd/ctxd/wire/anthropic"
	"github.com/ctxd/ctxd/wire/openai/chat"
)

// record is what the proxy keeps of a branch, as a client_state event
// written with the messages it accounts for (engine.AppendOptions), so a
// restarted daemon matches the client's next request exactly as before.
type record struct {
	// Key is the conversation key (conversationKey).
	Key string `json:"key"`
	// N is how many of the client's messages are accounted for, and Chain
	// the hash chain over them (markers removed), hex.
	N     int    `json:"n"`
	Chain string `json:"chain"`
	// Resp identifies the answer recorded after the request of N messages;
	// the client's message N must be it. Nil when none was recorded.
	Resp *answerSig `json:"resp,omitempty"`
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

// answerSig identifies an answer as the client sends it back: its tool
// call ids and the digest of its text. Thinking and byte layout are left
// out (a client re-encodes what it received).
type answerSig struct {
	ToolCalls []string `json:"tool_calls,omitempty"`
	Text      string   `json:"text"`
	// Inputs are the digests of the tool calls' inputs, in order, in one
	// JSON form (inputDigest): a client that edited a call's input in its
	// history rewrote the answer, and its edit is sent, not ctxd's
	// record. Absent in records of an older ctxd (not compared then).
	Inputs []string `json:"inputs,omitempty"`
	// Norm is the digest of the text with whitespace runs as one space
	// and blank blocks left out: a client that re-flows the answer's text
	// still sends the answer (docs/design.md §10). Empty in a record
	// written before it existed: Text is compared then.
	Norm string `json:"norm,omitempty"`
}

// inputDigest is the digest of a tool call's input in one JSON form (keys
// sorted, no spacing): a client that re-encodes the input it received
// gives the same digest.
func inputDigest(in json.RawMessage) string {
	var v any
	b := []byte(in)
	if json.Unmarshal(in, &v) == nil {
		if c, err := json.Marshal(v); err == nil {
			b = c
		}
	}
	d := sha256.Sum256(b)
	return hex.EncodeToString(d[:8])
}

func sigOf(m history.Message) *answerSig {
	s := &answerSig{}
	h, n := sha256.New(), sha256.New()
	for _, b := range m.Content {
		switch b.Type {
		case history.BlockText:
			h.Write([]byte(b.Text))
			if t := strings.Join(strings.Fields(b.Text), " "); t != "" {
				n.Write([]byte(t))
				n.Write([]byte{0})
			}
		case history.BlockToolCall:
			s.ToolCalls = append(s.ToolCalls, b.ID)
			s.Inputs = append(s.Inputs, inputDigest(b.Input))
		}
	}
	s.Text = hex.EncodeToString(h.Sum(nil))[:32]
	s.Norm = hex.EncodeToString(n.Sum(nil))[:32]
	return s
}

// matches reports whether the client's message raw is the answer s (an
// Anthropic message).
func (s *answerSig) matches(raw json.RawMessage) bool {
	return dialectAnthropic.AnswerLen([]json.RawMessage{raw}, 0, s.equal) == 1
}

// equal reports whether the canonical assistant message m is the answer s
// (blank text blocks left out).
func (s *answerSig) equal(m history.Message) bool {
	var nonEmpty []history.Block
	for _, b := range m.Content {
		if b.Type == history.BlockText && strings.TrimSpace(b.Text) == "" {
			continue
		}
		nonEmpty = append(nonEmpty, b)
	}
	o := sigOf(history.Message{Content: nonEmpty})
	text := o.Text == s.Text
	if s.Norm != "" {
		text = o.Norm == s.Norm
	}
	return text && slices.Equal(o.ToolCalls, s.ToolCalls) && (s.Inputs == nil || slices.Equal(o.Inputs, s.Inputs))
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
	// digests of the previous request's messages (chainsWith).
	digests msgDigests
}

// branch is one ctxd session of a conversation.
type branch struct {
	id  string
	rec record
	// sysDigest and toolsDigest are the client's system and tools bytes
	// last given to the engine; zero after a restart.
	sysDigest, toolsDigest digest
	// enc is the last outgoing messages with their encodings (guarded by
	// Proxy.mu for the cache bound; used under the lane's lock).
	enc []cachedMessage
	// rawIdx maps the digest of ctxd's rendering of a client message to
	// its index in the client's list, for the first rawN messages
	// (indexClient; guarded like enc).
	rawIdx *clientIndex
	rawN   int
	// itemIdx and itemN are the same for an OpenAI branch's items
	// (indexClientItems), apart: the keys are another hash.
	itemIdx *clientIndex
	itemN   int
	// rendered is the Anthropic rendering, before cache markers, of the
	// context last sent on the branch (renderWire; guarded like enc).
	rendered *renderCache
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
	// conv is the ledger's cache models of the branch's requests and
	// ledgerSeq the session's last seq at its last ledger entry (0: none
	// since the proxy started), docs/design.md §10.
	conv      ledger.Conversation
	ledgerSeq uint64
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
		n := min(len(b.chain), len(cs)) - 1
		// The longest common prefix, by bisection: chains equal at k are
		// equal below k (chains[0] is the zero digest for all).
		lo, hi := 0, max(n, 0)
		for lo < hi {
			mid := (lo + hi + 1) / 2
			if b.chain[mid] == cs[mid] {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		if lo > 0 && lo >= bestLen {
			best, bestLen = b, lo
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
		if len(p.lanes) >= maxLanes {
			p.dropIdleLanesLocked()
		}
		l = &lane{key: key, sem: make(chan struct{}, 1)}
		p.lanes[key] = l
	}
	l.users++
	return l
}

func (p *Proxy) release(l *lane) {
	p.mu.Lock()
	l.users--
	p.mu.Unlock()
}

// maxLanes bounds the conversations kept in memory; beyond it the unused
// ones are dropped (their branches are found again from the engine at
// their next request: the record is durable).
const maxLanes = 4096

// dropIdleLanesLocked forgets every lane no request uses. Called with p.mu
// held.
func (p *Proxy) dropIdleLanesLocked() {
	for k, l := range p.lanes {
		if l.users == 0 {
			delete(p.lanes, k)
		}
	}
}

// load finds the branches a previous run recorded: sessions are named by
// the key, branch after branch, so they are found without a listing.
func (p *Proxy) load(ctx context.Context, l *lane) error {
	if l.loaded {
		return nil
	}
	for k := 0; ; k++ {
		id := sessionID(p.secret, l.key, k)
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

// fresh makes the lane the log's when another node of a fleet served the
// conversation (docs/design.md §9): a branch whose client_state in the log is
// not the one this proxy last read or wrote, or a branch it has not seen,
// means the lane is stale, and it is rebuilt from the log as after a
// restart. Without a shared log nobody else writes, and nothing is read.
func (p *Proxy) fresh(ctx context.Context, l *lane) error {
	if !l.loaded || !p.eng.Shared() {
		return nil
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
		_, err := p.eng.ClientState(ctx, sessionID(p.secret, l.key, len(l.branches)))
		if err == nil {
			stale = true
		} else if !errors.Is(err, engine.ErrNotFound) {
			return err
		}
	}
	if stale {
		l.branches, l.loaded = nil, false
		return p.load(ctx, l)
	}
	return nil
}

// errViolation: the assembled context breaks docs/design.md §4a; it is never
// sent.
var errViolation = errors.New("the assembled context breaks docs/design.md §4a, not sent")

// errClientRule: the client's own request breaks docs/design.md §4a. It is
// forwarded as sent (the provider judges it) and is not a ctxd violation.
var errClientRule = errors.New("the client's own request breaks docs/design.md §4a; forwarded as sent for the provider to judge")

// clientViolations checks what of docs/design.md §4a a Messages API client's
// own request decides, without parsing the history ctxd already holds: the rules of
// one message on the new messages (no empty text or message, thinking
// first and not last), and the rules of the request's tail (the final
// assistant message of an open tool loop starts with thinking when the
// client enabled it; no thinking in a final assistant message when it did
// not), on the messages from the last assistant one on.
func clientViolations(req *request, added []history.Message, from int) history.Violations {
	if req.d != dialectAnthropic {
		// The rules are the Messages API's (OpenAI's accept, e.g., an
		// empty content).
		return nil
	}
	var vs history.Violations
	// A new user or system message without content has no canonical
	// message (ParseMessage gives none): recorded, it would vanish, and
	// the request sent would be another (a prefill when it was the last).
	for i := max(from, req.prefix); i < len(req.messages); i++ {
		if role, empty := emptyMessage(req.messages[i]); empty {
			vs = append(vs, history.Violation{Index: i, Rule: history.RuleEmptyMessage,
				Message: fmt.Sprintf("messages[%d] (role %q) has no content; the provider refuses it (all messages must have non-empty content except for the optional final assistant message) and ctxd cannot record it", i, role)})
		}
	}
	for i := range added {
		if added[i].Role != history.RoleUser && added[i].Role != history.RoleAssistant {
			continue
		}
		for _, v := range history.CheckRequest(added[i:i+1], history.Rules{OpenTail: true}) {
			switch v.Rule {
			case history.RuleEmptyText, history.RuleEmptyMessage, history.RuleThinkingFirst, history.RuleThinkingLast:
				vs = append(vs, v)
			}
		}
	}
	rules := history.Rules{Thinking: anthropic.ThinkingMode(req.thinking), OpenTail: true}
	// The tail from the last assistant message (a few messages back). An
	// assistant message ctxd already holds (before from) is the provider's
	// answer as recorded or one a request the provider accepted carried:
	// not the client's new content (docs/design.md §4a).
	for i := len(req.messages) - 1; i >= req.prefix && i >= len(req.messages)-64; i-- {
		if anthropic.Role(req.messages[i]) != "assistant" {
			// Its role is enough: decoding a user message only to read it
			// copied all its text (tens of MB for a hostile body).
			continue
		}
		ms, err := anthropic.ParseMessage(req.messages[i], nil)
		if err != nil || len(ms) == 0 || ms[0].Role != history.RoleAssistant {
			continue
		}
		if i < from {
			break
		}
		tail, err := req.d.Parse(req.messages, i)
		if err != nil {
			break
		}
		for _, v := range history.CheckRequest(tail, rules) {
			switch v.Rule {
			case history.RuleLoopThinking, history.RuleThinkingOff:
				v.Index += i
				vs = append(vs, v)
			}
		}
		break
	}
	return vs
}

// emptyMessage reports whether the client's message raw, not an assistant
// one, has no content that ParseMessage keeps: content missing, null, ""
// or [], or a system message without text. role is its role.
func emptyMessage(raw json.RawMessage) (role string, empty bool) {
	var content []byte
	ok := rawjson.Members(raw, func(key string, vs, ve int) bool {
		switch key {
		case "role":
			_ = json.Unmarshal(raw[vs:ve], &role)
		case "content":
			content = raw[vs:ve]
		}
		return true
	})
	if !ok || role == "assistant" {
		return role, false
	}
	switch c := content; {
	case len(c) == 0 || string(c) == "null" || string(c) == `""`:
		return role, true
	case c[0] == '[' && rawjson.SkipSpace(content, 1) < len(content) && content[rawjson.SkipSpace(content, 1)] == ']':
		return role, true
	case role == "system":
		ms, err := anthropic.ParseMessage(raw, nil)
		return role, err == nil && len(ms) == 0
	}
	return role, false
}

// plan is a managed request ready to forward.
type plan struct {
	b    *branch
	out  *outBody
	diag string
	// observe: the client's request is sent, out is what ctxd would have
	// sent (docs/design.md §10); limit and threshold are the session's
	// window and threshold when out was assembled, in tokens.
	observe          bool
	limit, threshold uint64
	// resend: the request is one already recorded (a retry); its answer is
	// not recorded again when one was recorded for it (record.Resp).
	resend bool
	n      int
	chain  digest
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
	// tokens is the estimate of the context last assembled and window the
	// session's context window (0 while unknown), in tokens.
	tokens, window uint64
	// staged is the request's append, held in memory until the upstream
	// accepts the request (trail.go); nil when nothing was appended.
	staged *stagedRequest
}

// messages serves POST /v1/messages (docs/design.md §10).
func (p *Proxy) messages(w http.ResponseWriter, r *http.Request) {
	p.serveManaged(w, r, dialectAnthropic)
}

// serveManaged serves a managed endpoint of dialect d: POST /v1/messages,
// /v1/responses or /v1/chat/completions (docs/design.md §10).
func (p *Proxy) serveManaged(w http.ResponseWriter, r *http.Request, d dialect) {
	body, bb, err := readBody(w, r, int64(p.limits.BodyBytes))
	// trailing: the answer's record runs after the response ended
	// (trail.go), and releases the body's buffer and the lane itself.
	trailing := false
	defer func() {
		if !trailing {
			bb.release()
		}
	}()
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			p.m.request(d, outcomeRefused)
			drainTooLarge(w, r, int64(p.limits.BodyBytes))
			d.WriteError(w, http.StatusRequestEntityTooLarge, "request_too_large", fmt.Sprintf("ctxd proxy: request body over %d bytes (proxy.limits.body_bytes)", p.limits.BodyBytes))
			return
		}
		if errors.Is(err, netlimit.ErrBodyTimeout) {
			p.m.request(d, outcomeRefused)
			p.writeBodyTimeout(w, r)
		}
		return // the client left
	}
	req, err := parseBody(body, d)
	if err != nil {
		p.passThrough(w, r, &outBody{parts: [][]byte{body}, n: len(body), buf: bb}, outcomePassedThrough, "not managed: "+err.Error())
		return
	}
	req.buf = bb
	if msg := p.countLimits(req); msg != "" {
		p.m.request(d, outcomeRefused)
		d.WriteError(w, http.StatusRequestEntityTooLarge, "request_too_large", msg)
		return
	}
	if _, err := contextLimitHeader(r.Header); err != nil {
		// A window the client asked for and ctxd cannot honour is never
		// ignored silently (docs/proxy.md "Windows").
		p.m.request(d, outcomeRefused)
		d.WriteError(w, http.StatusBadRequest, "invalid_request_error", "ctxd proxy: "+err.Error())
		return
	}
	if req.previousResponseID != "" || req.conversation {
		// The conversation lives on the provider (server-side state ctxd
		// cannot see): forwarded as it came.
		field := "previous_response_id"
		if req.previousResponseID == "" {
			field = "conversation"
		}
		p.passThrough(w, r, req.clientBody(), outcomePassedThrough, "not managed: "+field+" names a conversation kept by the provider, which ctxd cannot see; send the whole input (store=false) to have ctxd manage it")
		return
	}
	fp := fingerprint(p.secret, r.Header)
	agent := agentSession(r.Header, req.metadata)
	if agent == "" {
		agent = req.promptCacheKey
	}
	l := p.lane(conversationKey(p.secret, fp, agent, req))
	defer func() {
		if !trailing {
			p.release(l)
		}
	}()
	if err := l.lock(r.Context()); err != nil {
		return
	}
	defer func() {
		if !trailing {
			l.unlock()
		}
	}()

	pl, err := p.prepare(r.Context(), l, req, r.Header, fp, agent)
	if err != nil {
		if r.Context().Err() != nil {
			return
		}
		if errors.Is(err, errQuota) {
			p.m.request(d, outcomeRefused)
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
	mode, err := p.mode(r.Context(), pl.b.id, r.Header)
	if err != nil {
		if r.Context().Err() != nil {
			return
		}
		if pl.created {
			p.dropBranch(context.WithoutCancel(r.Context()), l, pl)
		} else {
			p.discardRequest(pl)
		}
		p.m.request(d, outcomeRefused)
		d.WriteError(w, http.StatusBadRequest, "invalid_request_error", "ctxd proxy: "+err.Error())
		return
	}
	p.managed.Add(1)
	p.m.request(d, outcomeManaged)
	if pl.tail != nil {
		p.clientRules.Add(1)
		p.log.Info("client's new messages break a provider rule; sent as the client's after ctxd's context, not recorded", "session", pl.b.id, "err", pl.clientRule)
		note := fmt.Sprintf("the client's %d new messages break a provider rule (%v): sent as the client's after ctxd's context, not recorded", len(pl.tail), pl.clientRule)
		if pl.diag != "" {
			note = pl.diag + "; " + note
		}
		pl.diag = note
	}

	x := &exchange{managed: true, body: pl.out, d: d, hideUsage: pl.hideUsage, server: pl.server, beta: pl.beta, fp: fp}
	x.recover = func(w http.ResponseWriter, _ *http.Request) bool {
		return p.recoverOverflow(w, r, x, pl, req)
	}
	x.recoverServer = func(w http.ResponseWriter, _ *http.Request, why string) bool {
		return p.recoverServerShape(w, r, x, pl, req, why)
	}
	if mode == ledger.ModeObserve {
		// Observe mode (docs/design.md §10): the client's bytes go
		// upstream; ctxd's context was built and is only entered in the
		// ledger. No recovery, no provider compaction: nothing of ctxd's
		// reaches the provider.
		pl.observe = true
		x.body, x.hideUsage, x.server, x.beta, x.recover, x.recoverServer = req.clientBody(), false, false, "", nil, nil
	}
	w.Header().Set(HeaderSessionID, pl.b.id)
	if pl.diag != "" {
		w.Header().Set(HeaderDiagnostic, headerSafe(pl.diag))
	}
	if pl.staged != nil {
		// The request's record is written as soon as the upstream
		// accepts it, beside the answer's forwarding (trail.go).
		x.onAccept = func() { p.commitAsync(pl) }
	}
	p.rp.ServeHTTP(w, r.WithContext(withExchange(r.Context(), x)))
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
		defer bb.release()
		defer p.release(l)
		defer l.unlock()
		if x.accepted && pl.prev != nil {
			p.supersede(ctx, pl.prev, pl.b)
		}
		if x.accepted && !p.commitRequest(ctx, pl) {
			// The request is not in the log: neither is its answer (the
			// history would have a gap); the client resends both.
			return
		}
		if pl.b.pendingLimit > 0 && p.isAccepted(fp) {
			p.applyPendingLimit(ctx, pl.b)
		}
		p.recordAnswer(ctx, pl, x, req)
	})
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

// contextLimitHeader reads the X-Ctxd-Context-Limit header of h: 0 when
// absent; an error naming the header and the accepted range (tokens,
// engine.MinContextLimit to engine.MaxContextLimit) when it is not a
// whole number in it.
func contextLimitHeader(h http.Header) (uint64, error) {
	vs := h.Values(HeaderContextLimit)
	if len(vs) == 0 {
		return 0, nil
	}
	v := strings.TrimSpace(vs[0])
	n, err := strconv.ParseUint(v, 10, 64)
	if len(vs) > 1 || err != nil || n < engine.MinContextLimit || n > engine.MaxContextLimit {
		return 0, fmt.Errorf("%s: %q is not a context window: give one whole number of tokens from %d to %d", HeaderContextLimit, strings.Join(vs, ", "), engine.MinContextLimit, engine.MaxContextLimit)
	}
	return n, nil
}

// hasCredential reports whether h carries a credential for the upstream
// (x-api-key or Authorization).
func hasCredential(h http.Header) bool {
	return strings.TrimSpace(h.Get("X-Api-Key")) != "" || strings.TrimSpace(h.Get("Authorization")) != ""
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
	p.creds.mu.Lock()
	if c := p.creds.m[pl.b.id]; c != nil {
		c.release()
		delete(p.creds.m, pl.b.id)
	}
	p.creds.mu.Unlock()
	p.quotaForget(pl.b.id)
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

// readBody reads a managed request's body, at most limit bytes. With a
// Content-Length it reads into buffers from the pools of their size
// classes (getBodyBuf; io.ReadAll would allocate and zero new ones),
// doubling as the bytes arrive up to that length: a client that announces
// a large body and sends it slowly holds at most twice what it sent, not
// what it announced. The caller releases the returned *bodyBuf (nil when
// not pooled) when the request is done.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *bodyBuf, error) {
	rd := http.MaxBytesReader(w, r.Body, limit)
	n := r.ContentLength
	if n <= 0 || n > limit {
		b, err := io.ReadAll(rd)
		return b, nil, err
	}
	var (
		bb  *bodyBuf
		buf []byte
		got int
	)
	for size := min(int(n), firstBodyChunk); ; size = min(2*size, int(n)) {
		nbb := getBodyBuf(size)
		var nbuf []byte
		if nbb != nil {
			nbuf = nbb.b
		} else {
			nbuf = make([]byte, size)
		}
		copy(nbuf, buf[:got])
		bb.release()
		bb, buf = nbb, nbuf
		k, err := io.ReadFull(rd, buf[got:])
		got += k
		if err != nil {
			bb.release()
			return nil, nil, err
		}
		if size == int(n) {
			break
		}
	}
	// A body longer than its Content-Length (the server refuses one; a
	// handler called directly may not): the rest too.
	var one [1]byte
	if k, _ := io.ReadFull(rd, one[:]); k == 1 {
		rest, err := io.ReadAll(rd)
		body := append(append(append(make([]byte, 0, len(buf)+1+len(rest)), buf...), one[0]), rest...)
		bb.release()
		return body, nil, err
	}
	return buf, bb, nil
}

// firstBodyChunk is the first buffer readBody reads a body into, in bytes.
const firstBodyChunk = 256 << 10

// clientBody is the client's body as it came, for the upstream.
func (r *request) clientBody() *outBody {
	return &outBody{parts: [][]byte{r.body}, n: len(r.body), buf: r.buf}
}

// passThrough forwards the client's request untouched (body, nil: as it
// came); outcome is its MetricRequests outcome.
func (p *Proxy) passThrough(w http.ResponseWriter, r *http.Request, body *outBody, outcome, diag string) {
	p.passed.Add(1)
	p.m.request(dialectOf(r), outcome)
	w.Header().Set(HeaderDiagnostic, headerSafe(diag))
	p.rp.ServeHTTP(w, r.WithContext(withExchange(r.Context(), &exchange{body: body, d: dialectOf(r), fp: fingerprint(p.secret, r.Header)})))
}

// prepare matches the request to its branch, appends what is new, and
// builds the outgoing body.
func (p *Proxy) prepare(ctx context.Context, l *lane, req *request, h http.Header, fp, agent string) (_ *plan, err error) {
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
	if err := p.load(ctx, l); err != nil {
		return nil, err
	}
	cs := chainsWith(&l.digests, req.messages, req.d.MatchKey)
	req.marked, req.changedAt = l.digests.marked, l.digests.changed
	m := len(req.messages)
	pl := &plan{n: m, chain: cs[m], hideUsage: req.d == dialectChat && req.stream && len(req.streamOptions) == 0}
	from := 0
	// The newest branch that the request extends.
	for i := len(l.branches) - 1; i >= 0 && pl.b == nil; i-- {
		b := l.branches[i]
		n := b.rec.N
		if n == 0 || n > m || hex.EncodeToString(cs[n][:]) != b.rec.Chain {
			continue
		}
		switch {
		case m == n:
			pl.b, from, pl.resend = b, m, true
		case b.rec.Resp == nil:
			pl.b, from = b, n
		default:
			if k := req.d.AnswerLen(req.messages, n, b.rec.Resp.equal); k > 0 {
				pl.b, from = b, n+k
			}
		}
	}
	reuse := false
	if k := len(l.branches); pl.b == nil && k > 0 && l.branches[k-1].unrecorded {
		pl.b, from, reuse = l.branches[k-1], 0, true
	}
	var msgs []history.Message
	if from < m {
		var err error
		if msgs, err = req.d.Parse(req.messages, max(from, req.prefix)); err != nil {
			return nil, err
		}
	}
	if vs := clientViolations(req, msgs, from); len(vs) > 0 {
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
		pl.tail, pl.clientRule, msgs = req.messages[from:], vs.Err(), nil
	}
	var grow uint64
	if !pl.resend && pl.tail == nil {
		for i := from; i < m; i++ {
			grow += uint64(len(req.messages[i]))
		}
		if err := p.quotaGrow(ctx, fp, "bytes", grow); err != nil {
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
			if msgs, err = req.d.Parse(req.messages, max(fork.at, req.prefix)); err != nil {
				return nil, err
			}
		}
	} else {
		if reuse {
			// As a new branch: dropped again when the upstream refuses.
			pl.b.unrecorded = false
			pl.created = true
			created = pl
			p.quotaCount(fp, pl.b.id)
		} else {
			// A stored branch of this credential's conversation exists
			// only because the upstream accepted a request of it
			// (dropBranch): the credential was authenticated, before a
			// restart too.
			p.accept(fp)
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
	if n, _ := contextLimitHeader(h); n > 0 && !hasCredential(h) {
		note := fmt.Sprintf("%s not honoured: the request carries no credential (x-api-key or Authorization); the window is the model's", HeaderContextLimit)
		if pl.diag != "" {
			note = pl.diag + "; " + note
		}
		pl.diag = note
	}
	return pl, nil
}

// parseMessages converts the client's Anthropic messages from index from
// on. Tool names come from the assistant message before from, when there
// is one.
func parseMessages(raw []json.RawMessage, from int) ([]history.Message, error) {
	return dialectAnthropic.Parse(raw, from)
}

// newBranch starts a ctxd session for a conversation the proxy has not
// recorded, or whose client rewrote its history: the session holds the
// client's whole list from the start, or, forked from a branch (forkedFrom)
// that accounted for a prefix of it, that branch's log up to there
// (forkPoint: its checkpoints are inherited, the fork says how many of the
// client's messages they hold). The branch it was forked from records
// that it was superseded.
func (p *Proxy) newBranch(ctx context.Context, l *lane, req *request, h http.Header, fp, agent string, cs []digest) (*branch, *branch, forkAt, error) {
	k := len(l.branches)
	labels := map[string]string{engine.LabelProxy: req.d.Name(), "proxy.credential": fp[:12], "proxy.model": req.model}
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
	params := engine.CreateParams{Model: req.model, System: req.d.SystemText(req.system, req.messages[:req.prefix]), Tools: req.d.Tools(req.tools), Labels: labels,
		Provider: engine.ProviderOpenAI, WireContextLimit: wireContextLimit(h)}
	if req.d.Upstream() == "anthropic" {
		params.Provider = engine.ProviderAnthropic
	}
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
	n, _ := contextLimitHeader(h)
	pending := uint64(0)
	if n > 0 && hasCredential(h) {
		if p.isAccepted(fp) {
			params.ContextLimit = n
		} else {
			pending = n
		}
	}
	if err := p.quotaCheck(ctx, fp); err != nil {
		return nil, nil, forkAt{}, err
	}
	var err error
	for tries := 0; ; tries++ {
		params.ID = sessionID(p.secret, l.key, k)
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
	p.quotaCount(fp, b.id)
	b.sysDigest, b.toolsDigest = prefixDigest(req), sha256.Sum256(req.tools)
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

// maxBranchGap bounds the existing session names newBranch steps over.
const maxBranchGap = 64

// syncPrefix gives the engine a changed system prompt or tool set (a
// recorded rewrite, docs/design.md §4), so its estimate counts them.
func (p *Proxy) syncPrefix(ctx context.Context, b *branch, req *request) error {
	sd, td := prefixDigest(req), sha256.Sum256(req.tools)
	if sd == b.sysDigest && td == b.toolsDigest {
		return nil
	}
	sys, tools := req.d.SystemText(req.system, req.messages[:req.prefix]), req.d.Tools(req.tools)
	_, err := p.eng.UpdateSession(ctx, b.id, engine.Patch{System: &sys, Tools: &tools})
	var fe *engine.FieldError
	if errors.As(err, &fe) && strings.HasPrefix(fe.Field, "tools") {
		_, err = p.eng.UpdateSession(ctx, b.id, engine.Patch{System: &sys})
	}
	if err != nil {
		return fmt.Errorf("updating the system prompt and tools: %w", err)
	}
	b.sysDigest, b.toolsDigest = sd, td
	return nil
}

// assemble asks the engine for the context (the pre-send check, docs/design.md
// §5.1, may compact first) and renders the outgoing body: the client's
// body with only messages replaced.
func (p *Proxy) assemble(ctx context.Context, pl *plan, req *request) (*outBody, string, error) {
	a, err := p.eng.Context(ctx, pl.b.id, engine.ContextOptions{})
	if err != nil {
		return nil, "", fmt.Errorf("assembling the context: %w", err)
	}
	msgs := a.Messages
	pl.limit, pl.threshold = a.ContextLimit, a.Threshold
	req.checked = &a.Checked
	pl.tokens, pl.window = a.Tokens, a.ContextLimit
	if pl.resend && pl.b.rec.Resp != nil && len(msgs) > 0 && msgs[len(msgs)-1].Role == history.RoleAssistant {
		// A resend of a request already answered: send it as it was, not
		// with the recorded answer after it.
		msgs, req.checked = msgs[:len(msgs)-1], nil
	}
	if pl.tail != nil {
		// ctxd's context answers the client's messages before the tail:
		// markers and the client's bytes are aligned on those.
		full := req.messages
		req.messages, req.tail = full[:len(full)-len(pl.tail)], pl.tail
		defer func() { req.messages, req.tail = full, nil }()
	}
	enc, err := p.render(pl.b, msgs, req)
	req.checked = nil
	if err != nil {
		return nil, "", err
	}
	var out *outBody
	if req.spliced != nil {
		out, req.spliced = req.spliced, nil
	} else {
		out = bodyOf(req.withMessages(enc))
	}
	if pl.hideUsage {
		out = bodyOf(chat.WithIncludeUsage(out.bytes()))
	}
	out = p.withServerShape(ctx, pl, req, out)
	return out, a.Diagnostic, nil
}

// renderAnthropic checks docs/design.md §4a for the thinking setting the client
// sent (the engine checked the rules that hold either way; its check is
// reused when req.checked is set), renders the messages, places the
// client's cache markers and encodes them.
func (p *Proxy) renderAnthropic(b *branch, msgs []history.Message, req *request) ([]byte, error) {
	rules := history.Rules{Thinking: anthropic.ThinkingMode(req.thinking)}
	var vs history.Violations
	if req.checked != nil {
		vs = req.checked.Violations(rules)
	} else {
		vs = history.CheckRequest(history.Sendable(msgs), rules)
	}
	if err := vs.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", errViolation, err)
	}
	out, err := p.renderWire(b, msgs)
	if err != nil {
		return nil, err
	}
	anthropic.PlaceMarkers(out, req.messages)
	return p.encode(b, out, req, p.indexClient(b, req))
}

// renderCache is a branch's last rendering: the engine messages, as keys,
// and their Anthropic rendering without cache markers.
type renderCache struct {
	keys []renderKey
	wire []anthropic.Message
}

// renderKey is an engine message as anthropic.Render reads it: role, tool
// call id, error flag and blocks, the blocks by address and length. The
// engine never changes a block in place (a rendering that differs — an
// elided result, withheld thinking — is a new slice), and the key holds
// the blocks, so an equal key is the same message.
type renderKey struct {
	role    history.Role
	id      string
	isError bool
	content []history.Block
}

func keyOfMessage(m *history.Message) renderKey {
	return renderKey{role: m.Role, id: m.ToolCallID, isError: m.IsError, content: m.Content}
}

func (k *renderKey) same(m *history.Message) bool {
	return k.role == m.Role && k.id == m.ToolCallID && k.isError == m.IsError && len(k.content) == len(m.Content) &&
		(len(m.Content) == 0 || &k.content[0] == &m.Content[0])
}

// renderWire is anthropic.Render(msgs).Messages. When the messages the
// branch rendered last are a prefix of msgs, unchanged (between recorded
// rewrites, docs/design.md §4), only the rest is rendered, after the cached
// rendering (anthropic.AppendMessages). The last anthropic.MarkerReach messages of
// the result have their own copy of their blocks, for anthropic.PlaceMarkers; the
// rest share the cache's and must not be changed. Called under the lane's
// lock. With verifyEncoding (tests) it compares its result with
// anthropic.Render's and returns an error when they differ.
func (p *Proxy) renderWire(b *branch, msgs []history.Message) ([]anthropic.Message, error) {
	p.mu.Lock()
	c := b.rendered
	p.mu.Unlock()
	k := 0
	if c != nil && len(c.keys) <= len(msgs) {
		k = len(c.keys)
		for i := 0; i < k; i++ {
			if !c.keys[i].same(&msgs[i]) {
				k = 0
				break
			}
		}
	}
	keys := make([]renderKey, 0, len(msgs))
	base := []anthropic.Message{}
	if k > 0 {
		keys = append(keys, c.keys...)
		base = make([]anthropic.Message, len(c.wire), len(c.wire)+2*(len(msgs)-k)+1)
		copy(base, c.wire)
		if n := len(base); n > 0 {
			// A tool result may join the last message: on a new array.
			base[n-1].Content = slices.Clip(base[n-1].Content)
		}
	}
	wire := anthropic.AppendMessagesWith(base, msgs[k:], anthropic.Carry)
	if verifyEncoding {
		if full := anthropic.RenderWith("", nil, msgs, anthropic.Carry).Messages; !reflect.DeepEqual(wire, full) {
			return nil, fmt.Errorf("proxy: the rendering extended from %d cached messages differs from a full one", k)
		}
	}
	for i := k; i < len(msgs); i++ {
		keys = append(keys, keyOfMessage(&msgs[i]))
	}
	p.mu.Lock()
	b.rendered = &renderCache{keys: keys, wire: wire}
	p.mu.Unlock()
	out := slices.Clone(wire)
	for i := max(0, len(out)-anthropic.MarkerReach); i < len(out); i++ {
		out[i].Content = slices.Clone(out[i].Content)
	}
	return out, nil
}

// indexClient records, for the client's messages of req not yet indexed on
// b, the digest of the marker-free encoding of ctxd's rendering of each
// (one client message rendering to one wire message) → its indexes, in
// order, and whether each is plain text. An outgoing message with the same
// rendering is then sent as the client's own bytes (encode): what ctxd has not rewritten passes through
// byte-identical — document blocks, text citations and every field the
// canonical model does not keep, key order and spacing (docs/proxy.md).
// After a restart or a new branch the whole list is indexed once. It
// returns the index. Called under the lane's lock.
func (p *Proxy) indexClient(b *branch, req *request) *clientIndex {
	p.mu.Lock()
	idx, n := b.rawIdx, b.rawN
	p.mu.Unlock()
	if idx == nil || n > len(req.messages) || (req.changedAt >= 0 && req.changedAt < n) {
		idx, n = &clientIndex{keys: map[digest][]int{}}, 0
	}
	idx.plain = slices.Grow(idx.plain[:min(n, len(idx.plain))], len(req.messages)-n)[:len(req.messages)]
	idx.verbatim = slices.Grow(idx.verbatim[:min(n, len(idx.verbatim))], len(req.messages)-n)[:len(req.messages)]
	for k := n; k < len(req.messages); k++ {
		idx.verbatim[k] = anthropic.Role(req.messages[k]) == "system"
		idx.plain[k] = !idx.verbatim[k] && wire.PlainText(req.messages[k])
	}
	for k := max(n, req.prefix); k < len(req.messages); k++ {
		if d, results, ok := anthropic.ClientKey(req.messages[k]); ok {
			idx.keys[d] = append(idx.keys[d], k)
			if results {
				idx.indexResults(req.messages[k])
			}
		}
	}
	p.mu.Lock()
	b.rawIdx, b.rawN = idx, len(req.messages)
	p.mu.Unlock()
	return idx
}

// indexResults records each tool_result block of the client's user
// message raw that has a member the canonical model does not keep
// (anthropic.ClientResults): its tool_use_id → the block without its
// marker and the digest of ctxd's marker-free rendering of it
// (clientIndex.results).
func (idx *clientIndex) indexResults(raw json.RawMessage) {
	anthropic.ClientResults(raw, func(id string, block []byte, key digest) {
		if idx.results == nil {
			idx.results = map[string]clientResult{}
		}
		idx.results[id] = clientResult{raw: block, key: key}
	})
}

// clientResult is a client's tool_result block kept by indexResults.
type clientResult struct {
	raw []byte // the block as the client sent it, without its marker
	key digest // of ctxd's marker-free rendering of it
}

// withClientResults is the encoding of the outgoing user message m, which
// is not a client message unchanged (a tool result in it was rewritten),
// with each tool_result block of a client's block kept by indexResults sent
// as the client's block, its fields the canonical model lacks
// (cache_reference) and key order kept, ctxd's marker after it: byte for
// byte when ctxd's rendering of it is unchanged, else with ctxd's content
// (an offloaded result's stub) in place of the client's. nil when no block
// is the client's.
func withClientResults(idx *clientIndex, m *anthropic.Message) ([]byte, error) {
	if len(idx.results) == 0 || m.Role != "user" {
		return nil, nil
	}
	var c []anthropic.Block
	for j := range m.Content {
		b := m.Content[j]
		if b.Type != "tool_result" || len(b.Raw) > 0 {
			continue
		}
		r, ok := idx.results[b.ToolUseID]
		if !ok {
			continue
		}
		b.CacheControl = nil
		e, err := json.Marshal(&b)
		if err != nil {
			return nil, err
		}
		raw := r.raw
		if sha256.Sum256(e) != r.key {
			if raw = anthropic.WithContent(r.raw, b.Content); raw == nil {
				continue
			}
		}
		if c == nil {
			c = slices.Clone(m.Content)
		}
		c[j] = anthropic.Block{Type: b.Type, Raw: raw, CacheControl: m.Content[j].CacheControl}
	}
	if c == nil {
		return nil, nil
	}
	return json.Marshal(&anthropic.Message{Role: m.Role, Content: c})
}

// clientIndex is a branch's index of the client's messages (indexClient):
// keys maps the digest of ctxd's rendering of a message to its indexes, in
// order; plain[k] says whether message k is plain text (plainText).
type clientIndex struct {
	keys  map[digest][]int
	plain []bool
	// results maps the tool_use_id of a client's tool_result block with a
	// member the canonical model lacks to that block (indexResults).
	results map[string]clientResult
	// verbatim[k]: message k goes out as the client's bytes, markers
	// included, whatever ctxd placed on its rendering: a "system" message
	// (Claude Code's), which ctxd reads as user text and would otherwise
	// send as a user message without its markers.
	verbatim []bool
}

// encode is json.Marshal(wire), reusing the encoding of every message equal
// to one the branch sent before: between recorded rewrites the context is
// an extension of the previous one (docs/design.md §4), so only the new messages
// (and those whose cache markers moved) are encoded. A message's encoding
// depends on nothing but the message, so equality is the whole rule.
//
// A message that is ctxd's rendering of a client message it has not
// rewritten goes out as the client's own bytes (anthropic.ClientBytes).
func (p *Proxy) encode(b *branch, wire []anthropic.Message, req *request, idx *clientIndex) ([]byte, error) {
	p.mu.Lock()
	old := b.enc
	p.mu.Unlock()
	next := make([]cachedMessage, len(wire))
	parts := make([][]byte, len(wire))
	for i := range wire {
		if i < len(old) && anthropic.EqualMessage(&old[i].msg, &wire[i]) {
			next[i] = old[i]
		} else {
			e, err := json.Marshal(&wire[i])
			if err != nil {
				return nil, err
			}
			key, err := anthropic.MarkerFreeDigest(&wire[i], e)
			if err != nil {
				return nil, err
			}
			next[i] = cachedMessage{msg: wire[i], enc: e, key: key}
		}
	}
	// Aligned from the end, as the client's list and the assembled context
	// end alike: each outgoing message takes the latest client message
	// before the one the next took with the same rendering (a rendering
	// twice in the list — "ok" with and without citations — takes its own).
	lastK := len(req.messages)
	for i := len(wire) - 1; i >= 0; i-- {
		parts[i] = next[i].enc
		ks := idx.keys[next[i].key]
		j, _ := slices.BinarySearch(ks, lastK)
		if j == 0 {
			c, err := withClientResults(idx, &wire[i])
			if err != nil {
				return nil, err
			}
			if c != nil {
				parts[i] = c
			}
			continue
		}
		k := ks[j-1]
		lastK = k
		unmarked := k < len(req.marked) && !req.marked[k]
		if c := anthropic.ClientBytes(req.messages[k], &wire[i], idx.verbatim[k], idx.plain[k], unmarked); c != nil {
			parts[i] = c
		}
	}
	// The outgoing body (request.spliced) is these parts between the
	// client's prefix and suffix, not copied into one buffer (outBody).
	body := &outBody{parts: make([][]byte, 0, 2*len(parts)+3), buf: req.buf}
	body.add(req.body[:req.msgStart])
	msgs := len(body.parts)
	body.add(arrOpen)
	for i, c := range parts {
		if i > 0 {
			body.add(arrComma)
		}
		body.add(c)
	}
	for i, c := range req.tail {
		if i > 0 || len(parts) > 0 {
			body.add(arrComma)
		}
		body.add(c)
	}
	body.add(arrClose)
	var out []byte
	if verifyEncoding {
		out = (&outBody{parts: body.parts[msgs:]}).bytes()
	}
	body.add(req.body[req.msgEnd:])
	req.spliced = body
	if verifyEncoding {
		for i := range wire {
			if want, _ := json.Marshal(&wire[i]); !bytes.Equal(next[i].enc, want) {
				return nil, fmt.Errorf("proxy: cached encoding of message %d differs from json.Marshal", i)
			}
		}
		if !json.Valid(out) {
			return nil, fmt.Errorf("proxy: outgoing messages are not JSON")
		}
	}
	p.keepEncoding(b, next)
	return out, nil
}

var (
	arrOpen  = []byte("[")
	arrComma = []byte(",")
	arrClose = []byte("]")
)

// verifyEncoding makes encode compare its result with json.Marshal (tests).
var verifyEncoding = false

// cachedMessage is a message sent, its JSON encoding, and the digest of
// its encoding without cache markers (anthropic.MarkerFreeDigest).
type cachedMessage struct {
	msg anthropic.Message
	enc []byte
	key digest
}

// maxEncodingCaches bounds the branches that keep their last encoding (about
// the size of their context each).
const maxEncodingCaches = 32

// keepEncoding stores b's encoding and drops the oldest other branch's
// beyond maxEncodingCaches.
func (p *Proxy) keepEncoding(b *branch, enc []cachedMessage) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b.enc = enc
	p.encOrder = slices.DeleteFunc(p.encOrder, func(x *branch) bool { return x == b })
	p.encOrder = append(p.encOrder, b)
	for len(p.encOrder) > maxEncodingCaches {
		p.encOrder[0].enc = nil
		p.encOrder[0].rawIdx, p.encOrder[0].rawN = nil, 0
		p.encOrder[0].itemIdx, p.encOrder[0].itemN = nil, 0
		p.encOrder[0].rendered = nil
		p.encOrder = p.encOrder[1:]
	}
}

// recoverOverflow is the overflow recovery (docs/design.md §10): the
// provider's figures go to the session (its count corrects the estimate, a
// window it names is learned), then an overflow compaction, and the
// request is retried once — only when it is now under the window by the
// provider's count with a margin (OverflowMargin); otherwise a deeper
// compaction that retains nothing, and if even that leaves it over, no
// retry. False when no retry was sent; the caller then passes the
// provider's error on, with a Ctxd-Diagnostic saying why
// (docs/decisions.md "Overflow recovery retries only what fits").
func (p *Proxy) recoverOverflow(w http.ResponseWriter, r *http.Request, x *exchange, pl *plan, req *request) bool {
	ctx := r.Context()
	count, limit := req.d.ContextLengthFigures(x.ovBody)
	if _, err := p.eng.ObserveOverflow(ctx, pl.b.id, engine.Overflow{Count: count, Limit: limit}); err != nil {
		p.log.Warn("recording the overflow's figures", "session", pl.b.id, "err", err)
	}
	before := pl.tokens
	fail := func(why string) bool {
		p.log.Warn("overflow not retried; the provider's error goes to the client", "session", pl.b.id, "why", why)
		w.Header().Set(HeaderDiagnostic, headerSafe("overflow not recovered: "+why))
		p.m.overflow(req.d, false)
		return false
	}
	var (
		out  *outBody
		diag string
	)
	for pass := 0; ; pass++ {
		var err error
		if pass == 0 {
			_, err = p.eng.Compact(ctx, pl.b.id, trigger.Overflow, true)
		} else {
			_, err = p.eng.CompactDeeper(ctx, pl.b.id)
		}
		// A stalled compaction wrote its checkpoint: whether the retry
		// fits is the test below.
		if err != nil && !errors.Is(err, engine.ErrStalled) && (pass == 0 || !errors.Is(err, engine.ErrNothingToCompact)) {
			return fail("the overflow compaction failed: " + err.Error())
		}
		if out, diag, err = p.assemble(ctx, pl, req); err != nil {
			return fail("the retry could not be built: " + err.Error())
		}
		target, of := overflowTarget(pl.window, count, before)
		if pl.tokens <= target {
			break
		}
		if pass == 1 {
			return fail(fmt.Sprintf("after the overflow compaction the request is still %d tokens by the provider's count, over %s: a retry would be refused again", pl.tokens, of))
		}
	}
	pl.out = out
	x.body, x.retried, x.overflow = out, true, nil
	x.server, x.beta = pl.server, pl.beta
	if diag != "" {
		w.Header().Set(HeaderDiagnostic, headerSafe(diag))
	}
	p.m.overflow(req.d, true)
	// Counted recovered or failed by modifyResponse when the retry's
	// answer arrives, before any byte of it reaches the client.
	p.rp.ServeHTTP(w, r.WithContext(withExchange(ctx, x)))
	return true
}

// OverflowMargin is the share of the context window an overflow retry
// keeps free by the provider's count: the estimate of what changed since
// the provider counted errs, and a retry refused again costs the agent
// its answer.
const OverflowMargin = 0.05

// overflowTarget is the most tokens an overflow retry may carry, and what
// it is, in words: the window less OverflowMargin; with no window known,
// a tenth under the provider's count of the refused request (or ctxd's
// estimate of it, when the provider gave no count).
func overflowTarget(window, count, before uint64) (uint64, string) {
	if window > 0 {
		t := uint64(float64(window) * (1 - OverflowMargin))
		return t, fmt.Sprintf("the window of %d tokens less a %.0f %% margin (%d)", window, OverflowMargin*100, t)
	}
	ref, what := count, "the provider's count of the refused request"
	if ref == 0 {
		ref, what = before, "ctxd's estimate of the refused request"
	}
	t := ref * 9 / 10
	return t, fmt.Sprintf("a tenth under %s, %d tokens (%d)", what, ref, t)
}

// recordAnswer appends the answer, rebuilt from what passed, with its
// usage (the post-check, docs/design.md §5.1), or records the upstream's error.
func (p *Proxy) recordAnswer(ctx context.Context, pl *plan, x *exchange, req *request) {
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
	case x.buf != nil && !x.buf.over && x.status < 300:
		m, inError, err = x.d.DecodeAnswer(x.buf.Bytes())
		read = true
	}
	if read && err == nil && inError == "" && x.status < 300 {
		if en := p.recordLedger(ctx, pl, req, m.Usage); en != nil && pl.observe && !en.Cold {
			m.Usage = projectedUsage(en)
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
	case err != nil || !read:
		p.log.Info("answer not recorded", "session", pl.b.id, "err", err)
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
		rec.Resp = sigOf(m)
		rec.LastError = ""
	}
	st, _ := json.Marshal(rec)
	if _, err := p.eng.AppendWith(ctx, pl.b.id, msgs, engine.AppendOptions{ClientState: st}); err != nil {
		// The client resends the answer with its next request, which is
		// then appended like any new message.
		p.log.Warn("answer not recorded", "session", pl.b.id, "err", err)
		return
	}
	pl.b.rec, pl.b.state = rec, st
	var n uint64
	for _, m := range msgs {
		for _, b := range m.Content {
			n += uint64(len(b.Text) + len(b.Input) + len(b.Signature))
		}
	}
	p.quotaAdd(x.fp, pl.b.id, n)
}

// upstreamError is a one-line record of an upstream error: the status and
// the provider's message (error bodies carry no credential; headers are
// never read).
func upstreamError(d dialect, status int, body []byte) string {
	msg := strings.TrimSpace(string(body))
	if d == nil {
		d = dialectAnthropic
	}
	if e, ok := d.ErrorMessage(body); ok {
		msg = e
	}
	if len(msg) > 300 {
		msg = msg[:300] + "…"
	}
	return fmt.Sprintf("upstream status %d: %s", status, msg)
}

// headerSafe makes s one header line.
func headerSafe(s string) string {
	// ASCII only: header values are bytes, and clients read them as
	// Latin-1 ("≥" arrived as "â¥"); cut at 500 bytes, on a character.
	s = strings.Map(func(r rune) rune {
		switch {
		case r < 0x20 || r == 0x7f:
			return ' '
		case r > 0x7f:
			return '?'
		}
		return r
	}, headerASCII.Replace(s))
	if len(s) > 500 {
		s = s[:500]
	}
	return s
}
