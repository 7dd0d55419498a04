package engine

import (
	"context"
	"sync"
)

// changeRing is how many changes Changes remembers: a follower further
// behind is told it missed some (every session may have changed).
const changeRing = 1024

// changes is the feed behind Changes: a counter, the ids of the newest
// changes, and a channel closed at the next one.
type changes struct {
	mu   sync.Mutex
	seq  uint64
	ids  [changeRing]string
	wake chan struct{}
}

// note records a change of session id and wakes the followers.
func (c *changes) note(id string) {
	c.mu.Lock()
	c.seq++
	c.ids[c.seq%changeRing] = id
	if c.wake != nil {
		close(c.wake)
		c.wake = nil
	}
	c.mu.Unlock()
}

// ChangeSeq is the number of session changes this engine has seen since
// it started: a change is a new, deleted or changed listing row (a
// session created, a message appended, a compaction, a ledger entry, a
// mode, a PATCH). Only this node's changes count: on a fleet
// (Options.Shared) another node's are not seen.
func (e *Engine) ChangeSeq() uint64 {
	e.changes.mu.Lock()
	defer e.changes.mu.Unlock()
	return e.changes.seq
}

// Changes waits until the change counter passes after (ChangeSeq), or ctx
// ends, and returns the ids of the sessions changed after it, oldest
// first (a session may repeat), with the new counter. missed is true when
// the changes after `after` are no longer all remembered (more than 1024
// since): the caller should read everything again. Errors: ctx's.
func (e *Engine) Changes(ctx context.Context, after uint64) (ids []string, seq uint64, missed bool, err error) {
	c := &e.changes
	for {
		c.mu.Lock()
		if c.seq != after {
			seq = c.seq
			if after > seq || seq-after > changeRing {
				c.mu.Unlock()
				return nil, seq, true, nil
			}
			for n := after + 1; n <= seq; n++ {
				ids = append(ids, c.ids[n%changeRing])
			}
			c.mu.Unlock()
			return ids, seq, false, nil
		}
		if c.wake == nil {
			c.wake = make(chan struct{})
		}
		wake := c.wake
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, after, false, ctx.Err()
		case <-wake:
		}
	}
}
