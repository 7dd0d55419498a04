package summarizer

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
)

// growingRequest is a session of n tool rounds, each result ~2,000
// o200k_base tokens of distinct text naming its round.
func growingRequest(n int) Request {
	req := sampleRequest()
	req.Messages = req.Messages[:1]
	text := func(s string) []history.Block { return []history.Block{{Type: history.BlockText, Text: s}} }
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("r%d", i)
		var out strings.Builder
		for j := range 400 {
			fmt.Fprintf(&out, "round %d line %d: ok\n", i, j)
		}
		req.Messages = append(req.Messages,
			history.Message{Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockToolCall, ID: id, Name: "bash", Input: []byte(`{"command":"make step"}`)}}},
			history.Message{Role: history.RoleTool, ToolCallID: id, ToolName: "bash", Content: text(out.String())})
	}
	req.Messages = append(req.Messages, history.Message{Role: history.RoleAssistant, Content: text("Six steps done.")})
	return req
}

// A refusal that names its excess prunes the oldest tool results until
// they make it up (with a margin), and the pruned retry carries the newest
// results whole: the summary can still tell where the work stands.
// A refusal without figures prunes every result, as before.
func TestPrunedRetryKeepsTheNewestResultsTheWindowHolds(t *testing.T) {
	status, tooLong := corpusError(t, "anthropic_400_prompt_too_long_with_request_id_1")
	// The real body, with the figures of a small window: 3,000 tokens
	// over a 12,000-token window.
	figures := regexp.MustCompile(`[0-9]+ tokens > [0-9]+ maximum`)
	if !figures.Match(tooLong) {
		t.Fatalf("corpus body has no figures: %s", tooLong)
	}
	small := figures.ReplaceAll(tooLong, []byte("15000 tokens > 12000 maximum"))
	ok := cassetteBody(t, "prompt_caching_turn1_cache_write")

	req := growingRequest(6)
	per := history.Estimator{}.Message(req.Messages[2])
	p := newFakeProvider(t, reply{status: status, body: small}, reply{status: 200, body: ok})
	res, err := newTestSummarizer().Summarize(context.Background(), []config.Binding{anthropicBinding("only", p.URL)}, req, newMemStore())
	if err != nil {
		t.Fatal(err)
	}
	if !res.PrunedRetry {
		t.Fatalf("no pruned retry: %+v", res)
	}
	// The target: 3,000 + a quarter + 1,024 = 4,774 tokens, so the oldest
	// results are pruned until they held that many.
	wantPruned := int((4774 + per - 1) / per)
	t.Logf("each result %d tokens: %d pruned, %d kept", per, res.Prune.Results, res.Prune.Kept)
	if wantPruned < 2 || wantPruned > 4 {
		t.Fatalf("results of %d tokens make the test weak: %d of 6 to prune", per, wantPruned)
	}
	if res.Prune.Results != wantPruned || res.Prune.Kept != 6-wantPruned {
		t.Fatalf("pruned %d, kept %d (each result %d tokens); want %d pruned, %d kept", res.Prune.Results, res.Prune.Kept, per, wantPruned, 6-wantPruned)
	}
	body := string(p.got()[1].body)
	for i := 1; i <= 6; i++ {
		whole := strings.Contains(body, fmt.Sprintf("round %d line 399: ok", i))
		if want := i > wantPruned; whole != want {
			t.Errorf("round %d's result whole in the pruned retry: %v, want %v", i, whole, want)
		}
	}

	// The Responses API's refusal names no figures: every result goes.
	status, noFigures := corpusError(t, "openai_responses_context_length_exceeded")
	p = newFakeProvider(t, reply{status: status, body: noFigures}, reply{status: 200, body: ok})
	res, err = newTestSummarizer().Summarize(context.Background(), []config.Binding{anthropicBinding("only", p.URL)}, growingRequest(6), newMemStore())
	if err != nil {
		t.Fatal(err)
	}
	if res.Prune.Results != 6 || res.Prune.Kept != 0 {
		t.Fatalf("refusal without figures: pruned %d, kept %d; want every result pruned", res.Prune.Results, res.Prune.Kept)
	}
}
