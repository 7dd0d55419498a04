package history

// Call is one tool call located in a history: its id, the tool's name and the
// index (in the slice given to Groups, or the append order of a State) of the
// assistant message that made it.
type Call struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	Index int    `json:"index"`
}

// Group is the unit nothing may split (docs/design.md §2): the messages
// msgs[Start:End]. Open marks an open tool round: a group some of whose calls
// have no result yet (only ever the last group).
type Group struct {
	Start int  `json:"start"`
	End   int  `json:"end"`
	Open  bool `json:"open,omitempty"`
}

// Len is the number of messages in the group.
func (g Group) Len() int { return g.End - g.Start }

// Abandoned is a tool call that a user message (At, an index) left without a
// result: an abandoned round (docs/design.md §2).
type Abandoned struct {
	Call
	At int `json:"at"`
}

// Analysis is what Groups finds in a history. Every slice is in history
// order; indexes are into the slice given to Groups.
type Analysis struct {
	// Groups partition the history: consecutive, non-empty, covering every
	// message.
	Groups []Group `json:"groups"`
	// Open is the calls of the open tool round at the end, in call order:
	// calls with no result and no user message after them.
	Open []Call `json:"open,omitempty"`
	// Abandoned is the calls a later user message left without a result.
	Abandoned []Abandoned `json:"abandoned,omitempty"`
	// Unanswered is every call that never got a result: Abandoned and Open
	// together, in call order.
	Unanswered []Call `json:"unanswered,omitempty"`
	// Orphans is the indexes of tool messages whose call is not open at that
	// point: no earlier call with that id, a call already answered or
	// abandoned, or no tool_call_id at all.
	Orphans []int `json:"orphans,omitempty"`
	// Duplicates is the indexes of assistant messages holding a tool call id
	// already used earlier (in the same message or before).
	Duplicates []int `json:"duplicates,omitempty"`
}

// Valid reports whether the history has no orphan result, no unanswered call
// and no duplicate call id: what a provider accepts.
func (a Analysis) Valid() bool {
	return len(a.Orphans) == 0 && len(a.Unanswered) == 0 && len(a.Duplicates) == 0
}

// Groups splits msgs into groups (docs/design.md §2) in one pass, in O(n) time for
// n messages and their blocks.
//
// How a group is delimited, since real transcripts interleave:
//   - An assistant message with tool_call blocks opens a group that runs
//     through the last tool message answering its calls. Messages between
//     the call and its last result (text-only assistant messages, orphan
//     results, further assistant messages with calls) belong to the same
//     group, so a group is always contiguous and never separates a call from
//     its result. Overlapping rounds therefore merge into one group.
//   - A user message while calls are open is an abandoned round: the open
//     calls are reported in Abandoned, the group ends before the user
//     message, and a result arriving later for one of those calls is an
//     orphan (what State.Check would reject).
//   - Every other message is a group of one.
//
// Only the first tool_call with a given id opens a call; a repeated id is
// reported in Duplicates and does not open a second call.
func Groups(msgs []Message) Analysis {
	var a Analysis
	var (
		start   = -1                // start of the group being built, or -1
		open    []openCall          // calls of that group, in call order
		pending int                 // calls in open still unanswered
		where   = map[string]int{}  // unanswered call id → position in open
		seen    = map[string]bool{} // every call id so far
	)
	closeGroup := func(end int) {
		if start >= 0 && end > start {
			a.Groups = append(a.Groups, Group{Start: start, End: end})
		}
		start = -1
		open = open[:0]
		clear(where)
		pending = 0
	}
	for i := range msgs {
		m := &msgs[i]
		switch m.Role {
		case RoleAssistant:
			calls := 0
			dup := false
			for _, b := range m.Content {
				if b.Type != BlockToolCall {
					continue
				}
				if seen[b.ID] {
					dup = true
					continue
				}
				seen[b.ID] = true
				if pending == 0 && calls == 0 {
					start = i
				}
				where[b.ID] = len(open)
				open = append(open, openCall{Call: Call{ID: b.ID, Name: b.Name, Index: i}})
				pending++
				calls++
			}
			if dup {
				a.Duplicates = append(a.Duplicates, i)
			}
			if calls == 0 && pending == 0 {
				a.Groups = append(a.Groups, Group{Start: i, End: i + 1})
			}
		case RoleTool:
			p, ok := where[m.ToolCallID]
			if !ok {
				a.Orphans = append(a.Orphans, i)
				if pending == 0 {
					a.Groups = append(a.Groups, Group{Start: i, End: i + 1})
				}
				continue
			}
			delete(where, m.ToolCallID)
			open[p].answered = true
			pending--
			if pending == 0 {
				closeGroup(i + 1)
			}
		default: // user, and anything validation would reject
			if pending > 0 && m.Role == RoleUser {
				for _, c := range open {
					if !c.answered {
						a.Abandoned = append(a.Abandoned, Abandoned{Call: c.Call, At: i})
						a.Unanswered = append(a.Unanswered, c.Call)
					}
				}
				closeGroup(i)
			}
			if pending == 0 {
				a.Groups = append(a.Groups, Group{Start: i, End: i + 1})
			}
		}
	}
	if pending > 0 {
		for _, c := range open {
			if !c.answered {
				a.Open = append(a.Open, c.Call)
				a.Unanswered = append(a.Unanswered, c.Call)
			}
		}
		a.Groups = append(a.Groups, Group{Start: start, End: len(msgs), Open: true})
	}
	return a
}

type openCall struct {
	Call
	answered bool
}
