package engine

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/history"
)

// An assistant message while an earlier call is open is refused, naming the
// call, and nothing is stored (issue 13 point 8): the Anthropic context can
// never put c2's result after a later assistant message.
func TestAssistantWhileACallIsOpenIsRefused(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	h.create("s", 20000)
	h.append("s", user("go"), calls("c1", "c2"), result("c1", "one"))
	before, _ := h.e.Session(context.Background(), "s")
	_, err := h.e.Append(context.Background(), "s", []history.Message{assistant("let me think"), result("c2", "two")})
	var fe *FieldError
	if !errors.Is(err, ErrInvalid) || !errors.As(err, &fe) || fe.Field != "messages[0].role" || !strings.Contains(err.Error(), `"c2"`) {
		t.Fatalf("err = %v, want ErrInvalid on messages[0].role naming c2", err)
	}
	if after, _ := h.e.Session(context.Background(), "s"); after.LastSeq != before.LastSeq {
		t.Fatal("a refused append stored something")
	}
	h.append("s", result("c2", "two"), assistant("both done"))
	checkValid(t, h.context("s").Messages)
}
