package proxy

import (
	"cmp"
	"slices"
	"unsafe"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/wire/anthropic"
)

// What the proxy holds in memory of the conversations it serves is
// bounded in bytes (proxy.memory_bytes, docs/config.md): each lane's
// digests of its previous request's messages (wire.ChainsWith), and each
// branch's caches — its last outgoing encodings, its rendering and its
// index of the client's messages (render.go, clientindex.go). Past the bound the least
// recently used branches' caches are dropped first (the branch's next
// request renders and encodes its whole context once), then the least
// recently used idle lanes (found again from the engine at their next
// request: the record is durable). The sizes are estimates of the heap
// each holds (the bytes it refers to and its headers), not exact.

// memoryBudget is the bound in bytes (config.DefaultProxyMemoryBytes when
// the configuration leaves it 0).
func (p *Proxy) memoryBudget() int64 {
	if n := p.cfg.MemoryBytes; n > 0 {
		return int64(n)
	}
	return config.DefaultProxyMemoryBytes
}

// Estimated sizes of the headers the caches hold per element, in bytes.
const (
	sizeDigest        = int64(unsafe.Sizeof(digest{}))
	sizeCachedMessage = int64(unsafe.Sizeof(cachedMessage{}))
	sizeWireMessage   = int64(unsafe.Sizeof(anthropic.Message{}))
	sizeWireBlock     = int64(unsafe.Sizeof(anthropic.Block{}))
	sizeRenderKey     = int64(unsafe.Sizeof(renderKey{}))
	// sizeMapEntry is a map entry's share of the map beside its key and
	// value (buckets, tophash, load factor).
	sizeMapEntry = 16
	// sizeLane and sizeBranch are a lane's and a branch's fixed part.
	sizeLane   = int64(unsafe.Sizeof(lane{})) + 64
	sizeBranch = int64(unsafe.Sizeof(branch{})) + 256
)

// laneBytes estimates what l holds beside its branches' caches: its
// digests, its branches' records and chains. Called under the lane's lock
// or p.mu.
func laneBytes(l *lane) int64 {
	// Per message: its fast hash, SHA-256, marker flag and chain link.
	n := sizeLane + int64(cap(l.digests.Fast))*(8+2*sizeDigest+1) + sizeDigest
	for _, b := range l.branches {
		// A branch's chain may be the lane's own (counted twice: an
		// estimate from above).
		n += sizeBranch + int64(len(b.state)) + int64(cap(b.chain))*sizeDigest
	}
	return n
}

// cacheBytes estimates what b's caches hold: the encodings, the rendering
// (its blocks' text, which also keeps the engine's strings alive after the
// engine dropped the session) and the client indexes.
func cacheBytes(b *branch) int64 {
	n := int64(0)
	for i := range b.enc {
		n += sizeCachedMessage + int64(len(b.enc[i].enc))
	}
	if c := b.rendered; c != nil {
		n += int64(cap(c.keys)) * sizeRenderKey
		for i := range c.wire {
			n += sizeWireMessage
			for j := range c.wire[i].Content {
				n += blockBytes(&c.wire[i].Content[j])
			}
		}
	}
	n += indexBytes(b.rawIdx) + indexBytes(b.itemIdx)
	return n
}

// blockBytes estimates what a rendered block holds.
func blockBytes(bl *anthropic.Block) int64 {
	n := sizeWireBlock + int64(len(bl.Text)+len(bl.Thinking)+len(bl.Signature)+len(bl.Data)+len(bl.Input)+len(bl.Raw)+len(bl.Compaction))
	for i := range bl.Content {
		n += blockBytes(&bl.Content[i])
	}
	return n
}

// indexBytes estimates what a client index holds.
func indexBytes(idx *clientIndex) int64 {
	if idx == nil {
		return 0
	}
	n := int64(cap(idx.fast))*8 + int64(cap(idx.norm))*8 + int64(cap(idx.key))*sizeDigest + int64(cap(idx.has)) +
		int64(cap(idx.plain)) + int64(cap(idx.verbatim))
	for _, ks := range idx.keys {
		n += sizeDigest + 24 + sizeMapEntry + int64(cap(ks))*8
	}
	for id, r := range idx.results {
		n += int64(len(id)+len(r.raw)) + sizeDigest + 48 + sizeMapEntry
	}
	return n
}

// noteLane records l's size after its request changed it, and bounds the
// memory. Called under the lane's lock.
func (p *Proxy) noteLane(l *lane) {
	n := laneBytes(l)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lanes[l.key] == l {
		p.laneBytes += n - l.bytes
	}
	l.bytes = n
	p.boundLocked(nil)
}

// dropCachesLocked drops b's caches. Called with p.mu held.
func (p *Proxy) dropCachesLocked(b *branch) {
	b.enc, b.rawIdx, b.itemIdx, b.rendered = nil, nil, nil, nil
	p.cacheBytes -= b.bytes
	b.bytes = 0
}

// boundLocked brings what the proxy holds under the budget: the least
// recently used branches' caches go first, keep's (the branch a request
// is using) last; then the least recently used idle lanes. Called with
// p.mu held.
func (p *Proxy) boundLocked(keep *branch) {
	budget := p.memoryBudget()
	for p.laneBytes+p.cacheBytes > budget && len(p.encOrder) > 0 && p.encOrder[0] != keep {
		p.dropCachesLocked(p.encOrder[0])
		p.encOrder = p.encOrder[1:]
	}
	if p.laneBytes+p.cacheBytes <= budget {
		return
	}
	var idle []*lane
	for _, l := range p.lanes {
		if l.users == 0 {
			idle = append(idle, l)
		}
	}
	slices.SortFunc(idle, func(a, b *lane) int { return cmp.Compare(a.used, b.used) })
	for _, l := range idle {
		if p.laneBytes+p.cacheBytes <= budget {
			break
		}
		p.dropLaneLocked(l)
	}
}

// dropLaneLocked forgets the idle lane l and its branches' caches.
// Called with p.mu held.
func (p *Proxy) dropLaneLocked(l *lane) {
	if p.lanes[l.key] != l {
		return
	}
	delete(p.lanes, l.key)
	p.laneBytes -= l.bytes
	for _, b := range l.branches {
		if b.bytes > 0 || b.enc != nil || b.rendered != nil || b.rawIdx != nil || b.itemIdx != nil {
			p.dropCachesLocked(b)
			p.encOrder = slices.DeleteFunc(p.encOrder, func(x *branch) bool { return x == b })
		}
	}
}

// MemoryBytes is the proxy's estimate of what it holds of the
// conversations it serves, in bytes (what proxy.memory_bytes bounds).
func (p *Proxy) MemoryBytes() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.laneBytes + p.cacheBytes
}
