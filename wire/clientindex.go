package wire

import (
	"encoding/json"
	"slices"
	"unsafe"

	"github.com/zeebo/xxh3"
)

// ClientIndex is a branch's index of the client's items by the digest of
// ctxd's rendering of each (docs/proxy.md, client bytes): an outgoing item
// with the same digest is ctxd's rendering of that client item unchanged,
// and goes upstream as the client's own bytes. A renderer keeps it across
// requests and indexes only the items it does not know yet (Reuse, Add).
// The zero value is not ready: use NewClientIndex.
type ClientIndex struct {
	// keys maps a rendering's digest to the indexes of the client items
	// with it, in order.
	keys map[Digest][]int
	// fast[k] is the fast hash (Digests.Fast) of client item k as
	// indexed, norm[k] that of its marker-free form (NormHash), key[k]
	// its key in keys when has[k]: what Reuse checks and truncate drops.
	fast []uint64
	norm []uint64
	key  []Digest
	has  []bool
}

// NewClientIndex is an empty ClientIndex.
func NewClientIndex() *ClientIndex { return &ClientIndex{keys: map[Digest][]int{}} }

// Reuse returns how many of the client's items idx still indexes for a
// request whose items are msgs, with the fast hashes fast (Digests.Fast;
// nil: not known, nothing is reused): the leading items whose bytes are
// the ones indexed, or differ from them only by cache markers (the marker
// a client moves to its newest message: the entries are of marker-free
// forms). The entries of the items after them are dropped, to be indexed
// again with Add: a client that touched what it resent (which tolerant
// matching accepts), or a request of another branch in between.
//
// marked[k], when k is in range, is HasMarker of msgs[k] (Digests.Marked),
// so a message is not searched for the key again.
func (idx *ClientIndex) Reuse(fast []uint64, marked []bool, msgs []json.RawMessage) int {
	n := 0
	for ; fast != nil && n < len(idx.fast) && n < len(fast) && n < len(msgs); n++ {
		if idx.fast[n] == fast[n] {
			continue
		}
		if idx.norm[n] != normHash(msgs[n], marked, n) {
			break
		}
		idx.fast[n] = fast[n]
	}
	idx.truncate(n)
	return n
}

// NormHash is the fast hash of raw without its cache markers (Normalize).
func NormHash(raw json.RawMessage) uint64 { return xxh3.HashSeed(Normalize(raw), FastSeed) }

// normHash is NormHash(raw), raw being item k of a list whose marked
// (Digests.Marked) says, when k is in range, whether it holds a marker.
func normHash(raw json.RawMessage, marked []bool, k int) uint64 {
	return xxh3.HashSeed(NormalizeMarked(raw, marked, k), FastSeed)
}

// truncate drops the entries of the client's items from n on.
func (idx *ClientIndex) truncate(n int) {
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
	n = min(n, len(idx.fast))
	idx.fast, idx.norm, idx.key, idx.has = idx.fast[:n], idx.norm[:n], idx.key[:n], idx.has[:n]
}

// Add records client item k, raw, whose fast hash is fast[k] (none when
// fast is short) and whose marker flag is marked[k] (searched for when
// marked is short), with the digest d of ctxd's rendering of it when ok
// (ok false: the item has no rendering of its own, and no outgoing item
// is taken for it). Items are added in order, after Reuse.
func (idx *ClientIndex) Add(k int, fast []uint64, marked []bool, raw json.RawMessage, d Digest, ok bool) {
	var f uint64
	if k < len(fast) {
		f = fast[k]
	}
	idx.fast, idx.key, idx.has = append(idx.fast, f), append(idx.key, d), append(idx.has, ok)
	idx.norm = append(idx.norm, normHash(raw, marked, k))
	if ok {
		idx.keys[d] = append(idx.keys[d], k)
	}
}

// SetKey gives client item k, added without a digest, the digest d of
// ctxd's rendering of it, as Add would have.
func (idx *ClientIndex) SetKey(k int, d Digest) {
	if k >= len(idx.has) || idx.has[k] {
		return
	}
	idx.key[k], idx.has[k] = d, true
	ks := idx.keys[d]
	j, _ := slices.BinarySearch(ks, k)
	idx.keys[d] = slices.Insert(ks, j, k)
}

// Latest returns the index of the latest client item before before whose
// rendering has the digest d; ok false when there is none. Outgoing items
// are aligned from the end, as the client's list and the assembled context
// end alike: each takes the latest client item before the one the next
// took (a rendering twice in the list takes its own).
func (idx *ClientIndex) Latest(d Digest, before int) (k int, ok bool) {
	ks := idx.keys[d]
	j, _ := slices.BinarySearch(ks, before)
	if j == 0 {
		return 0, false
	}
	return ks[j-1], true
}

// Estimated sizes, in bytes, of what the caches hold per element: a
// digest, and a map entry's share of the map beside its key and value
// (buckets, tophash, load factor).
const (
	SizeDigest   = int64(unsafe.Sizeof(Digest{}))
	SizeMapEntry = 16
)

// Bytes estimates the heap idx holds, in bytes (0 for nil): what a
// proxy's memory bound counts.
func (idx *ClientIndex) Bytes() int64 {
	if idx == nil {
		return 0
	}
	n := int64(cap(idx.fast))*8 + int64(cap(idx.norm))*8 + int64(cap(idx.key))*SizeDigest + int64(cap(idx.has))
	for _, ks := range idx.keys {
		n += SizeDigest + 24 + SizeMapEntry + int64(cap(ks))*8
	}
	return n
}

// ClientItems is the part of a Renderer that sends the items ctxd has not
// rewritten as the client's own bytes, for an API whose item renders
// alone to one item (the OpenAI APIs; docs/proxy.md, "The OpenAI APIs",
// client bytes): its index of the client's items by the key of ctxd's
// rendering of each alone, kept across a branch's requests so that a
// request indexes only its new items. The zero value indexes the whole
// list at its first request.
type ClientItems struct {
	idx *ClientIndex
}

// With replaces, in out (the outgoing items after the prefix, as ctxd
// rendered them), each item that is ctxd's rendering of one of the
// client's items req.Items unchanged by that item as the client sent it:
// a message ctxd has not rewritten — not a summary, an offloaded result's
// stub, an elided or context-edited message — goes out as the client's
// own bytes, with the fields the canonical form does not keep, key order
// and spacing. The items are aligned from the end (ClientIndex.Latest).
// alone is the API's rendering of the client's item items[k] read on its
// own (nil unless it renders to exactly one item), key the digest an
// item is matched by. out is changed in place and returned.
func (c *ClientItems) With(req *RenderRequest, out []json.RawMessage, alone func(items []json.RawMessage, k int) json.RawMessage, key func(json.RawMessage) Digest) []json.RawMessage {
	idx := c.index(req, alone, key)
	lastK := len(req.Items)
	for i := len(out) - 1; i >= 0; i-- {
		k, ok := idx.Latest(key(out[i]), lastK)
		if !ok {
			continue
		}
		lastK = k
		out[i] = req.Items[k]
	}
	return out
}

// index records, for the client's items of req not yet indexed, the key
// of ctxd's rendering of each alone (one item rendering to one item) → its
// indexes, in order; the prefix items have none.
func (c *ClientItems) index(req *RenderRequest, alone func(items []json.RawMessage, k int) json.RawMessage, key func(json.RawMessage) Digest) *ClientIndex {
	idx, n := c.idx, 0
	if idx != nil {
		n = idx.Reuse(req.Fast, req.Marked, req.Items)
	} else {
		idx = NewClientIndex()
	}
	for k := n; k < len(req.Items); k++ {
		var r json.RawMessage
		if k >= req.Prefix {
			r = alone(req.Items[:k+1], k)
		}
		if r == nil {
			idx.Add(k, req.Fast, req.Marked, req.Items[k], Digest{}, false)
			continue
		}
		idx.Add(k, req.Fast, req.Marked, req.Items[k], key(r), true)
	}
	c.idx = idx
	return idx
}

// Bytes estimates the heap the index holds, in bytes.
func (c *ClientItems) Bytes() int64 { return c.idx.Bytes() }
