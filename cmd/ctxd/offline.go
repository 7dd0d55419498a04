package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/replay"
	"github.com/ctxd/ctxd/transcript"
)

// Offline subcommands: the engine run in this process on a transcript file,
// with no socket (issue 8). `ctxctl replay` and `ctxctl compact --transcript`
// exec them (docs/decisions.md "Replay runs in the ctxd binary").
const (
	cmdReplay            = "replay"
	cmdCompactTranscript = "compact-transcript"
)

// runOffline runs `ctxd replay FILE …` or `ctxd compact-transcript FILE …`
// and returns the exit code: 0 done, 1 failed, 2 usage.
func runOffline(ctx context.Context, name string, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("ctxd "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var configs stringList
	fs.Var(&configs, "config", "configuration `FILE` layered over the system and user files (repeatable)")
	limit := fs.Uint64("context-limit", 0, "context window in `tokens` (default: the transcript's, else the model catalog's)")
	dataDir := fs.String("data-dir", "", "keep the store in `DIR` (default: a temporary directory, removed after)")
	asJSON := fs.Bool("json", false, "print one JSON object on stdout")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: ctxd %s [--config FILE]... [--context-limit N] [--data-dir DIR] [--json] FILE\n", name)
		fs.PrintDefaults()
	}
	// Accept flags after the file too, as people type them.
	var file string
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		if file != "" {
			fmt.Fprintf(stderr, "ctxd %s: one transcript file, got %q and %q\n", name, file, fs.Arg(0))
			return 2
		}
		file, rest = fs.Arg(0), fs.Args()[1:]
	}
	if file == "" {
		fs.Usage()
		return 2
	}

	cfg, warnings, err := config.Load(config.Options{SystemPath: config.SystemPath, UserPath: config.UserPath(getenv), Files: configs})
	for _, w := range warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	f, err := os.Open(file)
	if err != nil {
		fmt.Fprintf(stderr, "ctxd %s: %v\n", name, err)
		return 1
	}
	tr, err := transcript.Import(f, transcript.Options{})
	f.Close()
	if err != nil {
		fmt.Fprintf(stderr, "ctxd %s: %s: %v\n", name, file, err)
		return 1
	}
	// The same notes as ctxctl import: one rule for every command that
	// reads a transcript (issue 14).
	for _, n := range tr.Notes() {
		fmt.Fprintf(stderr, "ctxd %s: %s: note: %s\n", name, file, n)
	}
	opts := replay.Options{Config: cfg, ContextLimit: *limit, DataDir: *dataDir}
	stderrFile, _ := stderr.(*os.File)
	clearBar := func() {}
	if stderrFile != nil && replay.IsTerminal(stderrFile) {
		opts.Progress, clearBar = replay.ProgressBar(stderr, name)
	}
	if !*asJSON {
		opts.Timeline = func(s replay.Step) {
			clearBar()
			replay.WriteStep(stdout, s)
		}
	}

	var out any
	switch name {
	case cmdReplay:
		r, err := replay.Run(ctx, tr, opts)
		clearBar()
		if err != nil {
			fmt.Fprintf(stderr, "ctxd replay: %s: %v\n", file, err)
			return 1
		}
		if !*asJSON {
			r.WriteText(stdout)
			return 0
		}
		out = r
	case cmdCompactTranscript:
		r, err := replay.CompactTranscript(ctx, tr, opts)
		clearBar()
		if err != nil {
			fmt.Fprintf(stderr, "ctxd compact-transcript: %s: %v\n", file, err)
			return 1
		}
		if !*asJSON {
			fmt.Fprintf(stdout, "%s\n\n", r.Summary)
			fmt.Fprintf(stdout, "compacted %d messages (%s): %d → %d tokens (threshold %d of %d), %d retained messages, %d-byte summary by %s\n",
				r.Messages, r.Format, r.TokensBefore, r.TokensAfter, r.Threshold, r.ContextLimit, r.RetainedMessages, r.SummaryBytes, r.Binding)
			return 0
		}
		out = r
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}
