//go:build race

package history

// raceEnabled: the race detector slows the tokenizer about tenfold, so the
// corpus tests count a sample of each file under it.
const raceEnabled = true
