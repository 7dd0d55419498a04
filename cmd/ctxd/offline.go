package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/replay"
	"github.com/ctxd/ctxd/transcript"
)

// Offline subcommands: the engine run in this process on a transcript file,
// with no socket. `ctxctl replay` and `ctxctl compact --transcript`
// exec them (docs/decisions.md "Replay runs in the ctxd binary").
const (
	cmdReplay            = "replay"
	cmdCompactTranscript = "compact-transcript"
)

// runOffline runs `ctxd replay FILE …` or `ctxd compact-transcript FILE …`
// and returns the exit code: 0 done, 1 failed, 2 usage.
func runOffline(ctx context.Context, name string, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	a, err := parseOffline(name, args, stdout, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "ctxd %s: %v\nRun 'ctxd %s --help' for usage.\n", name, err, name)
		return 2
	}
	file := a.file

	cfg, warnings, err := config.Load(config.Options{SystemPath: config.SystemPath, UserPath: config.UserPath(getenv), Files: a.configs})
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
	// reads a transcript.
	for _, n := range tr.Notes() {
		fmt.Fprintf(stderr, "ctxd %s: %s: note: %s\n", name, file, n)
	}
	if a.dataDir != "" {
		// The daemon's rule for its data directory: the store holds the
		// transcript's content.
		if _, err := privateDir(a.dataDir, "--data-dir", false); err != nil {
			fmt.Fprintf(stderr, "ctxd %s: %v\n", name, err)
			return 1
		}
	}
	opts := replay.Options{Config: cfg, ContextLimit: a.contextLimit, DataDir: a.dataDir}
	stderrFile, _ := stderr.(*os.File)
	clearBar := func() {}
	if stderrFile != nil && replay.IsTerminal(stderrFile) {
		opts.Progress, clearBar = replay.ProgressBar(stderr, name)
	}
	if !a.json {
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
		if !a.json {
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
		if a.dataDir == "" && strings.Contains(r.Summary, r.DataDir) {
			// The summary's recall files and offloaded results were in
			// the temporary data directory, removed on exit.
			fmt.Fprintf(stderr, "ctxd compact-transcript: %s: note: the files the summary names under %s were removed with that temporary directory; --data-dir DIR keeps them\n", file, r.DataDir)
		}
		if !a.json {
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
