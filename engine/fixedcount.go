package engine

import (
	"sync"

	"github.com/zeebo/xxh3"
)

// The token counts of system prompts and tool sets, by their content,
// shared by the engine's sessions: an agent's new conversations (Claude
// Code's sub-agents, each task's) send the system prompt and tools of its
// others, tens of KB counted again at each one's first request (~0.8 ms
// of CPU for a 24 KB prompt, the pieces' counts cached, their split not),
// and at each load of a stored session.

// fixedCountMinBytes is the least size of a text whose count is kept:
// a shorter one is counted in microseconds.
const fixedCountMinBytes = 1024

// fixedCountMax bounds the counts kept; past it they are dropped and
// kept again from the next.
const fixedCountMax = 256

// fixedKey is a counted text: its kind (system prompt or tools) and its
// 128-bit hash.
type fixedKey struct {
	kind byte
	sum  xxh3.Uint128
}

// fixedCounts holds the kept counts.
type fixedCounts struct {
	mu sync.Mutex
	m  map[fixedKey]uint64
}

// count returns count() of text, whose kind is kind, kept by its content
// when it is long.
func (c *fixedCounts) count(kind byte, text string, count func() uint64) uint64 {
	if len(text) < fixedCountMinBytes {
		return count()
	}
	k := fixedKey{kind: kind, sum: xxh3.HashString128(text)}
	c.mu.Lock()
	n, ok := c.m[k]
	c.mu.Unlock()
	if ok {
		return n
	}
	n = count()
	c.mu.Lock()
	if c.m == nil || len(c.m) >= fixedCountMax {
		c.m = make(map[fixedKey]uint64)
	}
	c.m[k] = n
	c.mu.Unlock()
	return n
}
