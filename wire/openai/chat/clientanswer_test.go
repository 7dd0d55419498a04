package chat

import (
	"io"
	"strings"
	"testing"
)

// A stream's usage chunk is hidden from its client only when ctxd asked
// for the usage the client did not.
func TestClientAnswerHidesOnlyTheUsageCtxdAskedFor(t *testing.T) {
	body := io.NopCloser(strings.NewReader("data: [DONE]\n\n"))
	if got := (Dialect{}).ClientAnswer(body, false); got != body {
		t.Errorf("a client that asked for its usage got %T", got)
	}
	if _, ok := (Dialect{}).ClientAnswer(body, true).(*UsageFilter); !ok {
		t.Error("the usage ctxd asked for is not hidden")
	}
}
