package proxy

import (
	"context"
	"encoding/json"

	"github.com/ctxd/ctxd/engine"
)

// An answer's durable record trails its response (docs/design.md §10
// "Recorded when accepted"; docs/decisions.md "The answer's record after
// the response"): the handler returns once the answer's last byte is
// forwarded (on HTTP/1.1 the last chunk is written only then), and the
// record is written after it, under the conversation's lane, which the
// conversation's next request waits for.

// trailHook, when set (tests), runs before each trailing record.
var trailHook func()

// trail runs f after the handler returns, counted for WaitRecords.
func (p *Proxy) trail(f func()) {
	p.trailing.Add(1)
	hook := trailHook
	go func() {
		defer p.trailing.Done()
		if hook != nil {
			hook()
		}
		f()
	}()
}

// WaitRecords waits until every answer whose response has ended is
// recorded, or until ctx ends (then it returns ctx's error and the records
// still running go on). Call it after the proxy's listeners stopped
// serving (http.Server.Shutdown) and before the engine closes.
func (p *Proxy) WaitRecords(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		p.trailing.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A request's record is staged (engine.Stage) before it is forwarded, its
// write starts once the upstream accepted it, beside the answer's
// forwarding, and a refusal discards it (docs/design.md §10 "Recorded when
// accepted"; docs/decisions.md "A request is durable once the upstream
// accepted it"). The answer's record is written after the request's.

// stagedRequest is a request's staged append and what the branch held
// before it, restored when it is discarded.
type stagedRequest struct {
	st    *engine.Staged
	rec   record
	state json.RawMessage
	chain []digest
	// fp and grow are the credential and bytes its quota counts once
	// the append is stored.
	fp   string
	grow uint64
	// committed: the append is stored (guarded by the lane's lock, set
	// by commitRequest).
	committed bool
}

// commitAsync starts the durable write of pl's staged request, counted
// for WaitRecords. Called once the upstream accepted the request.
func (p *Proxy) commitAsync(pl *plan) {
	st := pl.staged.st
	p.trailing.Add(1)
	go func() {
		defer p.trailing.Done()
		// Errors are seen again by commitRequest, which waits for this
		// write.
		_ = st.Commit(context.Background())
	}()
}

// commitRequest makes pl's staged request durable (waiting for the write
// commitAsync started) and counts its bytes. It reports whether the
// request is stored; when not (the log moved on under it, on a fleet),
// the branch's record is the one before the request. Called under the
// lane's lock.
func (p *Proxy) commitRequest(ctx context.Context, pl *plan) bool {
	sr := pl.staged
	if sr == nil || sr.committed {
		return true
	}
	if err := sr.st.Commit(ctx); err != nil {
		p.log.Warn("request not recorded; the client's next request records it", "session", pl.b.id, "err", err)
		pl.b.rec, pl.b.state, pl.b.chain = sr.rec, sr.state, sr.chain
		pl.staged = nil
		return false
	}
	sr.committed = true
	p.quota.Add(sr.fp, pl.b.id, sr.grow)
	return true
}

// discardRequest drops pl's staged request: the upstream did not accept
// it. When another write of the session stored it first (a compaction
// the request's size triggered) it stays, counted like any other. Called
// under the lane's lock.
func (p *Proxy) discardRequest(pl *plan) {
	sr := pl.staged
	if sr == nil || sr.committed {
		return
	}
	if !sr.st.Discard() {
		sr.committed = true
		p.quota.Add(sr.fp, pl.b.id, sr.grow)
		return
	}
	pl.b.rec, pl.b.state, pl.b.chain = sr.rec, sr.state, sr.chain
	pl.staged = nil
}
