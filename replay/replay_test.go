package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/internal/corpustest"
	"github.com/ctxd/ctxd/transcript"
)

func importCorpus(t *testing.T, rel string) *transcript.Transcript {
	t.Helper()
	tr, err := transcript.Import(bytes.NewReader(corpustest.Read(t, rel)), transcript.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func layersOff(cfg config.Config) config.Config {
	cfg.Offload.Enabled = false
	cfg.ContextEditing.Enabled = false
	return cfg
}

// Replaying autocompact-150tools with a threshold of 167,000 (where that
// agent compacts): ctxd's first compaction is a pre-send compaction within one
// response of the recorded original compaction, and afterwards the context is
// under the threshold.
func TestReplayCompactsWhereTheOriginalAgentDid(t *testing.T) {
	tr := importCorpus(t, "claude-code/autocompact-150tools.jsonl")
	cfg := layersOff(config.Defaults())
	cfg.ContextCompaction.Trigger = config.Trigger{BufferTokens: 33000}
	r, err := Run(context.Background(), tr, Options{Config: cfg, ContextLimit: 200000})
	if err != nil {
		t.Fatal(err)
	}
	if r.Threshold != 167000 {
		t.Fatalf("threshold = %d", r.Threshold)
	}
	if len(r.Compactions) == 0 || len(r.OriginalCompactions) != 1 {
		t.Fatalf("compactions %d, original %d", len(r.Compactions), len(r.OriginalCompactions))
	}
	first, orig := r.Compactions[0], r.OriginalCompactions[0]
	t.Logf("first compaction: %+v; original before response %d at %d tokens", first, orig.BeforeResponse, orig.PreTokens)
	if first.Signal != "pre-send" {
		t.Fatalf("first compaction signal = %s, want pre-send", first.Signal)
	}
	if d := first.BeforeResponse - orig.BeforeResponse; d < -1 || d > 1 {
		t.Fatalf("first compaction before response %d, original before %d", first.BeforeResponse, orig.BeforeResponse)
	}
	if first.TokensAfter >= r.Threshold || first.Stalled {
		t.Fatalf("after the compaction %d tokens (threshold %d)", first.TokensAfter, r.Threshold)
	}
	checkClean(t, r)
}

// Every corpus session replays with no orphan result, no unanswered call,
// and every non-append request explained by a recorded rewrite — with the
// defaults and with the layers off.
func TestReplayCorpus(t *testing.T) {
	files := []string{
		"claude-code/autocompact-150tools.jsonl",
		"claude-code/v1-167tools-sidechains.jsonl",
		"pi/454tools-2compactions.jsonl",
		"swe-agent/marshmallow-1867.traj.json",
		"recorded/pi/pi0.73.1-anthropic-1compaction.jsonl",
		"recorded/claude-code/cc2.1.197-two-turns.jsonl",
	}
	for _, f := range files {
		for _, variant := range []struct {
			name string
			cfg  config.Config
		}{
			{"defaults", config.Defaults()},
			{"layers off", layersOff(config.Defaults())},
		} {
			t.Run(f+"/"+variant.name, func(t *testing.T) {
				tr := importCorpus(t, f)
				r, err := Run(context.Background(), tr, Options{Config: variant.cfg, ContextLimit: 200000})
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("compactions %d, passes %d, offloads %d, non-append %d, rewrites %d, final %d tokens, estimate %+v, growth %+v",
					len(r.Compactions), r.ContextEditPasses, r.Offloads, r.NonAppendRequests, r.RecordedRewrites, r.FinalTokens, r.EstimateError, r.GrowthError)
				checkClean(t, r)
				if variant.name == "layers off" && (r.ContextEditPasses != 0 || r.Offloads != 0) {
					t.Fatalf("layers off yet %d passes, %d offloads", r.ContextEditPasses, r.Offloads)
				}
			})
		}
	}
}

func checkClean(t *testing.T, r *Report) {
	t.Helper()
	if r.OrphanToolResults != 0 || r.UnansweredToolCalls != 0 {
		t.Fatalf("orphan results %d, unanswered calls %d", r.OrphanToolResults, r.UnansweredToolCalls)
	}
	if r.ProviderRuleViolations != 0 {
		t.Fatalf("%d provider-rule violations: %v", r.ProviderRuleViolations, r.Violations)
	}
	if r.NonAppendRequests != r.RecordedRewrites {
		t.Fatalf("non-append requests %d ≠ recorded rewrites %d", r.NonAppendRequests, r.RecordedRewrites)
	}
}

func TestReplayNeedsAContextLimit(t *testing.T) {
	tr := importCorpus(t, "swe-agent/marshmallow-1867.traj.json")
	tr.Model = "no-such-model"
	_, err := Run(context.Background(), tr, Options{Config: config.Defaults()})
	if !errors.Is(err, ErrNoContextLimit) {
		t.Fatalf("err = %v, want ErrNoContextLimit", err)
	}
}

func TestCompactTranscriptOnTheCorpus(t *testing.T) {
	tr := importCorpus(t, "pi/454tools-2compactions.jsonl")
	tr.CloseAbandoned()
	r, err := CompactTranscript(context.Background(), tr, Options{Config: config.Defaults(), ContextLimit: 200000})
	if err != nil {
		t.Fatal(err)
	}
	if r.Summary == "" || r.SummaryBytes != uint64(len(r.Summary)) || r.Binding != "extractive" {
		t.Fatalf("result = %+v", r)
	}
	if r.TokensAfter >= r.TokensBefore {
		t.Fatalf("tokens %d → %d", r.TokensBefore, r.TokensAfter)
	}
	t.Logf("pi: %d messages, %d → %d tokens, %d retained, %d-byte summary", r.Messages, r.TokensBefore, r.TokensAfter, r.RetainedMessages, r.SummaryBytes)
}

// A --data-dir that already holds a replay is refused by name, before
// anything is written: the second run says which flag to change, and the
// first run's session is left as it was.
func TestCompactTranscriptRefusesAUsedDataDir(t *testing.T) {
	tr := importCorpus(t, "pi/454tools-2compactions.jsonl")
	tr.CloseAbandoned()
	dir := t.TempDir()
	opts := Options{Config: config.Defaults(), ContextLimit: 200000, DataDir: dir}
	first, err := CompactTranscript(context.Background(), tr, opts)
	if err != nil {
		t.Fatal(err)
	}
	_, err = CompactTranscript(context.Background(), tr, opts)
	if err == nil || !strings.Contains(err.Error(), "--data-dir") || !strings.Contains(err.Error(), dir) {
		t.Fatalf("second run on the same --data-dir: err = %v, want one naming --data-dir and %s", err, dir)
	}
	env, err := Open(config.Defaults(), dir, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	info, err := env.Engine.Session(context.Background(), SessionID)
	if err != nil {
		t.Fatal(err)
	}
	if info.Checkpoints != 1 {
		t.Fatalf("the first run's session has %d checkpoints after the refused second run, want 1 (first run: %d messages)", info.Checkpoints, first.Messages)
	}
}

// The text report's checks name provider-rule violations and call them a
// problem.
func TestReportShowsProviderRuleViolations(t *testing.T) {
	r := &Report{ProviderRuleViolations: 1, Violations: []string{"request before response 3: message 4: loop_thinking_missing: Expected `thinking`"}}
	var b bytes.Buffer
	r.WriteText(&b)
	out := b.String()
	if !strings.Contains(out, "1 provider-rule violations") || !strings.Contains(out, "PROBLEM") || !strings.Contains(out, "violation: request before response 3") {
		t.Fatalf("report:\n%s", out)
	}
}

// clear_tool_inputs on a real session (docs/design.md §6): a Claude Code session
// whose agent wrote files replays with more saved by context editing and a
// smaller final context than with it off, and stays clean (no orphan, no
// unanswered call, every non-append request a recorded rewrite). (The pi
// session of the corpus shows it too — 2 compactions → 0 — at four times
// the cost; docs/decisions.md has its figures.)
func TestClearToolInputsOnTheCorpus(t *testing.T) {
	for _, f := range []string{"claude-code/autocompact-150tools.jsonl"} {
		t.Run(f, func(t *testing.T) {
			tr := importCorpus(t, f)
			off := config.Defaults()
			off.ContextEditing.ClearToolInputs = false
			rOff, err := Run(context.Background(), tr, Options{Config: off, ContextLimit: 200000})
			if err != nil {
				t.Fatal(err)
			}
			rOn, err := Run(context.Background(), importCorpus(t, f), Options{Config: config.Defaults(), ContextLimit: 200000})
			if err != nil {
				t.Fatal(err)
			}
			checkClean(t, rOn)
			t.Logf("off: %d passes, %d characters saved, %d compactions, final %d tokens; on: %d passes, %d characters saved, %d compactions, final %d tokens",
				rOff.ContextEditPasses, rOff.ContextEditCharsSaved, len(rOff.Compactions), rOff.FinalTokens,
				rOn.ContextEditPasses, rOn.ContextEditCharsSaved, len(rOn.Compactions), rOn.FinalTokens)
			if rOn.ContextEditCharsSaved <= rOff.ContextEditCharsSaved || rOn.FinalTokens >= rOff.FinalTokens {
				t.Fatalf("clear_tool_inputs saved nothing more: %d → %d characters, final %d → %d tokens",
					rOff.ContextEditCharsSaved, rOn.ContextEditCharsSaved, rOff.FinalTokens, rOn.FinalTokens)
			}
		})
	}
}

// TestReplayIsDeterministic: two replays of the same file, one
// after the other, give the same report. The temporary data directory's
// path and the artifact ids are in the offload stubs, and their random parts
// used to change the token counts.
func TestReplayIsDeterministic(t *testing.T) {
	tr := importCorpus(t, "claude-code/autocompact-150tools.jsonl")
	var reports [2][]byte
	for i := range reports {
		r, err := Run(context.Background(), tr, Options{Config: config.Defaults()})
		if err != nil {
			t.Fatal(err)
		}
		if r.Offloads == 0 {
			t.Fatal("no offload: the test needs stubs")
		}
		if reports[i], err = json.Marshal(r); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(reports[0], reports[1]) {
		t.Errorf("two replays differ:\n%s\n%s", reports[0], reports[1])
	}
}

// TestReplayFinalSubmitCall: a file that ends with a tool call and
// no result (a final submit) replays without an unanswered call; the report
// counts the call as trailing.
func TestReplayFinalSubmitCall(t *testing.T) {
	chat := `[{"role":"system","content":"Solve it."},{"role":"user","content":"the tests fail"},
 {"role":"assistant","content":"looking","tool_calls":[{"id":"a","type":"function","function":{"name":"bash","arguments":"{\"command\":\"ls\"}"}}]},
 {"role":"tool","tool_call_id":"a","content":"setup.py"},
 {"role":"assistant","content":"done","tool_calls":[{"id":"b","type":"function","function":{"name":"submit","arguments":"{}"}}]}]`
	tr, err := transcript.Import(strings.NewReader(chat), transcript.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Run(context.Background(), tr, Options{Config: config.Defaults(), ContextLimit: 100000})
	if err != nil {
		t.Fatal(err)
	}
	if r.TrailingCalls != 1 || r.UnansweredToolCalls != 0 {
		t.Fatalf("trailing %d, unanswered %d", r.TrailingCalls, r.UnansweredToolCalls)
	}
	var b bytes.Buffer
	r.WriteText(&b)
	if strings.Contains(b.String(), "PROBLEM") {
		t.Errorf("a final submit call reads as a problem:\n%s", b.String())
	}
}
