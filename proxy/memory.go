package proxy

import (
	"cmp"
	"slices"
	"unsafe"

	"github.com/ctxd/ctxd/wire"
)

// What the proxy holds of the conversations it serves — each lane's
// digests (wire.Digests) and each branch's renderer (wire.Renderer) — is
// bounded in bytes (proxy.memory_bytes; docs/decisions.md "The proxy's
// memory bounded by bytes"): the least recently used branches' renderers
// go first (the branch's next request renders its whole context once),
// then the least recently used idle lanes (found again from the engine).
// The sizes are estimates of the heap each holds, not exact.

// Estimated sizes of a lane's and a branch's fixed part, in bytes.
const (
	sizeLane   = int64(unsafe.Sizeof(lane{})) + 64
	sizeBranch = int64(unsafe.Sizeof(branch{})) + 256
)

// laneBytes estimates what l holds beside its branches' caches: its
// digests, its branches' records and chains. Called under the lane's lock
// or p.mu.
func laneBytes(l *lane) int64 {
	n := sizeLane + l.digests.Bytes()
	for _, b := range l.branches {
		// A branch's chain may be the lane's own (counted twice: an
		// estimate from above).
		n += sizeBranch + int64(len(b.state)) + int64(cap(b.chain))*wire.SizeDigest
	}
	return n
}

// cacheBytes estimates what b's caches hold (wire.Renderer.Bytes).
func cacheBytes(b *branch) int64 {
	if b.r == nil {
		return 0
	}
	return b.r.Bytes()
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
	b.r, b.rd = nil, nil
	p.cacheBytes -= b.bytes
	b.bytes = 0
}

// boundLocked brings what the proxy holds under the budget: the least
// recently used branches' caches go first, keep's (the branch a request
// is using) last; then the least recently used idle lanes. Called with
// p.mu held.
func (p *Proxy) boundLocked(keep *branch) {
	budget := p.budget
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
		if b.bytes > 0 || b.r != nil {
			p.dropCachesLocked(b)
			p.encOrder = slices.DeleteFunc(p.encOrder, func(x *branch) bool { return x == b })
		}
	}
}
