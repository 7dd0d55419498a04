package redact

import (
	"strings"
	"sync"
)

// heldSet is the secrets held for a while (Redactor.Hold): a client's
// credential while the proxy holds it. Adding and removing one costs its
// length, whatever else is held: the windows of every held secret are
// counted, with a counting filter over their hashes.
type heldSet struct {
	mu      sync.RWMutex
	refs    map[string]int // secret → holders
	grams   map[string]int // PartialLen-byte window (forwards and reversed) → secrets holding it
	short   map[string]int // a secret shorter than PartialLen, and its reverse → secrets
	buckets [1 << filterBits]uint32
}

func newHeldSet() *heldSet {
	return &heldSet{refs: map[string]int{}, grams: map[string]int{}, short: map[string]int{}}
}

// add counts secret's windows up (d = 1) or down (d = -1).
func (h *heldSet) add(secret string, d int) {
	for _, w := range []string{secret, reverse(secret)} {
		if len(w) < PartialLen {
			h.short[w] += d
			if h.short[w] <= 0 {
				delete(h.short, w)
			}
			continue
		}
		for i := 0; i+PartialLen <= len(w); i++ {
			g := w[i : i+PartialLen]
			h.grams[g] += d
			if h.grams[g] <= 0 {
				delete(h.grams, g)
			}
			b := windowHash(g) >> filterShift
			h.buckets[b] = uint32(int(h.buckets[b]) + d)
		}
	}
}

func (h *heldSet) hold(secret string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.refs[secret]++
	if h.refs[secret] == 1 {
		h.add(secret, 1)
	}
}

func (h *heldSet) release(secret string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.refs[secret] == 0 {
		return
	}
	h.refs[secret]--
	if h.refs[secret] == 0 {
		delete(h.refs, secret)
		h.add(secret, -1)
	}
}

// mask replaces every run of s covered by held windows, and every short
// held secret, with Mask.
func (h *heldSet) mask(s string) string {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if len(h.refs) == 0 {
		return s
	}
	if len(h.grams) > 0 {
		s = maskRuns(s, func(b uint64) bool { return h.buckets[b] > 0 }, func(g string) bool { return h.grams[g] > 0 })
	}
	for w := range h.short {
		s = strings.ReplaceAll(s, w, Mask)
	}
	return s
}

// Hold adds secret (at least MinSecretLen bytes; shorter ones are ignored)
// to the secrets r masks, with every PartialLen-byte run of it, until the
// returned release is called: for a credential a client sent, as long as
// it is held. Holding the same secret twice needs two releases. Redactors
// made by With share r's held secrets. A nil Redactor holds nothing.
func (r *Redactor) Hold(secret string) (release func()) {
	if r == nil || len(secret) < MinSecretLen {
		return func() {}
	}
	h := r.heldSet()
	h.hold(secret)
	var once sync.Once
	return func() { once.Do(func() { h.release(secret) }) }
}

// Held reports how many distinct secrets are held now.
func (r *Redactor) Held() int {
	if r == nil {
		return 0
	}
	h := r.heldSet()
	h.mu.RLock()
	defer h.mu.RUnlock()
	return len(h.refs)
}

func (r *Redactor) heldSet() *heldSet {
	if h := r.held.Load(); h != nil {
		return h
	}
	r.held.CompareAndSwap(nil, newHeldSet())
	return r.held.Load()
}
