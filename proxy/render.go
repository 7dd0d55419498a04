package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/bodybuf"
	"github.com/ctxd/ctxd/wire/anthropic"
	"github.com/ctxd/ctxd/wire/openai/chat"
)

// Rendering a managed conversation for the Messages API with the
// branch's caches: the rendering extended from the last one, the client's
// messages indexed by their rendering, each message's encoding reused (the
// wire knowledge is wire/anthropic's: ClientKey, ClientBytes,
// ClientResults, PlaceMarkers).

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
	idx, err := p.indexClient(b, req)
	if err != nil {
		return nil, err
	}
	return p.encode(b, out, req, idx)
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
			e, err := anthropic.EncodeMessage(&wire[i])
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
	// client's prefix and suffix, not copied into one buffer (bodybuf.Body).
	body := bodybuf.New(req.buf, 2*len(parts)+3)
	body.Add(req.body[:req.msgStart])
	msgs := len(body.Parts)
	body.Add(arrOpen)
	for i, c := range parts {
		if i > 0 {
			body.Add(arrComma)
		}
		body.Add(c)
	}
	for i, c := range req.tail {
		if i > 0 || len(parts) > 0 {
			body.Add(arrComma)
		}
		body.Add(c)
	}
	body.Add(arrClose)
	var out []byte
	if verifyEncoding {
		out = (&bodybuf.Body{Parts: body.Parts[msgs:]}).Bytes()
	}
	body.Add(req.body[req.msgEnd:])
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

// verifyEncoding makes encode compare its result with json.Marshal (tests).
var verifyEncoding = false

// cachedMessage is a message sent, its JSON encoding, and the digest of
// its encoding without cache markers (anthropic.MarkerFreeDigest).
type cachedMessage struct {
	msg anthropic.Message
	enc []byte
	key digest
}

// keepEncoding stores b's encoding, notes the size of b's caches, and
// bounds what the proxy holds (memory.go): the least recently used other
// branches' caches go first.
func (p *Proxy) keepEncoding(b *branch, enc []cachedMessage) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b.enc = enc
	p.encOrder = slices.DeleteFunc(p.encOrder, func(x *branch) bool { return x == b })
	p.encOrder = append(p.encOrder, b)
	n := cacheBytes(b)
	p.cacheBytes += n - b.bytes
	b.bytes = n
	p.boundLocked(b)
}

var (
	arrOpen  = []byte("[")
	arrComma = []byte(",")
	arrClose = []byte("]")
)

// assemble asks the engine for the context (the pre-send check, docs/design.md
// §5.1, may compact first; not while the client compacts its own
// conversation, request.clientCompacting) and renders the outgoing body:
// the client's body with only messages replaced.
func (p *Proxy) assemble(ctx context.Context, pl *plan, req *request) (*bodybuf.Body, string, error) {
	// A staged request over the window compacts first only for a
	// credential the upstream accepted before (engine.ContextOptions.Earned).
	earned := pl.staged != nil && p.isAccepted(pl.staged.fp)
	a, err := p.eng.Context(ctx, pl.b.id, engine.ContextOptions{NoPreSend: req.clientCompacting, Earned: earned})
	if err != nil {
		return nil, "", fmt.Errorf("assembling the context: %w", err)
	}
	msgs := a.Messages
	pl.limit, pl.threshold, pl.assembledAt = a.ContextLimit, a.Threshold, a.LastSeq
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
	var out *bodybuf.Body
	if req.spliced != nil {
		out, req.spliced = req.spliced, nil
	} else {
		out = bodybuf.Of(req.withMessages(enc))
	}
	if pl.hideUsage {
		out = bodybuf.Of(chat.WithIncludeUsage(out.Bytes()))
	}
	out = p.withServerShape(ctx, pl, req, out)
	return out, a.Diagnostic, nil
}
