// Package accuracy measures ctxd's token estimate against the usage an agent
// recorded: the growth_error of `ctxctl replay` and the estimator table of
// docs/decisions.md "Estimator accuracy". The reported usage of a response
// covers the whole request that produced it, so what ctxd has to estimate is
// the growth of the next request: the previous response plus the messages
// appended since. GrowthPairs pairs consecutive responses, estimates each
// growth as Method says and, for comparison, as chars/4; Summarize reports
// p50 and p90 of |relative error|. Tests and `ctxctl replay` use the same
// code, so both report the same figures.
package accuracy

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"unicode/utf8"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/transcript"
)

// MinRecordedGrowth is the smallest recorded growth, in tokens, of a pair
// that Summarize counts: below it, text the agent injects without
// logging it (Claude Code's system reminders) dominates the difference and
// a relative error says little about the estimator.
const MinRecordedGrowth = 500

// Method says how a growth is estimated.
type Method struct {
	// Factor is the calibration factor (model tokens per o200k token) the
	// estimate starts from: the model catalog's token_factor, e.g. 1.35 for
	// Claude models. It must lie in [history.MinFactor, history.MaxFactor].
	Factor float64
	// Online learns the factor from the growths seen so far, as a
	// history.Calibrator fed with (recorded, estimated) growth of every
	// earlier pair of the same conversation: a pair's estimate only uses
	// what was known before its request was sent.
	Online bool
	// ReportedOutput counts the previous response by its reported
	// usage.output_tokens (what the provider billed, full thinking
	// included, which the next request carries again) instead of
	// estimating its content, when that count is plausible: at least half
	// the o200k estimate of the response's visible content. A model
	// tokenizer never counts less than about o200k does, so a lower figure
	// is not the final count; Claude Code 2.x JSONL records the streaming
	// snapshot of message_start (1–10 tokens) on most responses.
	ReportedOutput bool
}

// Pair is one pair of consecutive responses of a conversation, both with
// usage, before its first original compaction.
type Pair struct {
	// Prev and Next are the indexes into Transcript.Messages of the two
	// assistant responses.
	Prev, Next int
	// Response is the number of responses (after merging) before Next.
	Response int
	// Recorded is Next's context tokens minus Prev's (input + cache
	// creation + cache read); negative when the context shrank.
	Recorded int64
	// Estimated is the estimated growth, in model tokens.
	Estimated uint64
	// Chars4 is the growth estimated as chars/4: the code points of the
	// same texts the estimator counts, divided by 4, rounded up.
	Chars4 uint64
	// Factor is the calibration factor used for this pair.
	Factor float64
}

// Error is the relative error of the estimate, (Estimated − Recorded) /
// Recorded; 0 when Recorded ≤ 0.
func (p Pair) Error() float64 { return relErr(p.Estimated, p.Recorded) }

// Chars4Error is the relative error of the chars/4 estimate.
func (p Pair) Chars4Error() float64 { return relErr(p.Chars4, p.Recorded) }

func relErr(est uint64, rec int64) float64 {
	if rec <= 0 {
		return 0
	}
	return (float64(est) - float64(rec)) / float64(rec)
}

// GrowthPairs returns every pair of consecutive responses of t that carry
// usage (t must hold one conversation: a Claude Code file's sub-agents have
// contexts of their own, see ClaudeCodeAgents), before t's first original compaction, with its recorded and
// estimated growth. A response without usage counts as an appended message
// of the pair that spans it. est counts each message as history does at
// append (Estimator.Message). Pairs of every size are returned, in order;
// Summarize keeps those whose recorded growth exceeds MinRecordedGrowth.
// A Method whose Factor is out of range yields no pairs.
func GrowthPairs(t *transcript.Transcript, est history.Estimator, m Method) []Pair {
	cal, err := history.NewCalibrator(m.Factor)
	if err != nil {
		return nil
	}
	msgs, limit := t.Messages, -1
	if len(t.OriginalCompactions) > 0 {
		c := t.OriginalCompactions[0]
		msgs = msgs[:min(c.MessageIndex, len(msgs))]
		limit = c.BeforeResponse
	}
	var (
		pairs    []Pair
		prev     = -1 // index of the previous response with usage
		scalable uint64
		reported uint64
		chars    uint64
		response int
	)
	for i := range msgs {
		msg := &msgs[i]
		isResponse := msg.Role == history.RoleAssistant
		if isResponse && msg.Usage != nil && msg.Usage.ContextTokens() > 0 && (limit < 0 || response < limit) {
			if prev >= 0 {
				f := cal.Factor()
				p := Pair{
					Prev: prev, Next: i, Response: response,
					Recorded:  int64(msg.Usage.ContextTokens()) - int64(msgs[prev].Usage.ContextTokens()),
					Estimated: reported + scale(scalable, f),
					Chars4:    (chars + 3) / 4,
					Factor:    f,
				}
				pairs = append(pairs, p)
				// Learn from this pair only after estimating it: the part
				// the factor scales against what the recorded growth left
				// for it.
				if m.Online && p.Recorded > int64(reported) {
					cal.Observe(uint64(p.Recorded)-reported, scalable)
				}
			}
			prev, scalable, reported, chars = i, 0, 0, Chars(*msg)
			scalable = est.Message(*msg)
			if u := msg.Usage; m.ReportedOutput && u.OutputTokens >= scalable/2 {
				reported, scalable = u.OutputTokens, 0
			}
		} else if prev >= 0 {
			scalable += est.Message(*msg)
			chars += Chars(*msg)
		}
		if isResponse {
			response++
		}
	}
	return pairs
}

func scale(n uint64, f float64) uint64 {
	return uint64(math.Ceil(float64(n) * f))
}

// Chars returns the code points of every text of m that Estimator.Message
// counts (text and thinking text, a tool call's id, name and input, json
// blocks, a tool message's call id and tool name), plus 4 ×
// history.ImageTokens per image: the chars/4 baseline's view of m.
func Chars(m history.Message) uint64 {
	n := 0
	if m.Role == history.RoleTool {
		n += utf8.RuneCountInString(m.ToolCallID) + utf8.RuneCountInString(m.ToolName)
	}
	for _, b := range m.Content {
		switch b.Type {
		case history.BlockText, history.BlockThinking, history.BlockCompaction:
			n += utf8.RuneCountInString(b.Text)
		case history.BlockToolCall:
			n += utf8.RuneCountInString(b.ID) + utf8.RuneCountInString(b.Name) + utf8.RuneCount(b.Input)
		case history.BlockJSON:
			n += utf8.RuneCount(b.JSON)
		case history.BlockImage:
			n += 4 * history.ImageTokens
		case history.BlockRedactedThinking:
			n += len(b.Data) * 3 / 4
		}
	}
	return uint64(n)
}

// Summary is the accuracy table's row for one set of pairs.
type Summary struct {
	// Pairs is the number of pairs whose recorded growth exceeds
	// MinRecordedGrowth: the samples of the figures below.
	Pairs int
	// P50 and P90 are percentiles of the estimate's |relative error|.
	P50, P90 float64
	// Chars4P50 and Chars4P90 are the same for chars/4 on the same pairs.
	Chars4P50, Chars4P90 float64
	// Bias is the median signed relative error of the estimate (negative:
	// it undercounts).
	Bias float64
}

// Summarize computes the table row of pairs: only those whose recorded
// growth exceeds MinRecordedGrowth count. With no such pair every figure
// is 0.
func Summarize(pairs []Pair) Summary {
	var est, c4, signed []float64
	for _, p := range pairs {
		if p.Recorded <= MinRecordedGrowth {
			continue
		}
		est = append(est, math.Abs(p.Error()))
		c4 = append(c4, math.Abs(p.Chars4Error()))
		signed = append(signed, p.Error())
	}
	s := Summary{Pairs: len(est)}
	if len(est) == 0 {
		return s
	}
	q := Percentiles(est, 50, 90)
	s.P50, s.P90 = q[0], q[1]
	q = Percentiles(c4, 50, 90)
	s.Chars4P50, s.Chars4P90 = q[0], q[1]
	s.Bias = Percentiles(signed, 50)[0]
	return s
}

// Percentiles returns, for each p in ps (0 < p ≤ 100), the nearest-rank
// p-th percentile of values: the smallest value that at least p % of them
// do not exceed. values is not modified. With no values every result is 0
// (NaN for a p out of range).
func Percentiles(values []float64, ps ...float64) []float64 {
	sorted := slices.Clone(values)
	slices.Sort(sorted)
	out := make([]float64, len(ps))
	for i, p := range ps {
		switch {
		case !(p > 0 && p <= 100):
			out[i] = math.NaN()
		case len(sorted) > 0:
			rank := int(math.Ceil(p / 100 * float64(len(sorted))))
			out[i] = sorted[max(rank, 1)-1]
		}
	}
	return out
}

// ClaudeCodeAgents splits a Claude Code session JSONL into the lines of
// each sub-agent (Task) conversation it holds inline (isSidechain lines),
// in order of first appearance. A sub-agent's lines are those whose
// parentUuid chain leads to the same root (a sidechain line whose parent is
// not a sidechain line seen before); sub-agents running in parallel
// interleave in the file. Each result imports as a conversation of its own
// (transcript treats a file that is sidechain throughout as the
// conversation). Lines that do not decode are left out.
func ClaudeCodeAgents(data []byte) [][]byte {
	root := map[string]string{}
	var order []string
	lines := map[string][][]byte{}
	for ln := range bytes.Lines(data) {
		var l struct {
			UUID        string `json:"uuid"`
			ParentUUID  string `json:"parentUuid"`
			IsSidechain bool   `json:"isSidechain"`
		}
		if json.Unmarshal(ln, &l) != nil || !l.IsSidechain || l.UUID == "" {
			continue
		}
		r, ok := root[l.ParentUUID]
		if !ok {
			r = l.UUID
			order = append(order, r)
		}
		root[l.UUID] = r
		lines[r] = append(lines[r], bytes.TrimRight(ln, "\r\n"))
	}
	out := make([][]byte, 0, len(order))
	for _, r := range order {
		out = append(out, bytes.Join(lines[r], []byte("\n")))
	}
	return out
}
