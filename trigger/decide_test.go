package trigger

import (
	"strings"
	"testing"
)

func TestDecide(t *testing.T) {
	base := State{Auto: true, Threshold: 1000, Tokens: 1000, NewGroupSinceCheckpoint: true}
	with := func(f func(*State)) State { s := base; f(&s); return s }
	for _, tc := range []struct {
		name   string
		signal Signal
		state  State
		want   bool
		reason string
	}{
		{"post-check at threshold compacts", PostCheck, base, true, "at or above"},
		{"pre-send at threshold compacts", PreSend, base, true, "at or above"},
		{"post-check one below threshold waits", PostCheck, with(func(s *State) { s.Tokens = 999 }), false, "below the threshold"},
		{"pre-send over threshold compacts", PreSend, with(func(s *State) { s.Tokens = 5000 }), true, "pre-send"},
		{"auto off stops post-check", PostCheck, with(func(s *State) { s.Auto = false }), false, "auto = false"},
		{"auto off stops pre-send", PreSend, with(func(s *State) { s.Auto = false }), false, "auto = false"},
		{"auto off leaves manual", Manual, with(func(s *State) { s.Auto = false }), true, "manual"},
		{"auto off leaves overflow", Overflow, with(func(s *State) { s.Auto = false }), true, "overflow"},
		{"open round stops automatic", PostCheck, with(func(s *State) { s.OpenRound = true }), false, NotCompactingOpenRound},
		{"open round stops manual", Manual, with(func(s *State) { s.OpenRound = true }), false, NotCompactingOpenRound},
		{"open round stops overflow", Overflow, with(func(s *State) { s.OpenRound = true }), false, NotCompactingOpenRound},
		{"no new group since checkpoint: no loop", PreSend, with(func(s *State) { s.NewGroupSinceCheckpoint = false }), false, "since the last checkpoint"},
		{"no new group does not stop manual", Manual, with(func(s *State) { s.NewGroupSinceCheckpoint = false }), true, "manual"},
		{"circuit open stops automatic", PostCheck, with(func(s *State) { s.CircuitOpen = true }), false, "circuit open"},
		{"circuit open leaves manual", Manual, with(func(s *State) { s.CircuitOpen = true }), true, "manual"},
		{"circuit open leaves overflow", Overflow, with(func(s *State) { s.CircuitOpen = true }), true, "overflow"},
		{"threshold 0 compacts anything automatic", PostCheck, with(func(s *State) { s.Threshold, s.Tokens = 0, 0 }), true, "at or above"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.signal, tc.state)
			if d.Compact != tc.want {
				t.Fatalf("Compact = %v, want %v (%s)", d.Compact, tc.want, d.Reason)
			}
			if !strings.Contains(d.Reason, tc.reason) {
				t.Fatalf("Reason = %q, want it to contain %q", d.Reason, tc.reason)
			}
		})
	}
}

func TestOpenRoundAnswerIsExact(t *testing.T) {
	d := Decide(Manual, State{OpenRound: true})
	if d.Reason != "Not compacting now: a tool call is still waiting on its result." {
		t.Fatalf("Reason = %q", d.Reason)
	}
}
