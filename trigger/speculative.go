package trigger

// Signals of the background work timed around the trigger
// (docs/design.md §5.1). Neither is Automatic: neither obeys Decide's
// threshold rule; the engine decides them with rules of its own (the
// prepare mark, the cache's lifetime) and both stop when auto is off.
const (
	// Prepare makes a speculative summary, installed when the trigger
	// fires (or, when the threshold is already reached, compacts).
	Prepare Signal = "prepare"
	// Idle compacts a session idle near the end of its prompt cache's
	// lifetime, before the cache lapses.
	Idle Signal = "idle"
)
