//go:build race

package replay

// raceEnabled: the race detector slows a replay about tenfold, so the
// speculative-summary table replays only the small sessions under it.
const raceEnabled = true
