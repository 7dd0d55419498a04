package wire

import (
	"crypto/sha256"
	"encoding/json"
	"math/rand/v2"

	"github.com/zeebo/xxh3"
)

// Digest is a SHA-256.
type Digest = [sha256.Size]byte

// Chains returns the hash chain over msgs by which a resent conversation
// is matched (docs/design.md §10): Chains(…)[k] covers msgs[:k] ([0] is
// the zero digest), each message normalized (markers removed, plain text
// in one form: MatchForm), or in the dialect's tolerant form where it has
// one (MessageDigest).
func Chains(msgs []json.RawMessage, key MatchKeyFunc) []Digest { return ChainsWith(nil, msgs, key) }

// Shared is how many leading messages two conversations agree on, by
// their hash chains (Chains): chains equal at k are equal below k, so it
// is found by bisection. 0 when either chain is empty.
func Shared(a, b []Digest) int {
	lo, hi := 0, max(min(len(a), len(b))-1, 0)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if a[mid] == b[mid] {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// MatchKeyFunc is a dialect's tolerant form of a message for matching
// (docs/design.md §10: what real clients change in what they resend is
// left out); ok false: the message has none and is matched by its bytes.
type MatchKeyFunc func(raw []byte) (key []byte, ok bool)

// MessageDigest is the digest a message is matched by: of its tolerant
// form when key gives one, else of its normalized bytes.
func MessageDigest(m []byte, key MatchKeyFunc) Digest { return messageDigest(m, key, HasMarker(m)) }

// messageDigest is MessageDigest, marked being HasMarker(m), which
// ChainsWith keeps too: the ~21 KB of a new tool result are searched for
// a marker once, not once here and once there.
func messageDigest(m []byte, key MatchKeyFunc, marked bool) Digest {
	if key != nil {
		if k, ok := key(m); ok {
			return sha256.Sum256(k)
		}
	}
	if marked {
		m = normalize(m)
	}
	return sha256.Sum256(MatchForm(m))
}

// Digests remembers the digests of a conversation's previous request's
// messages by a fast keyed hash of their bytes (xxh3, a per-process
// seed), so a request hashes with SHA-256 only the messages that differ
// from the previous request's at the same index: the new ones and those
// whose marker moved. The zero value remembers nothing.
type Digests struct {
	// Fast[i] is the fast hash of message i's bytes.
	Fast []uint64
	sha  []Digest
	// Marked[i]: message i holds a cache marker (HasMarker), computed
	// with its SHA-256, so a renderer does not search the unchanged
	// messages for one again.
	Marked []bool
	// chain is the chain of the previous request (Chains' result): while
	// every message so far is unchanged, its links are reused.
	chain []Digest
}

// FastSeed is the fast hash's per-process seed (xxh3: ~5× maphash's
// speed on this path, docs/decisions.md).
var FastSeed = rand.Uint64()

// Bytes estimates the heap d holds, in bytes: per message its fast hash,
// SHA-256, marker flag and chain link, and the chain's head (what a
// proxy's memory bound counts).
func (d *Digests) Bytes() int64 {
	return int64(cap(d.Fast))*(8+2*SizeDigest+1) + SizeDigest
}

// ChainsWith is Chains, reusing and then updating the digests in c (nil:
// none).
func ChainsWith(c *Digests, msgs []json.RawMessage, key MatchKeyFunc) []Digest {
	out := make([]Digest, len(msgs)+1)
	var fast []uint64
	var shas []Digest
	var marked []bool
	if c != nil {
		fast, shas, marked = make([]uint64, len(msgs)), make([]Digest, len(msgs)), make([]bool, len(msgs))
	}
	var buf [2 * sha256.Size]byte
	same := c != nil // messages[:i] are the previous request's, unchanged
	for i, m := range msgs {
		var d Digest
		if c == nil {
			d = MessageDigest(m, key)
		} else {
			f := xxh3.HashSeed(m, FastSeed)
			mk := false
			if i < len(c.Fast) && c.Fast[i] == f {
				d, mk = c.sha[i], c.Marked[i]
			} else {
				mk = HasMarker(m)
				d, same = messageDigest(m, key, mk), false
			}
			fast[i], shas[i], marked[i] = f, d, mk
			if same && i+1 < len(c.chain) {
				out[i+1] = c.chain[i+1]
				continue
			}
			same = false
		}
		copy(buf[:sha256.Size], out[i][:])
		copy(buf[sha256.Size:], d[:])
		out[i+1] = sha256.Sum256(buf[:])
	}
	if c != nil {
		c.Fast, c.sha, c.Marked, c.chain = fast, shas, marked, out
	}
	return out
}
