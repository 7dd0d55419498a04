package engine

import (
	"testing"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
)

// A token_factor that `ctxctl check` accepts starts a session's
// calibrator, and one just outside the bounds is one the calibrator
// refuses: the config's bounds are the calibrator's.
func TestTokenFactorBoundsAreTheCalibrators(t *testing.T) {
	for _, f := range []float64{config.MinTokenFactor, 1, config.MaxTokenFactor} {
		if _, err := history.NewCalibrator(f); err != nil {
			t.Errorf("token_factor %v passes check, but the calibrator refuses it: %v", f, err)
		}
	}
	for _, f := range []float64{config.MinTokenFactor * 0.99, config.MaxTokenFactor * 1.01} {
		if _, err := history.NewCalibrator(f); err == nil {
			t.Errorf("token_factor %v fails check, but the calibrator accepts it: the bounds differ", f)
		}
	}
}
