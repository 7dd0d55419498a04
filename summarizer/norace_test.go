//go:build !race

package summarizer

const raceEnabled = false
