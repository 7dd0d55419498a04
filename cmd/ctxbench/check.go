package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/ctxd/ctxd/api"
)

// fingerprint identifies a stored message by what it says: role, tool call
// id and name, error flag and content blocks. Seq, Tokens and Time are left
// out: the checker compares positions itself, and the other two are the
// daemon's annotations.
type fingerprint [16]byte

// fingerprintOf returns m's fingerprint.
func fingerprintOf(m *api.Message) fingerprint {
	b, err := json.Marshal(struct {
		Role       api.Role    `json:"r"`
		ToolCallID string      `json:"c,omitempty"`
		ToolName   string      `json:"n,omitempty"`
		IsError    bool        `json:"e,omitempty"`
		Content    []api.Block `json:"b"`
	}{m.Role, m.ToolCallID, m.ToolName, m.IsError, m.Content})
	if err != nil {
		// Every field is a plain value or valid JSON the daemon sent.
		panic(fmt.Sprintf("ctxbench: fingerprint: %v", err))
	}
	sum := sha256.Sum256(b)
	var f fingerprint
	copy(f[:], sum[:])
	return f
}

// stored is one message as the daemon reported it: in an append response
// (acknowledged) or in the session's event log.
type stored struct {
	seq uint64
	fp  fingerprint
}

// Integrity is the outcome of comparing what the daemon acknowledged with
// what its event log holds. Lost, Duplicated, Reordered and SeqMismatch
// must all be 0.
type Integrity struct {
	// Sessions is the number of sessions checked.
	Sessions int `json:"sessions"`
	// Acknowledged is the number of messages the daemon acknowledged.
	Acknowledged int `json:"acknowledged"`
	// Stored is the number of message events in the logs.
	Stored int `json:"stored"`
	// Lost counts acknowledged messages missing from the log.
	Lost int `json:"lost"`
	// Duplicated counts extra copies in the log of acknowledged messages.
	Duplicated int `json:"duplicated"`
	// Reordered is the least number of acknowledged messages that must be
	// moved for the log to hold them in the acknowledged order.
	Reordered int `json:"reordered"`
	// SeqMismatch counts acknowledged messages found in the log at another
	// seq than the one the append response gave.
	SeqMismatch int `json:"seq_mismatch"`
	// Unacknowledged counts messages in the log that no append response
	// reported: an append whose response was lost (a request error) may
	// have stored them. Not a failure by itself.
	Unacknowledged int `json:"unacknowledged"`
}

// OK reports whether nothing was lost, duplicated, reordered or misplaced.
func (in Integrity) OK() bool {
	return in.Lost == 0 && in.Duplicated == 0 && in.Reordered == 0 && in.SeqMismatch == 0
}

// add accumulates another session's figures.
func (in *Integrity) add(o Integrity) {
	in.Sessions += o.Sessions
	in.Acknowledged += o.Acknowledged
	in.Stored += o.Stored
	in.Lost += o.Lost
	in.Duplicated += o.Duplicated
	in.Reordered += o.Reordered
	in.SeqMismatch += o.SeqMismatch
	in.Unacknowledged += o.Unacknowledged
}

// compare checks one session: acked are the acknowledged messages in the
// order the daemon acknowledged them, log the message events of the
// session's log in seq order.
//
// The k-th acknowledged copy of a fingerprint is matched with the k-th
// copy in the log (transcripts may repeat a message word for word). Copies
// the log lacks are lost; extra copies of an acknowledged fingerprint are
// duplicates; fingerprints never acknowledged are unacknowledged. Order:
// the log positions of the matched messages, read in acknowledgement
// order, must increase; the number out of place is their count minus
// their longest increasing subsequence.
func compare(acked, log []stored) Integrity {
	in := Integrity{Sessions: 1, Acknowledged: len(acked), Stored: len(log)}
	positions := map[fingerprint][]int{}
	for i, s := range log {
		positions[s.fp] = append(positions[s.fp], i)
	}
	ackedCount := map[fingerprint]int{}
	var order []int
	for _, a := range acked {
		k := ackedCount[a.fp]
		ackedCount[a.fp] = k + 1
		ps := positions[a.fp]
		if k >= len(ps) {
			in.Lost++
			continue
		}
		p := ps[k]
		order = append(order, p)
		if log[p].seq != a.seq {
			in.SeqMismatch++
		}
	}
	for fp, ps := range positions {
		n, ok := ackedCount[fp]
		switch {
		case !ok:
			in.Unacknowledged += len(ps)
		case len(ps) > n:
			in.Duplicated += len(ps) - n
		}
	}
	in.Reordered = len(order) - longestIncreasing(order)
	return in
}

// longestIncreasing returns the length of the longest strictly increasing
// subsequence of xs (patience sorting, O(n log n)).
func longestIncreasing(xs []int) int {
	var tails []int
	for _, x := range xs {
		i := sort.SearchInts(tails, x)
		if i == len(tails) {
			tails = append(tails, x)
		} else {
			tails[i] = x
		}
	}
	return len(tails)
}

// readLog reads the message events of session id from seq 1 to the end of
// the log (not following), and counts compaction outcomes on the way.
func readLog(ctx context.Context, c *api.Client, id string, oc *Outcomes) ([]stored, error) {
	var log []stored
	err := c.StreamEvents(ctx, id, api.EventsOptions{From: 1}, func(ev api.Event) error {
		switch ev.Kind {
		case api.EventMessage:
			if ev.Message == nil {
				return fmt.Errorf("event %d of session %s: a message event without a message", ev.Seq, id)
			}
			log = append(log, stored{seq: ev.Message.Seq, fp: fingerprintOf(ev.Message)})
		case api.EventCheckpoint:
			var cp api.Checkpoint
			if json.Unmarshal(ev.Data, &cp) == nil {
				oc.countCheckpoint(cp)
			}
		case api.EventCompactionFailed:
			oc.Failed++
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the events of session %s: %w", id, err)
	}
	return log, nil
}

// Outcomes counts finished compactions.
type Outcomes struct {
	// OK, Stalled and Failed count compactions by outcome (docs/design.md §5.5).
	OK      int `json:"ok"`
	Stalled int `json:"stalled"`
	Failed  int `json:"failed"`
	// PrunedRetry counts checkpoints the pruned retry produced (after a
	// context-length error).
	PrunedRetry int `json:"pruned_retry"`
}

func (o *Outcomes) countCheckpoint(cp api.Checkpoint) {
	if cp.Stalled {
		o.Stalled++
	} else {
		o.OK++
	}
	if cp.PrunedRetry {
		o.PrunedRetry++
	}
}

// Total is the number of finished compactions.
func (o Outcomes) Total() int { return o.OK + o.Stalled + o.Failed }
