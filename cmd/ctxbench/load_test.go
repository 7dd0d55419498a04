package main

import (
	"math"
	"slices"
	"testing"
	"time"
)

// TestGapsFixedAndPoisson: fixed arrivals are exactly 1/rate apart;
// Poisson ones are exponential with mean 1/rate (mean and coefficient of
// variation of 20,000 draws), reproducible from the seed and different
// for each agent.
func TestGapsFixedAndPoisson(t *testing.T) {
	fixed := &agent{idx: 3, opt: &loadOptions{rate: 0.5, seed: 1}}
	for range 5 {
		if g := fixed.gap(); g != 2*time.Second {
			t.Fatalf("fixed gap = %v, want 2s", g)
		}
	}
	draws := func(idx int, n int) []float64 {
		a := &agent{idx: idx, opt: &loadOptions{rate: 0.5, poisson: true, seed: 1}}
		out := make([]float64, n)
		for i := range out {
			out[i] = a.gap().Seconds()
			if out[i] < 0 {
				t.Fatalf("negative gap %v", out[i])
			}
		}
		return out
	}
	d := draws(3, 20000)
	var sum, sq float64
	for _, x := range d {
		sum += x
	}
	mean := sum / float64(len(d))
	for _, x := range d {
		sq += (x - mean) * (x - mean)
	}
	cv := math.Sqrt(sq/float64(len(d))) / mean
	if math.Abs(mean-2) > 0.06 || math.Abs(cv-1) > 0.05 {
		t.Errorf("poisson gaps: mean %.3f s (want 2 ± 0.06), coefficient of variation %.3f (want 1 ± 0.05)", mean, cv)
	}
	if again := draws(3, 100); !slices.Equal(again, d[:100]) {
		t.Error("the same seed and agent gave other gaps")
	}
	if other := draws(4, 100); slices.Equal(other, d[:100]) {
		t.Error("two agents drew the same gaps")
	}
}

// TestPoissonAgentsFallOutOfStep: 200 agents that a stall held up all
// restart at the same instant. With fixed gaps all 200 append together
// again every interval; with Poisson gaps, three appends later no 10 ms
// window holds more than a few of them.
func TestPoissonAgentsFallOutOfStep(t *testing.T) {
	busiest := func(poisson bool) int {
		opt := &loadOptions{rate: 0.5, poisson: poisson, seed: 7}
		at := make([]time.Duration, 200)
		for i := range at {
			a := &agent{idx: i, opt: opt}
			for range 3 {
				at[i] += a.gap()
			}
		}
		windows := map[time.Duration]int{}
		most := 0
		for _, x := range at {
			w := x / (10 * time.Millisecond)
			windows[w]++
			most = max(most, windows[w])
		}
		return most
	}
	if n := busiest(false); n != 200 {
		t.Errorf("fixed arrivals: %d agents in the busiest 10 ms window, want all 200", n)
	}
	if n := busiest(true); n > 6 {
		t.Errorf("poisson arrivals: %d agents in the busiest 10 ms window, want ≤ 6", n)
	}
}

// TestFixedAgentsKeepTheirPhase: an on-time agent appends exactly one
// interval after its last slot; 200 agents spread over one interval that a
// stall releases at the same instant skip their missed slots and keep
// their phases (the busiest 10 ms window holds one or two of them), where
// restarting each clock at the stall's end put all 200 in one instant.
func TestFixedAgentsKeepTheirPhase(t *testing.T) {
	opt := &loadOptions{rate: 0.5, seed: 1}
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	on := &agent{opt: opt, next: t0}
	if got := on.following(t0.Add(3 * time.Millisecond)); !got.Equal(t0.Add(2 * time.Second)) {
		t.Errorf("on time: next %v after the slot, want 2s", got.Sub(t0))
	}
	late := &agent{opt: opt, next: t0}
	got := late.following(t0.Add(3 * time.Second))
	if got.Sub(t0) != 4*time.Second {
		t.Errorf("3 s late: next %v after the missed slot, want 4s (the grid's first slot after now)", got.Sub(t0))
	}
	release := t0.Add(5*time.Second + 300*time.Millisecond)
	windows := map[int64]int{}
	most := 0
	for i := range 200 {
		a := &agent{idx: i, opt: opt, next: t0.Add(time.Duration(i) * 10 * time.Millisecond)}
		next := a.following(release)
		if d := next.Sub(release); d <= 0 || d > 2*time.Second {
			t.Fatalf("agent %d: next append %v after the release, want (0, 2 s]", i, d)
		}
		if off := next.Sub(a.next) % (2 * time.Second); off != 0 {
			t.Fatalf("agent %d left its grid by %v", i, off)
		}
		w := next.UnixMilli() / 10
		windows[w]++
		most = max(most, windows[w])
	}
	if most > 2 {
		t.Errorf("%d agents in the busiest 10 ms window after the release, want ≤ 2", most)
	}
}

// TestFixedArrivalsKeepTheRateWithSlowReads: an agent whose context read
// (unpaced) takes 1.5 intervals before each pair of appends still offers
// --rate appends per second: a late append takes the first slot of its
// grid after it, not one at least half an interval away (which gave two
// thirds of the rate).
func TestFixedArrivalsKeepTheRateWithSlowReads(t *testing.T) {
	const g = 2 * time.Second
	a := &agent{opt: &loadOptions{rate: 0.5}}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	a.next = now
	start, appends := now, 0
	for range 1000 {
		now = now.Add(3 * time.Second) // the read
		for range 2 {
			now = maxTime(now, a.next)
			a.next = a.following(now)
			appends++
			now = now.Add(2 * time.Millisecond)
		}
	}
	if got := float64(appends) / (now.Sub(start).Seconds() / g.Seconds()); got < 0.97 {
		t.Errorf("%.2f appends per interval, want ≥ 0.97", got)
	}
}

// TestPaceStopsBeforeWaiting: an agent that may make no further request
// does not sleep until its next slot first.
func TestPaceStopsBeforeWaiting(t *testing.T) {
	a := &agent{opt: &loadOptions{rate: 0.5, maxRequests: 1}, requests: 1, next: time.Now().Add(time.Hour)}
	done := make(chan bool, 1)
	go func() { done <- a.pace(t.Context()) }()
	select {
	case ok := <-done:
		if ok {
			t.Error("pace allowed a request past --max-requests")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("pace waited for the next slot of an agent that had made its last request")
	}
}
