package trigger

import "testing"

// An overflow retry keeps the margin free of a known window; with none,
// it goes a tenth under the provider's count, or ctxd's estimate when the
// provider gave none.
func TestOverflowTarget(t *testing.T) {
	for _, c := range []struct{ window, count, before, want uint64 }{
		{200000, 210266, 150000, 190000},
		{0, 210266, 150000, 189239},
		{0, 0, 150000, 135000},
	} {
		if got, why := OverflowTarget(c.window, c.count, c.before); got != c.want || why == "" {
			t.Errorf("OverflowTarget(%d, %d, %d) = %d %q, want %d", c.window, c.count, c.before, got, why, c.want)
		}
	}
}
