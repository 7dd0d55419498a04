package anthropic

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"unsafe"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/bodybuf"
	"github.com/ctxd/ctxd/wire"
)

// Rendering a managed conversation for the Messages API with a branch's
// caches: the rendering extended from the last one, the client's messages
// indexed by their rendering, each message's encoding reused.

// NewRenderer is a branch's empty wire.Renderer for the Messages API.
func (Dialect) NewRenderer() wire.Renderer { return &renderer{} }

// renderer is the Messages API's wire.Renderer.
type renderer struct {
	// rendered is the rendering, before cache markers, of the context
	// last sent (extend).
	rendered *renderCache
	// enc is the last outgoing messages with their encodings (encode).
	enc []cachedMessage
	// idx is the index of the client's messages (index).
	idx *clientIndex
}

// Render checks docs/design.md §4a for the thinking setting the client
// sent (the engine checked the rules that hold either way; its check is
// reused when req.Checked is set), renders the messages, places the
// client's cache markers and encodes them, each message the client sent
// that ctxd did not rewrite as the client's bytes. Errors: a violation
// (wrapping history.ErrProviderRule), a failed encoding, or with
// req.Verify a cached result that differs from a fresh one.
func (r *renderer) Render(msgs []history.Message, req *wire.RenderRequest) (*bodybuf.Body, error) {
	rules := history.Rules{Thinking: ThinkingMode(req.Thinking)}
	var vs history.Violations
	if req.Checked != nil {
		vs = req.Checked.Violations(rules)
	} else {
		vs = history.CheckRequest(history.Sendable(msgs), rules)
	}
	if err := vs.Err(); err != nil {
		return nil, err
	}
	out, err := r.extend(msgs, req.Verify)
	if err != nil {
		return nil, err
	}
	PlaceMarkers(out, req.Items, req.Marked)
	idx, err := r.index(req, msgs)
	if err != nil {
		return nil, err
	}
	return r.encode(out, req, idx)
}

// renderCache is a branch's last rendering: the engine messages, as keys,
// and their rendering without cache markers.
type renderCache struct {
	keys []renderKey
	wire []Message
}

// renderKey is an engine message as Render reads it: role, tool call id,
// error flag and blocks, the blocks by address and length. The engine
// never changes a block in place (a rendering that differs — an elided
// result, withheld thinking — is a new slice), and the key holds the
// blocks, so an equal key is the same message.
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

// extend is Render(msgs).Messages. When the messages rendered last are a
// prefix of msgs, unchanged (between recorded rewrites, docs/design.md
// §4), only the rest is rendered, after the cached rendering
// (AppendMessagesWith). The last MarkerReach messages of the result have
// their own copy of their blocks, for PlaceMarkers; the rest share the
// cache's and must not be changed. With verify it compares its result
// with RenderWith's and returns an error when they differ.
func (r *renderer) extend(msgs []history.Message, verify bool) ([]Message, error) {
	c := r.rendered
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
	base := []Message{}
	if k > 0 {
		keys = append(keys, c.keys...)
		base = make([]Message, len(c.wire), len(c.wire)+2*(len(msgs)-k)+1)
		copy(base, c.wire)
		if n := len(base); n > 0 {
			// A tool result may join the last message: on a new array.
			base[n-1].Content = slices.Clip(base[n-1].Content)
		}
	}
	ms := AppendMessagesWith(base, msgs[k:], Carry)
	if verify {
		if full := RenderWith("", nil, msgs, Carry).Messages; !reflect.DeepEqual(ms, full) {
			return nil, fmt.Errorf("anthropic: the rendering extended from %d cached messages differs from a full one", k)
		}
	}
	for i := k; i < len(msgs); i++ {
		keys = append(keys, keyOfMessage(&msgs[i]))
	}
	r.rendered = &renderCache{keys: keys, wire: ms}
	out := slices.Clone(ms)
	for i := max(0, len(out)-MarkerReach); i < len(out); i++ {
		out[i].Content = slices.Clone(out[i].Content)
	}
	return out, nil
}

// encode is the outgoing body with the messages out in place of the
// client's, each message encoded as json.Marshal would, reusing the
// encoding of every message equal to one sent before: between recorded
// rewrites the context is an extension of the previous one (docs/design.md
// §4), so only the new messages (and those whose cache markers moved) are
// encoded. A message's encoding depends on nothing but the message, so
// equality is the whole rule.
//
// A message that is ctxd's rendering of a client message it has not
// rewritten goes out as the client's own bytes (ClientBytes).
func (r *renderer) encode(out []Message, req *wire.RenderRequest, idx *clientIndex) (*bodybuf.Body, error) {
	old := r.enc
	next := make([]cachedMessage, len(out))
	parts := make([][]byte, len(out))
	for i := range out {
		if i < len(old) && EqualMessage(&old[i].msg, &out[i]) {
			next[i] = old[i]
		} else {
			e, err := EncodeMessage(&out[i])
			if err != nil {
				return nil, err
			}
			key, err := MarkerFreeDigest(&out[i], e)
			if err != nil {
				return nil, err
			}
			next[i] = cachedMessage{msg: out[i], enc: e, key: key}
		}
	}
	// Aligned from the end, as the client's list and the assembled context
	// end alike: each outgoing message takes the latest client message
	// before the one the next took with the same rendering (a rendering
	// twice in the list — "ok" with and without citations — takes its own).
	lastK := len(req.Items)
	for i := len(out) - 1; i >= 0; i-- {
		parts[i] = next[i].enc
		k, ok := idx.Latest(next[i].key, lastK)
		if !ok {
			c, err := withClientResults(idx, &out[i])
			if err != nil {
				return nil, err
			}
			if c != nil {
				parts[i] = c
			}
			continue
		}
		lastK = k
		unmarked := k < len(req.Marked) && !req.Marked[k]
		if c := ClientBytes(req.Items[k], &out[i], idx.verbatim[k], idx.plain[k], unmarked); c != nil {
			parts[i] = c
		}
	}
	// The outgoing body is these parts between the client's prefix and
	// suffix, not copied into one buffer (bodybuf.Body).
	body := bodybuf.New(req.Buf, 2*len(parts)+3)
	body.Add(req.Body[:req.MsgStart])
	msgs := len(body.Parts)
	body.Add(arrOpen)
	for i, c := range parts {
		if i > 0 {
			body.Add(arrComma)
		}
		body.Add(c)
	}
	for i, c := range req.Tail {
		if i > 0 || len(parts) > 0 {
			body.Add(arrComma)
		}
		body.Add(c)
	}
	body.Add(arrClose)
	if req.Verify {
		for i := range next {
			if _, found := idx.Latest(next[i].key, len(req.Items)); !found && slices.Contains(idx.left, next[i].key) {
				return nil, fmt.Errorf("anthropic: outgoing message %d has the key of a client message indexed without one", i)
			}
		}
		for i := range out {
			if want, _ := json.Marshal(&out[i]); !bytes.Equal(next[i].enc, want) {
				return nil, fmt.Errorf("anthropic: cached encoding of message %d differs from json.Marshal", i)
			}
		}
		if out := (&bodybuf.Body{Parts: body.Parts[msgs:]}).Bytes(); !json.Valid(out) {
			return nil, fmt.Errorf("anthropic: outgoing messages are not JSON")
		}
	}
	body.Add(req.Body[req.MsgEnd:])
	r.enc = next
	return body, nil
}

var (
	arrOpen  = []byte("[")
	arrComma = []byte(",")
	arrClose = []byte("]")
)

// cachedMessage is a message sent, its JSON encoding, and the digest of
// its encoding without cache markers (MarkerFreeDigest).
type cachedMessage struct {
	msg Message
	enc []byte
	key wire.Digest
}

// The client's index: which outgoing message is ctxd's rendering of a
// client message unchanged, so that it goes out as the client's own bytes
// (encode).

// clientIndex is the renderer's index of the client's messages by the
// digest of the marker-free encoding of ctxd's rendering of each, with
// what the Messages API adds.
type clientIndex struct {
	*wire.ClientIndex
	// plain[k] says whether message k is plain text (wire.PlainText).
	plain []bool
	// verbatim[k]: message k goes out as the client's bytes, markers
	// included, whatever ctxd placed on its rendering: a "system" message
	// (Claude Code's), which ctxd reads as user text and would otherwise
	// send as a user message without its markers.
	verbatim []bool
	// results maps the tool_use_id of a client's tool_result block with a
	// member the canonical model lacks to that block (indexResults).
	results map[string]clientResult
	// added is how many messages the last index indexed.
	added int
	// unkeyed are the client's messages index left without a key, by
	// index (unkeyedOf); left (with wire.RenderRequest.Verify) are
	// their keys, which encode checks no outgoing message has while they
	// are left out.
	unkeyed map[int]unkeyed
	left    []wire.Digest
}

// unkeyedOf is ms, a client message as the append read it, as a message
// index leaves without a key, when it is tool results of which ctxd
// holds one (in held, the messages rendered) with text of another
// length — an offload stub in place of the client's result: the
// rendering of the client's message carries each result's call id and
// text, so no outgoing message can have its key while ctxd holds them
// so. ok false otherwise.
func unkeyedOf(ms, held []history.Message) (u unkeyed, ok bool) {
	if len(ms) == 0 {
		return u, false
	}
	for i := range ms {
		if ms[i].Role != history.RoleTool || ms[i].ToolCallID == "" {
			return u, false
		}
		u.ids = append(u.ids, ms[i].ToolCallID)
		u.lens = append(u.lens, textBytes(ms[i]))
	}
	return u, !u.matchable(held)
}

// unkeyed is a client message index left without a key (unkeyedOf): its
// tool results' call ids and text lengths.
type unkeyed struct {
	ids  []string
	lens []int
}

// matchable reports whether an outgoing message could have u's key with
// ctxd holding held: none of u's results is held, once, with text of
// another length.
func (u unkeyed) matchable(held []history.Message) bool {
	for i, id := range u.ids {
		n, seen := 0, 0
		for j := range held {
			if held[j].Role == history.RoleTool && held[j].ToolCallID == id {
				n, seen = textBytes(held[j]), seen+1
			}
		}
		if seen == 1 && n != u.lens[i] {
			return false
		}
	}
	return true
}

// textBytes is the length of the text of m's blocks.
func textBytes(m history.Message) int {
	n := 0
	for _, b := range m.Content {
		n += len(b.Text)
	}
	return n
}

// index records, for the client's messages of req not yet indexed, the
// digest of the marker-free encoding of ctxd's rendering of each (one
// client message rendering to one wire message) → its indexes, in order,
// and whether each is plain text. An outgoing message with the same
// rendering is then sent as the client's own bytes (encode): what ctxd has
// not rewritten passes through byte-identical — document blocks, text
// citations and every field the canonical model does not keep, key order
// and spacing (docs/proxy.md). A message whose bytes differ from those
// indexed (a cache marker that moved off it) is indexed again, with those
// after it; on a new renderer the whole list is indexed once, the
// messages the append read keyed from that reading (req.Reading).
//
// A new message that is tool results of which ctxd holds one with other
// text (held: the messages rendered; an offload stub in place of the
// client's result) is indexed without a key (unkeyedOf): ctxd's
// rendering of it cannot have the client's, and its key would cost a
// rendering, an encoding and a hash of the client's result. It is keyed
// again if an append reads it again and ctxd then holds its results as
// the client sent them (a request recorded again after its commit
// failed, whose result the offload then kept whole).
func (r *renderer) index(req *wire.RenderRequest, held []history.Message) (*clientIndex, error) {
	idx, n := r.idx, 0
	if idx != nil {
		n = idx.Reuse(req.Fast, req.Marked, req.Items)
		for id, res := range idx.results {
			if res.at >= n {
				delete(idx.results, id)
			}
		}
		for k := range idx.unkeyed {
			if k >= n {
				delete(idx.unkeyed, k)
			}
		}
	} else {
		idx = &clientIndex{ClientIndex: wire.NewClientIndex()}
	}
	// A message left without a key that the append read again (its
	// request recorded again after a failed commit) is keyed when ctxd
	// now holds it as the client sent it: only an append changes what
	// ctxd holds of a client's result.
	// Only the messages the append read are looked at: a session's
	// offloaded results are all left without a key.
	if rd := req.Reading; rd != nil && len(idx.unkeyed) > 0 {
		for k := max(rd.From, 0); k < min(rd.From+len(rd.Ends), n); k++ {
			u, left := idx.unkeyed[k]
			if !left || !u.matchable(held) {
				continue
			}
			delete(idx.unkeyed, k)
			if d, _, ok := ClientKey(req.Items[k]); ok {
				idx.SetKey(k, d)
			}
		}
	}
	msgs := req.Items
	idx.added = len(msgs) - n
	idx.plain = slices.Grow(idx.plain[:n], len(msgs)-n)[:len(msgs)]
	idx.verbatim = slices.Grow(idx.verbatim[:n], len(msgs)-n)[:len(msgs)]
	for k := n; k < len(msgs); k++ {
		idx.verbatim[k] = Role(msgs[k]) == "system"
		idx.plain[k] = !idx.verbatim[k] && wire.PlainTextMarked(msgs[k], req.Marked, k)
	}
	for k := n; k < len(msgs); k++ {
		if k < req.Prefix {
			idx.Add(k, req.Fast, req.Marked, msgs[k], wire.Digest{}, false)
			continue
		}
		if ms, read := req.Reading.Of(k); read {
			if u, ok := unkeyedOf(ms, held); ok {
				if req.Verify {
					d, _, ok, err := clientKey(req, k)
					if err != nil {
						return nil, err
					}
					if ok {
						idx.left = append(idx.left, d)
					}
				}
				if idx.unkeyed == nil {
					idx.unkeyed = map[int]unkeyed{}
				}
				idx.unkeyed[k] = u
				idx.Add(k, req.Fast, req.Marked, msgs[k], wire.Digest{}, false)
				idx.indexResults(k, msgs[k])
				continue
			}
		}
		d, results, ok, err := clientKey(req, k)
		if err != nil {
			return nil, err
		}
		idx.Add(k, req.Fast, req.Marked, msgs[k], d, ok)
		if ok && results {
			idx.indexResults(k, msgs[k])
		}
	}
	r.idx = idx
	return idx, nil
}

// clientKey is ClientKey(req.Items[k]), from the append's reading of the
// message when it has one (req.Reading). With req.Verify it is compared
// with ClientKey's, an error when they differ.
func clientKey(req *wire.RenderRequest, k int) (d wire.Digest, results, ok bool, err error) {
	ms, read := req.Reading.Of(k)
	if !read {
		d, results, ok = ClientKey(req.Items[k])
		return d, results, ok, nil
	}
	d, results, ok = ClientKeyOf(ms)
	if req.Verify {
		if wd, wr, wok := ClientKey(req.Items[k]); wd != d || wr != results || wok != ok {
			return d, results, ok, fmt.Errorf("anthropic: the client key of message %d from the append's reading differs from ClientKey", k)
		}
	}
	return d, results, ok, nil
}

// indexResults records each tool_result block of the client's user
// message raw that has a member the canonical model does not keep
// (ClientResults): its tool_use_id → the block without its marker and the
// digest of ctxd's marker-free rendering of it (clientIndex.results).
func (idx *clientIndex) indexResults(k int, raw json.RawMessage) {
	ClientResults(raw, func(id string, block []byte, key [sha256.Size]byte) {
		if idx.results == nil {
			idx.results = map[string]clientResult{}
		}
		idx.results[id] = clientResult{raw: block, key: key, at: k}
	})
}

// clientResult is a client's tool_result block kept by indexResults.
type clientResult struct {
	raw []byte      // the block as the client sent it, without its marker
	key wire.Digest // of ctxd's marker-free rendering of it
	at  int         // the index of its message in the client's list
}

// withClientResults is the encoding of the outgoing user message m, which
// is not a client message unchanged (a tool result in it was rewritten),
// with each tool_result block of a client's block kept by indexResults sent
// as the client's block, its fields the canonical model lacks
// (cache_reference) and key order kept, ctxd's marker after it: byte for
// byte when ctxd's rendering of it is unchanged, else with ctxd's content
// (an offloaded result's stub) in place of the client's. nil when no block
// is the client's.
func withClientResults(idx *clientIndex, m *Message) ([]byte, error) {
	if len(idx.results) == 0 || m.Role != "user" {
		return nil, nil
	}
	var c []Block
	for j := range m.Content {
		b := m.Content[j]
		if b.Type != "tool_result" || len(b.Raw) > 0 {
			continue
		}
		r, ok := idx.results[b.ToolUseID]
		if !ok {
			continue
		}
		// Keyed without markers; the client's block is sent as it is only
		// with the markers placed in its content (PlaceMarkers).
		placed := b.Content
		b.CacheControl, b.Content = nil, withoutNestedMarkers(b.Content)
		e, err := json.Marshal(&b)
		if err != nil {
			return nil, err
		}
		raw := r.raw
		if sha256.Sum256(e) != r.key || !sameNested(r.raw, placed) {
			if raw = WithContent(r.raw, placed); raw == nil {
				continue
			}
		}
		if c == nil {
			c = slices.Clone(m.Content)
		}
		c[j] = Block{Type: b.Type, Raw: raw, CacheControl: m.Content[j].CacheControl}
	}
	if c == nil {
		return nil, nil
	}
	return json.Marshal(&Message{Role: m.Role, Content: c})
}

// Estimated sizes of the headers the caches hold per element, in bytes.
const (
	sizeCachedMessage = int64(unsafe.Sizeof(cachedMessage{}))
	sizeWireMessage   = int64(unsafe.Sizeof(Message{}))
	sizeWireBlock     = int64(unsafe.Sizeof(Block{}))
	sizeRenderKey     = int64(unsafe.Sizeof(renderKey{}))
)

// Bytes estimates what the caches hold: the encodings, the rendering (its
// blocks' text, which also keeps the engine's strings alive after the
// engine dropped the session) and the client index.
func (r *renderer) Bytes() int64 {
	n := int64(0)
	for i := range r.enc {
		n += sizeCachedMessage + int64(len(r.enc[i].enc))
	}
	if c := r.rendered; c != nil {
		n += int64(cap(c.keys)) * sizeRenderKey
		for i := range c.wire {
			n += sizeWireMessage
			for j := range c.wire[i].Content {
				n += blockBytes(&c.wire[i].Content[j])
			}
		}
	}
	if idx := r.idx; idx != nil {
		n += idx.ClientIndex.Bytes() + int64(cap(idx.plain)) + int64(cap(idx.verbatim))
		for id, res := range idx.results {
			n += int64(len(id)+len(res.raw)) + wire.SizeDigest + 48 + wire.SizeMapEntry
		}
		for _, u := range idx.unkeyed {
			// The key, the slices' headers, each id and length.
			n += 8 + 48 + wire.SizeMapEntry + int64(len(u.ids))*(16+8)
			for _, id := range u.ids {
				n += int64(len(id))
			}
		}
	}
	return n
}

// blockBytes estimates what a rendered block holds.
func blockBytes(bl *Block) int64 {
	n := sizeWireBlock + int64(len(bl.Text)+len(bl.Thinking)+len(bl.Signature)+len(bl.Data)+len(bl.Input)+len(bl.Raw)+len(bl.Compaction))
	for i := range bl.Content {
		n += blockBytes(&bl.Content[i])
	}
	return n
}
