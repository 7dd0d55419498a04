package trigger

import "fmt"

// Signal names what asked for a compaction (docs/design.md §5.1, §5.5).
type Signal string

// The four signals. PostCheck and PreSend are automatic: they obey auto,
// the no-loop rule and the failure circuit. Manual and Overflow are asked for
// by the agent or operator and work when auto is off or the circuit is open.
const (
	PostCheck Signal = "post-check"
	PreSend   Signal = "pre-send"
	Manual    Signal = "manual"
	Overflow  Signal = "overflow"
)

// Automatic reports whether s is one of the automatic signals.
func (s Signal) Automatic() bool { return s == PostCheck || s == PreSend }

// State is what a decision looks at: a pure snapshot of one session, no I/O.
type State struct {
	// Auto is [context_compaction].auto.
	Auto bool
	// Threshold is Threshold(context_limit, trigger), in tokens.
	Threshold uint64
	// Tokens is the figure compared with Threshold: for PostCheck the
	// reported input + cache + output tokens of the newest response; for
	// PreSend the estimate of the assembled context.
	Tokens uint64
	// OpenRound: a tool call is still waiting on its result.
	OpenRound bool
	// NewGroupSinceCheckpoint: a group has been appended after the latest
	// checkpoint's snapshot (always true before the first checkpoint with
	// any message).
	NewGroupSinceCheckpoint bool
	// CircuitOpen: three consecutive compactions of this run failed (§5.5).
	CircuitOpen bool
}

// Decision is the outcome of Decide: whether to compact and why, in words an
// operator reads in `ctxctl doctor`.
type Decision struct {
	Compact bool
	Reason  string
}

// NotCompactingOpenRound is the exact answer to a compaction asked for while
// a tool round is open (docs/design.md §5.1).
const NotCompactingOpenRound = "Not compacting now: a tool call is still waiting on its result."

// Decide says whether signal s compacts the session in state st
// (docs/design.md §5.1, §5.5):
//
//   - never while a tool round is open (for every signal: a summary cannot
//     cover a call whose result is still coming);
//   - Manual and Overflow otherwise always compact;
//   - automatic signals need auto, a closed circuit, a new group since the
//     last checkpoint (no loops), and Tokens ≥ Threshold.
func Decide(s Signal, st State) Decision {
	if st.OpenRound {
		return Decision{Reason: NotCompactingOpenRound}
	}
	if !s.Automatic() {
		return Decision{Compact: true, Reason: fmt.Sprintf("%s compaction requested", s)}
	}
	switch {
	case !st.Auto:
		return Decision{Reason: "automatic compaction is off (context_compaction.auto = false)"}
	case st.CircuitOpen:
		return Decision{Reason: "circuit open: three consecutive compactions failed in this run"}
	case !st.NewGroupSinceCheckpoint:
		return Decision{Reason: "nothing appended since the last checkpoint"}
	case st.Tokens < st.Threshold:
		return Decision{Reason: fmt.Sprintf("%s: %d tokens is below the threshold of %d", s, st.Tokens, st.Threshold)}
	default:
		return Decision{Compact: true, Reason: fmt.Sprintf("%s: %d tokens is at or above the threshold of %d", s, st.Tokens, st.Threshold)}
	}
}
