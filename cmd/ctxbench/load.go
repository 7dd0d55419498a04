package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/ctxd/ctxd/api"
)

// loadOptions are the parameters of the load run.
type loadOptions struct {
	agents       int
	rate         float64 // appends per second per agent; 0: as fast as possible
	contextLimit uint64
	duration     time.Duration // 0: no time bound
	maxRequests  int           // per agent; 0: no bound
	model        string
	prefix       string // session id prefix, unique per run
	timeout      time.Duration
	scripts      func(agent int) *script
	// poisson spaces an agent's appends by exponential gaps of mean
	// 1/rate (--arrivals poisson) instead of exactly 1/rate; seed seeds
	// each agent's gaps (agent i: seed, i).
	poisson bool
	seed    uint64
}

// sessionRecord is one session an agent wrote and what the daemon
// acknowledged in it, in order.
type sessionRecord struct {
	id    string
	acked []stored
}

// agentResult is what one simulated agent measured.
type agentResult struct {
	appendLat, contextLat []time.Duration
	// crossLat are the latencies of the context reads at a compaction:
	// the first read of a session after its context reached the
	// threshold (a new checkpoint, a pre-send diagnostic, or a context
	// still at or over the threshold).
	crossLat          []time.Duration
	appends, messages int
	// overWindow and queuedBehind count context reads over the window and
	// those whose compaction was queued behind others.
	overWindow, queuedBehind int
	sessions                 []sessionRecord
	errors                   map[string]int
	firstErr                 error
}

// agent is one simulated agent: it replays its script against ctxd through
// its own api.Client (one process per agent in real life, hence one
// connection pool each).
type agent struct {
	idx      int
	c        *api.Client
	opt      *loadOptions
	deadline time.Time // zero: none
	requests int
	next     time.Time  // when the next append may start (rate)
	rng      *rand.Rand // the agent's gaps under --arrivals poisson
	res      agentResult
}

// stopped reports whether the agent must make no further request.
func (a *agent) stopped() bool {
	if a.res.firstErr != nil {
		return true
	}
	if a.opt.maxRequests > 0 && a.requests >= a.opt.maxRequests {
		return true
	}
	return !a.deadline.IsZero() && !time.Now().Before(a.deadline)
}

// fail records a request's error; the agent stops after it, because what
// it would append next may no longer fit its session (an open tool round).
func (a *agent) fail(what string, err error) {
	code := api.ErrorCode(err)
	if code == "" {
		code = "other"
	}
	a.res.errors[code]++
	a.res.firstErr = fmt.Errorf("agent %d: %s: %w", a.idx, what, err)
}

// reqCtx bounds one request. It does not derive from the run's duration:
// a request under way when the time is up completes, so that everything
// the daemon stored was also acknowledged.
func (a *agent) reqCtx(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(parent), a.opt.timeout)
}

// pace waits until the next append may start under --rate. It returns
// false when the run ended meanwhile.
func (a *agent) pace(ctx context.Context) bool {
	if a.opt.rate <= 0 {
		return true
	}
	if a.stopped() {
		return false
	}
	now := time.Now()
	if a.next.After(now) {
		wait := a.next.Sub(now)
		if !a.deadline.IsZero() && a.next.After(a.deadline) {
			wait = a.deadline.Sub(now)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false
		}
		now = time.Now()
	}
	a.next = a.following(now)
	return !a.stopped()
}

// following returns when the append after one starting at now may start.
// With fixed arrivals an agent keeps its own phase: the next slot is one
// interval after the one just used, and a late append (a slow request
// before it) skips the slots it missed rather than catching up in a burst:
// the next is the first slot of the agent's grid after now. An
// agent that restarted its clock at now instead would fall in step with
// every other agent the same stall held up — they are released together
// when it ends — and from then on they would all append in the same
// instant, every interval, for the rest of the run. Poisson gaps have no
// phase to keep: the next one is drawn from now.
func (a *agent) following(now time.Time) time.Time {
	g := a.gap()
	if a.opt.poisson {
		return maxTime(a.next, now).Add(g)
	}
	next := a.next.Add(g)
	if !next.After(now) {
		next = next.Add((now.Sub(next)/g + 1) * g)
	}
	return next
}

// gap is the time between an agent's appends under --rate: exactly 1/rate
// with fixed arrivals; with Poisson arrivals an exponential draw of mean
// 1/rate from the agent's own generator.
func (a *agent) gap() time.Duration {
	mean := float64(time.Second) / a.opt.rate
	if !a.opt.poisson {
		return time.Duration(mean)
	}
	if a.rng == nil {
		a.rng = rand.New(rand.NewPCG(a.opt.seed, uint64(a.idx)))
	}
	return time.Duration(mean * a.rng.ExpFloat64())
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// appendMsgs appends msgs to the session and records what was
// acknowledged.
func (a *agent) appendMsgs(ctx context.Context, rec *sessionRecord, msgs []api.Message) bool {
	if !a.pace(ctx) {
		return false
	}
	rctx, cancel := a.reqCtx(ctx)
	defer cancel()
	a.requests++
	start := time.Now()
	resp, err := a.c.AppendMessages(rctx, rec.id, api.AppendMessagesRequest{Messages: msgs})
	if err != nil {
		a.fail("append to "+rec.id, err)
		return false
	}
	a.res.appendLat = append(a.res.appendLat, time.Since(start))
	a.res.appends++
	a.res.messages += len(resp.Messages)
	for i := range resp.Messages {
		rec.acked = append(rec.acked, stored{seq: resp.Messages[i].Seq, fp: fingerprintOf(&resp.Messages[i])})
	}
	return true
}

// run replays the script in new sessions, pass after pass, until the run
// is bounded: by its deadline or request budget, or after one pass when it
// has neither.
func (a *agent) run(ctx context.Context) {
	sc := a.opt.scripts(a.idx)
	model := a.opt.model
	if model == "" {
		model = sc.model
	}
	if model == "" {
		model = defaultModel
	}
	for pass := 0; !a.stopped() && ctx.Err() == nil; pass++ {
		rec := sessionRecord{id: fmt.Sprintf("%s-a%d-p%d", a.opt.prefix, a.idx, pass)}
		rctx, cancel := a.reqCtx(ctx)
		a.requests++
		_, err := a.c.CreateSession(rctx, api.CreateSessionRequest{ID: rec.id, Model: model, ContextLimit: a.opt.contextLimit, System: sc.system})
		cancel()
		if err != nil {
			a.fail("create session", err)
			return
		}
		a.replay(ctx, sc, &rec)
		a.res.sessions = append(a.res.sessions, rec)
		if a.deadline.IsZero() && a.opt.maxRequests == 0 {
			return
		}
	}
}

// replay runs one pass of sc in session rec.
func (a *agent) replay(ctx context.Context, sc *script, rec *sessionRecord) {
	if len(sc.head) > 0 && !a.appendMsgs(ctx, rec, sc.head) {
		return
	}
	var lastCheckpoint uint64
	for _, st := range sc.steps {
		if a.stopped() || ctx.Err() != nil {
			return
		}
		// The pre-send check, as an agent does before each model call.
		rctx, cancel := a.reqCtx(ctx)
		a.requests++
		start := time.Now()
		cr, err := a.c.Context(rctx, rec.id)
		cancel()
		if err != nil {
			a.fail("context of "+rec.id, err)
			return
		}
		lat := time.Since(start)
		a.res.contextLat = append(a.res.contextLat, lat)
		if cr.CheckpointSeq != lastCheckpoint || cr.Diagnostic != nil || (cr.Threshold > 0 && cr.Tokens.Value >= cr.Threshold) {
			a.res.crossLat = append(a.res.crossLat, lat)
		}
		lastCheckpoint = cr.CheckpointSeq
		if cr.ContextLimit > 0 && cr.Tokens.Value > cr.ContextLimit {
			a.res.overWindow++
		}
		if cr.Diagnostic != nil && strings.Contains(cr.Diagnostic.Message, "queued behind others") {
			a.res.queuedBehind++
		}
		// The provider reports the size of what it was sent: the context
		// just read, plus the response's own output.
		resp := st.response
		resp.Usage = &api.Usage{InputTokens: cr.Tokens.Value, OutputTokens: st.outputTokens}
		if a.stopped() || !a.appendMsgs(ctx, rec, []api.Message{resp}) {
			return
		}
		if len(st.after) > 0 && (a.stopped() || !a.appendMsgs(ctx, rec, st.after)) {
			return
		}
	}
}

// runAgents runs opt.agents agents concurrently and returns their results.
func runAgents(ctx context.Context, newClient func() *api.Client, opt *loadOptions) []agentResult {
	var deadline time.Time
	if opt.duration > 0 {
		deadline = time.Now().Add(opt.duration)
	}
	results := make([]agentResult, opt.agents)
	var wg sync.WaitGroup
	for i := range opt.agents {
		wg.Go(func() {
			a := &agent{idx: i, c: newClient(), opt: opt, deadline: deadline, res: agentResult{errors: map[string]int{}}}
			if opt.rate > 0 {
				// Spread the agents' first appends evenly over one
				// interval: agents started together would otherwise
				// append in lockstep, a burst of N every interval.
				a.next = time.Now().Add(time.Duration(float64(time.Second) / opt.rate * float64(i) / float64(opt.agents)))
			}
			a.run(ctx)
			results[i] = a.res
		})
	}
	wg.Wait()
	return results
}
