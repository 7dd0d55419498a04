package main

import (
	"encoding/base64"
	"fmt"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/ctxd/ctxd/api"
)

// checkpointCommand is `ctxctl checkpoint list [--json] SESSION`.
func checkpointCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "checkpoint",
		Usage:     "list a session's checkpoints",
		UsageText: "ctxctl checkpoint list [--json] SESSION",
		Subcommands: []*cli.Command{{
			Name:  "list",
			Usage: "list a session's checkpoints, oldest first (--json includes the summaries)",
			UsageText: "ctxctl checkpoint list [--summaries] [--json] SESSION\n\n" +
				"--json prints {\"checkpoints\": [...]} with every summary.",
			Flags: []cli.Flag{
				&cli.BoolFlag{Name: "summaries", Usage: "print each summary after its line"},
				jsonFlag(),
			},
			Action: func(c *cli.Context) error {
				args, err := exactArgs(c, "SESSION")
				if err != nil {
					return err
				}
				cps, err := e.client(c).Checkpoints(c.Context, args[0])
				if err != nil {
					return err
				}
				if c.Bool("json") {
					if cps == nil {
						cps = []api.Checkpoint{}
					}
					return writeJSON(e.stdout, api.CheckpointsResponse{Checkpoints: cps})
				}
				if len(cps) == 0 {
					fmt.Fprintf(e.stderr, "session %s has no checkpoints\n", args[0])
					return nil
				}
				if c.Bool("summaries") {
					for i := range cps {
						fmt.Fprintf(e.stdout, "checkpoint %s\n\n%s\n\n", checkpointLine(&cps[i]), cps[i].Summary)
					}
					return nil
				}
				tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "SEQ\tTIME\tREASON\tSHAPE\tBINDING\tBEFORE\tAFTER\tSUMMARIZED\tRETAINED_FROM\tSUMMARY_BYTES\tSTALLED\tPRUNED")
				for _, cp := range cps {
					fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", cp.Seq, stamp(cp.Time), orDash(cp.Reason), orDash(cp.Shape), orDash(cp.Binding),
						cp.TokensBefore, cp.TokensAfter, cp.SummarizedMessages, cp.FirstRetainedSeq, cp.SummaryBytes, yesNo(cp.Stalled), yesNo(cp.PrunedRetry))
				}
				return tw.Flush()
			},
		}},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("unknown checkpoint command %q (list)", c.Args().First())
			}
			return usagef("checkpoint: missing command (list)")
		},
	}
}

// artifactOutput is `ctxctl artifact get --json`: the artifact with its id
// and size. Text is set when the bytes are valid UTF-8 (an offloaded tool
// result), else Base64. Fields are only ever added.
type artifactOutput struct {
	ID     string `json:"id"`
	URI    string `json:"uri"`
	Bytes  int    `json:"bytes"`
	Text   string `json:"text,omitempty"`
	Base64 string `json:"base64,omitempty"`
}

func artifactJSON(ref string, b []byte) artifactOutput {
	id := strings.TrimPrefix(ref, api.ArtifactScheme)
	out := artifactOutput{ID: id, URI: api.ArtifactScheme + id, Bytes: len(b)}
	if utf8.Valid(b) {
		out.Text = string(b)
	} else {
		out.Base64 = base64.StdEncoding.EncodeToString(b)
	}
	return out
}

// artifactCommand is `ctxctl artifact get [--json] ID|URI`.
func artifactCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "artifact",
		Usage:     "read a stored artifact",
		UsageText: "ctxctl artifact get [--json] ID|URI",
		Subcommands: []*cli.Command{{
			Name:      "get",
			Usage:     "write an artifact's bytes to stdout, by id or artifact:// URI",
			UsageText: "ctxctl artifact get [--json] ID|URI",
			Flags:     []cli.Flag{jsonFlag()},
			Action: func(c *cli.Context) error {
				args, err := exactArgs(c, "ID|URI")
				if err != nil {
					return err
				}
				b, err := e.client(c).Artifact(c.Context, args[0])
				if err != nil {
					return err
				}
				if c.Bool("json") {
					return writeJSON(e.stdout, artifactJSON(args[0], b))
				}
				_, err = e.stdout.Write(b)
				return err
			},
		}},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("unknown artifact command %q (get)", c.Args().First())
			}
			return usagef("artifact: missing command (get)")
		},
	}
}
