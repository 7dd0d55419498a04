package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ctxd/ctxd/api"
)

// jsonFlag is the --json flag of every read command: print the daemon's
// wire type (or the command's documented object) on stdout instead of text.
// Its fields are only ever added (docs/cli.md).
func jsonFlag() cli.Flag {
	return &cli.BoolFlag{Name: "json", Usage: "print JSON on stdout (fields are only ever added)"}
}

// exactArgs returns the command's positional arguments when there are
// exactly n of them, else a usage error naming them. Flags given after an
// argument arrive here as arguments (urfave/cli/v2), so the error says to
// move them.
func exactArgs(c *cli.Context, names ...string) ([]string, error) {
	args := c.Args().Slice()
	if len(args) == len(names) {
		return args, nil
	}
	want := strings.Join(names, " ")
	if len(names) == 0 {
		want = "no arguments"
	}
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			return nil, usagef("flag %q after an argument: flags must come before arguments (usage: %s)", a, firstLine(c.Command.UsageText))
		}
	}
	return nil, usagef("%s takes %s, got %d argument%s (usage: %s)", c.Command.Name, want, len(args), plural(len(args), "", "s"), firstLine(c.Command.UsageText))
}

// writeJSON prints v indented, with a final newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write json: %w", err)
	}
	return nil
}

// stamp formats a time for text output: RFC 3339 in UTC, seconds only, or
// "-" for the zero time.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// tokensLine is a token figure against the threshold:
// "105 of 140000 (0%, reported)".
func tokensLine(tok api.Tokens, threshold uint64) string {
	pct := ""
	if threshold > 0 {
		pct = strconv.FormatUint(tok.Value*100/threshold, 10) + "%, "
	}
	src := tok.Source
	if src == "" {
		src = "source unknown"
	}
	if threshold == 0 {
		return fmt.Sprintf("%d (no threshold while the window is unknown; %s)", tok.Value, src)
	}
	return fmt.Sprintf("%d of threshold %d (%s%s)", tok.Value, threshold, pct, src)
}

// sourceWhy explains a Tokens.Source in words.
func sourceWhy(src string) string {
	switch src {
	case api.TokensReported:
		return "the provider's reported usage of the last request"
	case api.TokensEstimated:
		return "ctxd's calibrated estimate of what usage does not cover yet"
	default:
		return "not reported by this daemon"
	}
}

// circuitLine describes a failure circuit.
func circuitLine(ci api.Circuit) string {
	if ci.Open {
		return fmt.Sprintf("open: automatic compaction stopped for this run after %d consecutive failures (manual and overflow compaction still work)", ci.Failures)
	}
	return fmt.Sprintf("closed (%d consecutive failure%s in this run)", ci.Failures, plural(ci.Failures, "", "s"))
}

// checkpointLine describes a checkpoint in one line.
func checkpointLine(cp *api.Checkpoint) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seq %d at %s", cp.Seq, stamp(cp.Time))
	if cp.Reason != "" {
		fmt.Fprintf(&b, ", %s", cp.Reason)
	}
	if cp.Shape != "" {
		fmt.Fprintf(&b, ", shape %s", cp.Shape)
	}
	fmt.Fprintf(&b, ": %d → %d tokens, %d messages summarized (%d-byte summary by %s)", cp.TokensBefore, cp.TokensAfter, cp.SummarizedMessages, cp.SummaryBytes, orDash(cp.Binding))
	if cp.FirstRetainedSeq > 0 {
		fmt.Fprintf(&b, ", retained from seq %d", cp.FirstRetainedSeq)
	} else {
		b.WriteString(", nothing retained")
	}
	if cp.PrunedRetry {
		b.WriteString(", pruned retry")
	}
	if cp.Fallback {
		b.WriteString(", by the extractive fallback (every configured binding failed)")
	}
	if cp.RequestSeq > 0 {
		fmt.Fprintf(&b, ", current request seq %d kept", cp.RequestSeq)
	}
	if cp.Stalled {
		b.WriteString(", STALLED (still at or above the threshold)")
	}
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// truncate cuts s to at most n runes, marking the cut with "…", and
// flattens newlines so that it fits on one line.
func truncate(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// firstLine is s up to its first newline.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
