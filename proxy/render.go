package proxy

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/bodybuf"
	"github.com/ctxd/ctxd/wire"
)

// The rendering itself is the wire packages' (wire.Renderer): a branch
// keeps its dialect's renderer (Dialect.NewRenderer), whose caches (the
// last rendering, the encodings, the index of the client's items) the
// proxy's memory bound counts (memory.go).

// render builds the outgoing body: the client's body with the
// conversation replaced by msgs rendered (checked, when set, the engine's
// §4a check of them: engine.Assembled.Checked). msgs answer the client's
// first held messages; the others go after them as the client sent them
// (wire.RenderRequest.Tail). Errors wrap errViolation when msgs break
// docs/design.md §4a for the client's request.
func (p *Proxy) render(b *branch, msgs []history.Message, checked *history.Checked, req *request, held int) (*bodybuf.Body, error) {
	p.mu.Lock()
	r := b.r
	if b.rd != req.d {
		r = nil
	}
	p.mu.Unlock()
	if r == nil {
		r = req.d.NewRenderer()
	}
	rr := &wire.RenderRequest{Body: req.body, Buf: req.buf, MsgStart: req.MsgStart, MsgEnd: req.MsgEnd,
		Items: req.Messages[:held], Prefix: req.Prefix, Tail: req.Messages[held:], Tools: req.Tools, Thinking: req.Thinking,
		Stream: req.Stream, StreamOptions: req.StreamOptions,
		Fast: req.fast, Marked: req.marked, Checked: checked, Verify: verifyEncoding}
	if req.parsed.ends != nil {
		rr.Reading = &wire.Reading{From: req.parsed.from, Msgs: req.parsed.msgs, Ends: req.parsed.ends}
	}
	out, err := r.Render(msgs, rr)
	if err != nil {
		if errors.Is(err, history.ErrProviderRule) {
			return nil, fmt.Errorf("%w: %w", errViolation, err)
		}
		return nil, err
	}
	p.keepRenderer(b, req.d, r)
	return out, nil
}

// verifyEncoding makes the renderers compare what they cached or reused
// with what they compute from scratch (wire.RenderRequest.Verify; tests).
var verifyEncoding = false

// keepRenderer stores b's renderer r of the dialect d, notes the size of
// b's caches, and bounds what the proxy holds (memory.go): the least
// recently used other branches' caches go first.
func (p *Proxy) keepRenderer(b *branch, d dialect, r wire.Renderer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b.r, b.rd = r, d
	p.encOrder = slices.DeleteFunc(p.encOrder, func(x *branch) bool { return x == b })
	p.encOrder = append(p.encOrder, b)
	n := cacheBytes(b)
	p.cacheBytes += n - b.bytes
	b.bytes = n
	p.boundLocked(b)
}

// sendable is the assembled context a to render, and its §4a check: a
// resend of a request already answered goes as it was, without the
// answer recorded after it (nor the check, which covered it).
func sendable(a *engine.Assembled, resend bool, b *branch) ([]history.Message, *history.Checked) {
	if n := len(a.Messages); resend && b.rec.Resp != nil && n > 0 && a.Messages[n-1].Role == history.RoleAssistant {
		return a.Messages[:n-1], nil
	}
	return a.Messages, &a.Checked
}

// assemble asks the engine for the context (the pre-send check, docs/design.md
// §5.1, may compact first; not while the client compacts its own
// conversation, request.clientCompacting) and renders the outgoing body:
// the client's body with only messages replaced.
func (p *Proxy) assemble(ctx context.Context, pl *plan, req *request) (*bodybuf.Body, string, error) {
	// A staged request over the window compacts first only for a
	// credential the upstream accepted before (engine.ContextOptions.Earned).
	earned := pl.staged != nil && p.creds.Accepted(pl.staged.fp)
	a, err := p.eng.Context(ctx, pl.b.id, engine.ContextOptions{NoPreSend: req.clientCompacting, Earned: earned})
	if err != nil {
		return nil, "", fmt.Errorf("assembling the context: %w", err)
	}
	pl.limit, pl.threshold, pl.assembledAt, pl.tokens = a.ContextLimit, a.Threshold, a.LastSeq, a.Tokens
	msgs, checked := sendable(a, pl.resend, pl.b)
	// ctxd's context answers the client's messages before the tail:
	// markers and the client's bytes are aligned on those.
	out, err := p.render(pl.b, msgs, checked, req, len(req.Messages)-len(pl.tail))
	if err != nil {
		return nil, "", err
	}
	out = p.withServerShape(ctx, pl, req, out)
	return out, a.Diagnostic, nil
}
