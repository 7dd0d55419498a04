package proxy

import (
	"crypto/sha256"
	"encoding/json"
	"slices"

	"github.com/ctxd/ctxd/wire"
	"github.com/ctxd/ctxd/wire/anthropic"
	"github.com/zeebo/xxh3"
)

// The branch's index of the client's messages: which outgoing message is
// ctxd's rendering of a client message unchanged, so that it goes out as
// the client's own bytes (encode, in render.go).

// indexClient records, for the client's messages of req not yet indexed on
// b, the digest of the marker-free encoding of ctxd's rendering of each
// (one client message rendering to one wire message) → its indexes, in
// order, and whether each is plain text. An outgoing message with the same
// rendering is then sent as the client's own bytes (encode): what ctxd has not rewritten passes through
// byte-identical — document blocks, text citations and every field the
// canonical model does not keep, key order and spacing (docs/proxy.md).
// A message whose bytes differ from those indexed (a cache marker that
// moved off it) is indexed again, with those after it; after a restart or
// a new branch the whole list is indexed once, the messages the append
// read keyed from that reading (request.clientKey). It returns the index.
// Called under the lane's lock.
func (p *Proxy) indexClient(b *branch, req *request) (*clientIndex, error) {
	idx, n := p.reusedIndex(&b.rawIdx, req)
	idx.added = len(req.messages) - n
	idx.plain = slices.Grow(idx.plain[:n], len(req.messages)-n)[:len(req.messages)]
	idx.verbatim = slices.Grow(idx.verbatim[:n], len(req.messages)-n)[:len(req.messages)]
	for k := n; k < len(req.messages); k++ {
		idx.verbatim[k] = anthropic.Role(req.messages[k]) == "system"
		idx.plain[k] = !idx.verbatim[k] && wire.PlainText(req.messages[k])
	}
	for k := n; k < len(req.messages); k++ {
		if k < req.prefix {
			idx.add(k, req.fast, req.messages[k], digest{}, false)
			continue
		}
		d, results, ok, err := req.clientKey(k)
		if err != nil {
			return nil, err
		}
		idx.add(k, req.fast, req.messages[k], d, ok)
		if ok && results {
			idx.indexResults(k, req.messages[k])
		}
	}
	p.mu.Lock()
	b.rawIdx = idx
	p.mu.Unlock()
	return idx, nil
}

// reusedIndex is the index a branch keeps in *slot (its rawIdx or itemIdx,
// guarded by Proxy.mu), and how many of req's messages it still indexes
// (clientIndex.reuse); a new, empty index when the branch keeps none.
func (p *Proxy) reusedIndex(slot **clientIndex, req *request) (*clientIndex, int) {
	p.mu.Lock()
	idx := *slot
	p.mu.Unlock()
	n := idx.reuse(req.fast, req.messages)
	if idx == nil {
		idx = newClientIndex()
	}
	return idx, n
}

// newClientIndex is an empty clientIndex.
func newClientIndex() *clientIndex { return &clientIndex{keys: map[digest][]int{}} }

// reuse returns how many of the client's messages idx still indexes for a
// request whose messages are msgs, with the fast hashes fast
// (wire.Digests.Fast; nil: not known, nothing is reused): the leading
// messages whose bytes are the ones indexed, or differ from them only by
// cache markers (the marker a client moves to its newest message: the
// entries are of marker-free forms). The entries of the messages after
// them are dropped, to be indexed again: a client that touched what it
// resent (which tolerant matching accepts), or a request of another
// branch in between. idx may be nil (0).
func (idx *clientIndex) reuse(fast []uint64, msgs []json.RawMessage) int {
	if idx == nil {
		return 0
	}
	n := 0
	for ; fast != nil && n < len(idx.fast) && n < len(fast) && n < len(msgs); n++ {
		if idx.fast[n] == fast[n] {
			continue
		}
		if idx.norm[n] != normHash(msgs[n]) {
			break
		}
		idx.fast[n] = fast[n]
	}
	idx.truncate(n)
	return n
}

// normHash is the fast hash of raw without its cache markers.
func normHash(raw json.RawMessage) uint64 { return xxh3.HashSeed(wire.Normalize(raw), wire.FastSeed) }

// truncate drops the entries of the client's messages from n on.
func (idx *clientIndex) truncate(n int) {
	for k := n; k < len(idx.fast); k++ {
		if !idx.has[k] {
			continue
		}
		ks := idx.keys[idx.key[k]]
		for len(ks) > 0 && ks[len(ks)-1] >= n {
			ks = ks[:len(ks)-1]
		}
		if len(ks) == 0 {
			delete(idx.keys, idx.key[k])
		} else {
			idx.keys[idx.key[k]] = ks
		}
	}
	for id, r := range idx.results {
		if r.at >= n {
			delete(idx.results, id)
		}
	}
	n = min(n, len(idx.fast))
	idx.fast, idx.norm, idx.key, idx.has = idx.fast[:n], idx.norm[:n], idx.key[:n], idx.has[:n]
}

// add records message k, raw, whose fast hash is fast[k] (none when fast
// is short), with its key d when ok. Messages are added in order, after
// truncate.
func (idx *clientIndex) add(k int, fast []uint64, raw json.RawMessage, d digest, ok bool) {
	var f uint64
	if k < len(fast) {
		f = fast[k]
	}
	idx.fast, idx.key, idx.has = append(idx.fast, f), append(idx.key, d), append(idx.has, ok)
	idx.norm = append(idx.norm, normHash(raw))
	if ok {
		idx.keys[d] = append(idx.keys[d], k)
	}
}

// indexResults records each tool_result block of the client's user
// message raw that has a member the canonical model does not keep
// (anthropic.ClientResults): its tool_use_id → the block without its
// marker and the digest of ctxd's marker-free rendering of it
// (clientIndex.results).
func (idx *clientIndex) indexResults(k int, raw json.RawMessage) {
	anthropic.ClientResults(raw, func(id string, block []byte, key digest) {
		if idx.results == nil {
			idx.results = map[string]clientResult{}
		}
		idx.results[id] = clientResult{raw: block, key: key, at: k}
	})
}

// clientResult is a client's tool_result block kept by indexResults.
type clientResult struct {
	raw []byte // the block as the client sent it, without its marker
	key digest // of ctxd's marker-free rendering of it
	at  int    // the index of its message in the client's list
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
	// fast[k] is the fast hash (wire.Digests.Fast) of client message k as
	// indexed, norm[k] that of its marker-free form (normHash), key[k]
	// its key in keys when has[k]: what reuse checks and truncate drops.
	fast []uint64
	norm []uint64
	// added is how many messages the last indexClient indexed.
	added int
	key   []digest
	has   []bool
	// results maps the tool_use_id of a client's tool_result block with a
	// member the canonical model lacks to that block (indexResults).
	results map[string]clientResult
	// verbatim[k]: message k goes out as the client's bytes, markers
	// included, whatever ctxd placed on its rendering: a "system" message
	// (Claude Code's), which ctxd reads as user text and would otherwise
	// send as a user message without its markers.
	verbatim []bool
}
