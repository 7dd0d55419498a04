//go:build race

package main

// raceEnabled builds the daemon under test with -race too.
const raceEnabled = true
