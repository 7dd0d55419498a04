//go:build !race

package wirereplay

// raceOn: the race detector is on (it slows the replay about tenfold).
const raceOn = false
