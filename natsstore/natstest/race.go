//go:build race

package natstest

// raceEnabled: the binary is built with -race (Scale doubles deadlines).
const raceEnabled = true
