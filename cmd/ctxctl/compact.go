package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ctxd/ctxd/api"
)

// compactCommand is `ctxctl compact [--reason manual|overflow] [--no-wait]
// [--json] SESSION` (a session of the running daemon) and `ctxctl compact
// --transcript FILE [--config FILE]... [--json]` (a transcript file, in the
// ctxd binary with no daemon: see execCtxd).
func compactCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "compact",
		Usage: "compact a session now, or compact a transcript file once",
		UsageText: "ctxctl compact [--reason manual|overflow] [--no-wait] [--json] SESSION\n" +
			"ctxctl compact --transcript FILE [--config FILE]... [--context-limit N] [--data-dir DIR] [--json]\n\n" +
			"A session is compacted by the running daemon; by default ctxctl waits for the\n" +
			"checkpoint. --reason overflow is for an agent whose provider rejected the\n" +
			"request as too long: it compacts even with auto = false or the circuit open.\n" +
			"--transcript runs the engine in the ctxd binary (found next to ctxctl, else on\n" +
			"PATH) on the file, with no daemon, and prints the summary and its figures.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "reason", Value: api.ReasonManual, Usage: "`REASON`: manual or overflow"},
			&cli.BoolFlag{Name: "no-wait", Usage: "return once the compaction is queued"},
			&cli.StringFlag{Name: "transcript", Usage: "compact the transcript `FILE` instead of a session (runs ctxd compact-transcript)"},
			&cli.StringSliceFlag{Name: "config", Usage: "with --transcript: a configuration `FILE` layered above the system and user files; repeat for more"},
			&cli.Uint64Flag{Name: "context-limit", Usage: "with --transcript: the context window in `TOKENS` (default: the transcript's, else the model catalog's)"},
			&cli.StringFlag{Name: "data-dir", Usage: "with --transcript: keep the store in `DIR` (default: a temporary directory)"},
			jsonFlag(),
		},
		Action: func(c *cli.Context) error {
			if file := c.String("transcript"); file != "" {
				if strings.HasPrefix(file, "-") {
					return usagef("compact --transcript needs a FILE, got %q (write the flags first: compact --json --transcript FILE)", file)
				}
				if c.IsSet("reason") || c.IsSet("no-wait") {
					return usagef("compact --transcript: --reason and --no-wait apply to a session only")
				}
				if _, err := exactArgs(c); err != nil {
					return err
				}
				args := []string{"compact-transcript", file}
				for _, f := range c.StringSlice("config") {
					args = append(args, "--config", f)
				}
				if c.IsSet("context-limit") {
					args = append(args, "--context-limit", strconv.FormatUint(c.Uint64("context-limit"), 10))
				}
				if c.IsSet("data-dir") {
					args = append(args, "--data-dir", c.String("data-dir"))
				}
				if c.Bool("json") {
					args = append(args, "--json")
				}
				return execCtxd(e, "compact --transcript", args)
			}
			if c.IsSet("config") || c.IsSet("context-limit") || c.IsSet("data-dir") {
				return usagef("compact: --config, --context-limit and --data-dir apply to --transcript only (the daemon compacts a session with its own configuration)")
			}
			return compactSession(c, e)
		},
	}
}

func compactSession(c *cli.Context, e *env) error {
	args, err := exactArgs(c, "SESSION")
	if err != nil {
		return err
	}
	reason := c.String("reason")
	if reason != api.ReasonManual && reason != api.ReasonOverflow {
		return usagef("--reason %q: want manual or overflow", reason)
	}
	id := args[0]
	r, err := e.client(c).Compact(c.Context, id, api.CompactRequest{Reason: reason, Wait: !c.Bool("no-wait")})
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return writeJSON(e.stdout, r)
	}
	switch r.Status {
	case api.CompactDone:
		if r.Checkpoint == nil {
			fmt.Fprintf(e.stdout, "compacted session %s\n", id)
			return nil
		}
		fmt.Fprintf(e.stdout, "compacted session %s: checkpoint %s\n", id, checkpointLine(r.Checkpoint))
	case api.CompactQueued:
		fmt.Fprintf(e.stdout, "compaction of session %s queued; follow it with: ctxctl session events --follow %s\n", id, id)
	case api.CompactNothing:
		why := r.Reason
		if why == "" { // a daemon that does not say
			why = "a compaction would replace nothing"
		}
		fmt.Fprintf(e.stdout, "nothing to compact in session %s: %s\n", id, why)
	default:
		fmt.Fprintf(e.stdout, "session %s: %s\n", id, r.Status)
	}
	return nil
}
