package history

import (
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// Counting through a cache of pieces (docs/design.md §2 "Tokens"). o200k's BPE
// merges bytes only within one piece of its split pattern (pretoken.go), so
// a text's count is the sum of its pieces' counts. Real tool output (code,
// logs, JSON) repeats its pieces — identifiers, keys, indentation — so a
// bounded map of piece → count answers most pieces without the BPE, and the
// split itself is a byte scan instead of the tokenizer's regexp. The counts
// are the tokenizer's own: a piece the cache does not hold is counted by the
// tokenizer (a run of such pieces in one call), and the tokens that call
// returns are attributed to the pieces by their bytes, which also checks the
// split; where they do not line up the run's count is used as is and
// nothing is cached.

const (
	// MaxCachedPieceBytes is the longest piece, in bytes, whose count is
	// cached by its bytes. Pieces up to MaxExactPieceBytes are cached by a
	// hash of their bytes (longCounts).
	MaxCachedPieceBytes = 64
	// MaxExactPieceBytes is the longest piece, in bytes, counted as the
	// tokenizer counts it: a longer one (a run of one character, a long
	// word of base64 letters) is counted as consecutive sub-pieces of at
	// most MaxCachedPieceBytes, cut at code-point boundaries, each through
	// the cache. The tokenizer's merge step is superlinear in one piece's
	// length and its garbage is ~40 bytes per byte of the piece, so a 30
	// MiB run cost a minute and hundreds of MB; cut, a run costs a cache
	// lookup per 64 bytes. A cut inside a piece changes its count by about
	// one token per cut (a run of one letter: none, its tokens are 8 bytes
	// long). No piece of the corpus is this long.
	MaxExactPieceBytes = 1 << 10
	// countCacheShards is the number of independently locked parts of the
	// cache; a piece's shard is chosen by its hash.
	countCacheShards = 64
	// CountCacheEntries bounds the pieces cached, in entries (about 60 bytes
	// each with the map's overhead, so ~8 MiB at most). A shard that
	// reaches its share is emptied and refills.
	CountCacheEntries = 1 << 17
)

type countShard struct {
	mu sync.Mutex
	m  map[string]uint32
	_  [40]byte // keep shards on separate cache lines
}

// pieceCache is the process-wide piece → token count cache.
var pieceCache = func() *[countCacheShards]countShard {
	var c [countCacheShards]countShard
	for i := range c {
		c[i].m = make(map[string]uint32)
	}
	return &c
}()

// shardOf picks piece's shard from its length and end bytes: cheap, and
// spread enough to keep two cores off each other's locks; the shard's map
// hashes the whole piece. piece is not empty.
func shardOf(piece string) *countShard {
	h := uint(len(piece))*0x9E37 ^ uint(piece[0])*31 ^ uint(piece[len(piece)-1])*0x2F1
	return &pieceCache[h%countCacheShards]
}

// longCounts caches the counts of pieces longer than MaxCachedPieceBytes,
// up to MaxExactPieceBytes, by a 64-bit hash of their bytes (a random seed:
// a collision cannot be chosen), so a repeated long piece is counted by the
// tokenizer once without keeping its bytes. Emptied when it reaches
// longCountEntries.
var longCounts = struct {
	mu   sync.Mutex
	seed maphash.Seed
	m    map[uint64]uint32
}{seed: maphash.MakeSeed(), m: make(map[uint64]uint32)}

// longCountEntries bounds longCounts (16 bytes an entry and the map's
// overhead: under 1 MiB).
const longCountEntries = 1 << 14

func longCount(piece string) (uint32, bool) {
	h := maphash.String(longCounts.seed, piece)
	longCounts.mu.Lock()
	n, ok := longCounts.m[h]
	longCounts.mu.Unlock()
	return n, ok
}

func storeLongCount(piece string, n uint32) {
	h := maphash.String(longCounts.seed, piece)
	longCounts.mu.Lock()
	if len(longCounts.m) >= longCountEntries {
		clear(longCounts.m)
	}
	longCounts.m[h] = n
	longCounts.mu.Unlock()
}

// pairCounts caches the counts of two-byte ASCII pieces, indexed by their
// bytes (0 = not known yet): the most common pieces after single bytes.
var pairCounts [1 << 14]atomic.Uint32

// frontCounts is a direct-mapped, lock-free cache in front of the shards:
// a slot holds the top 48 bits of a piece's 64-bit hash (random seed, as
// longCounts) and its count in the low 16 (a piece of at most
// MaxCachedPieceBytes has fewer tokens than bytes); the slot is chosen by
// the hash's low bits, so a hit needs all 64 bits equal. A lookup is one
// load from 512 KiB instead of a lock and a probe of a map of ~8 MiB whose
// keys are each elsewhere in memory: the shards' lookups were most of the
// time of counting a new tool result's stub before the first byte.
var frontCounts [1 << frontBits]atomic.Uint64

const frontBits = 16

var frontSeed = maphash.MakeSeed()

func frontSlot(piece string) (*atomic.Uint64, uint64) {
	h := maphash.String(frontSeed, piece)
	return &frontCounts[h&(1<<frontBits-1)], h &^ 0xFFFF
}

func cachedCount(piece string) (uint32, bool) {
	switch len(piece) {
	case 1:
		// Byte-level BPE: every byte is a token of its own, and a
		// one-byte piece of valid UTF-8 is ASCII.
		return 1, true
	case 2:
		if piece[0]|piece[1] < utf8.RuneSelf {
			if n := pairCounts[int(piece[0])<<7|int(piece[1])].Load(); n != 0 {
				return n, true
			}
		}
	}
	slot, tag := frontSlot(piece)
	if e := slot.Load(); e != 0 && e&^0xFFFF == tag {
		return uint32(e & 0xFFFF), true
	}
	sh := shardOf(piece)
	sh.mu.Lock()
	n, ok := sh.m[piece]
	sh.mu.Unlock()
	if ok {
		slot.Store(tag | uint64(n))
	}
	return n, ok
}

func storeCount(piece string, n uint32) {
	if len(piece) == 2 && piece[0]|piece[1] < utf8.RuneSelf {
		pairCounts[int(piece[0])<<7|int(piece[1])].Store(n)
		return
	}
	slot, tag := frontSlot(piece)
	slot.Store(tag | uint64(n))
	sh := shardOf(piece)
	sh.mu.Lock()
	if len(sh.m) >= CountCacheEntries/countCacheShards {
		clear(sh.m)
	}
	// A copy: piece points into a text that may be megabytes long.
	sh.m[strings.Clone(piece)] = n
	sh.mu.Unlock()
}

// countPieces returns the o200k_base token count of s, the same as the
// tokenizer's Count(s), using the piece cache.
func countPieces(s string) int {
	if !utf8.ValidString(s) {
		// The tokenizer's regexp reads invalid bytes as U+FFFD; leave such
		// text to it.
		return rawCount(s)
	}
	total := 0
	missStart := -1 // start of the current run of uncached pieces
	var missing []int
	for i := 0; i < len(s); {
		start, e := nextPiece(s, i)
		if start > i && missStart >= 0 { // skipped bytes end a run
			total += countRun(s[missStart:i], missing)
			missStart, missing = -1, missing[:0]
		}
		if start == e {
			break
		}
		i = start
		piece := s[i:e]
		n, ok := uint32(0), false
		switch {
		case len(piece) <= MaxCachedPieceBytes:
			n, ok = cachedCount(piece)
		case len(piece) <= MaxExactPieceBytes:
			n, ok = longCount(piece)
		default:
			n, ok = uint32(countLong(piece)), true
		}
		if ok {
			if missStart >= 0 {
				total += countRun(s[missStart:i], missing)
				missStart, missing = -1, missing[:0]
			}
			total += int(n)
			i = e
			continue
		}
		if missStart < 0 {
			missStart = i
		}
		missing = append(missing, e-missStart)
		i = e
	}
	if missStart >= 0 {
		total += countRun(s[missStart:], missing)
	}
	return total
}

// countRun counts run, a sequence of whole pieces ending at the offsets
// ends (relative to run), with one tokenizer call, and caches each short
// piece's count.
func countRun(run string, ends []int) int {
	_, tokens, err := codec().Encode(run)
	if err != nil {
		return rawCount(run)
	}
	// Attribute the tokens to the pieces: each piece's tokens spell it.
	type pc struct {
		start, end int
		n          uint32
	}
	var counts [16]pc
	got := counts[:0]
	off, t, start := 0, 0, 0
	for _, end := range ends {
		var n uint32
		for off < end && t < len(tokens) {
			off += len(tokens[t])
			t++
			n++
		}
		if off != end {
			return len(tokens) // a token straddles pieces: no caching
		}
		got = append(got, pc{start, end, n})
		start = end
	}
	if t != len(tokens) {
		return len(tokens)
	}
	for _, p := range got {
		switch piece := run[p.start:p.end]; {
		case len(piece) <= MaxCachedPieceBytes:
			storeCount(piece, p.n)
		case len(piece) <= MaxExactPieceBytes:
			storeLongCount(piece, p.n)
		}
	}
	return len(tokens)
}

// countLong counts a piece longer than MaxExactPieceBytes as consecutive
// sub-pieces of at most MaxCachedPieceBytes bytes, cut at code-point
// boundaries, each counted alone through the cache: in time linear in its
// length, a cache lookup per sub-piece when they repeat.
func countLong(piece string) int {
	total := 0
	for len(piece) > 0 {
		k := min(len(piece), MaxCachedPieceBytes)
		for k < len(piece) && !utf8.RuneStart(piece[k]) {
			k-- // piece is valid UTF-8: a start lies within 3 bytes
		}
		sub := piece[:k]
		piece = piece[k:]
		if n, ok := cachedCount(sub); ok {
			total += int(n)
			continue
		}
		n := rawCount(sub)
		if start, e := nextPiece(sub, 0); start == 0 && e == len(sub) {
			// Alone, sub is one piece too: its count is a piece's count.
			storeCount(sub, uint32(n))
		}
		total += n
	}
	return total
}

// rawCount is the tokenizer's own Count of s, or a byte-based figure if it
// fails (only a pre-tokenizer failure, which o200k's pattern does not
// produce).
func rawCount(s string) int {
	c, err := codec().Count(s)
	if err != nil {
		return (len(s) + 2) / 3
	}
	return c
}

// resetPieceCache empties the piece cache (tests and benchmarks measure a
// cold cache with it).
func resetPieceCache() {
	for i := range pairCounts {
		pairCounts[i].Store(0)
	}
	for i := range frontCounts {
		frontCounts[i].Store(0)
	}
	for i := range pieceCache {
		sh := &pieceCache[i]
		sh.mu.Lock()
		clear(sh.m)
		sh.mu.Unlock()
	}
	longCounts.mu.Lock()
	clear(longCounts.m)
	longCounts.mu.Unlock()
}
