//go:build race

package summarizer

// raceEnabled: the race detector slows the corpus tests about tenfold, so
// the fact-list tests read only the small recorded sessions under it.
const raceEnabled = true
