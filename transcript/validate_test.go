package transcript

import (
	"testing"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/corpustest"
)

// TestImportsValidate: every imported session, with its abandoned calls
// closed, passes the history package's append validation as one batch.
func TestImportsValidate(t *testing.T) {
	files := []string{"claude-code/autocompact-150tools.jsonl", "claude-code/v1-167tools-sidechains.jsonl",
		"pi/454tools-2compactions.jsonl", "swe-agent/marshmallow-1867.traj.json", ""}
	for _, f := range files {
		for _, side := range []bool{false, true} {
			p := codexFixture
			if f != "" {
				p = corpustest.Path(t, f)
			}
			tr := importFile(t, p, Options{IncludeSidechains: side})
			msgs, _ := CloseAbandoned(tr.Messages)
			if err := history.ValidateBatch(&history.State{}, msgs); err != nil {
				t.Errorf("%s (sidechains %v): %v", p, side, err)
			}
		}
	}
}
