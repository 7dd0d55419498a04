package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"github.com/urfave/cli/v2"
)

// ctxdName is the daemon binary that runs the engine for replay and
// compact --transcript (docs/decisions.md "Replay runs in the ctxd
// binary; ctxctl stays a thin client").
const ctxdName = "ctxd"

// replayCommand is `ctxctl replay [--config FILE]... [--context-limit N]
// [--data-dir DIR] [--json] FILE`: it runs `ctxd replay FILE <flags>`.
func replayCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "replay",
		Usage: "run a recorded agent session through ctxd's engine, with no daemon",
		UsageText: "ctxctl replay [--config FILE]... [--context-limit N] [--data-dir DIR] [--json] FILE\n\n" +
			"FILE is a Claude Code, Codex or pi session JSONL, a SWE-agent trajectory, or an\n" +
			"Anthropic or OpenAI message array. The engine runs in the ctxd binary (found\n" +
			"next to ctxctl, else on PATH); its output and exit status are passed through.",
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "config", Usage: "a configuration `FILE` layered above the system and user files; repeat for more"},
			&cli.Uint64Flag{Name: "context-limit", Usage: "the context window in `TOKENS` (default: the transcript's, else the model catalog's)"},
			&cli.StringFlag{Name: "data-dir", Usage: "keep the store in `DIR` (default: a temporary directory, removed after)"},
			jsonFlag(),
		},
		Action: func(c *cli.Context) error {
			args, err := exactArgs(c, "FILE")
			if err != nil {
				return err
			}
			argv := []string{"replay", args[0]}
			for _, f := range c.StringSlice("config") {
				argv = append(argv, "--config", f)
			}
			if c.IsSet("context-limit") {
				argv = append(argv, "--context-limit", strconv.FormatUint(c.Uint64("context-limit"), 10))
			}
			if d := c.String("data-dir"); d != "" {
				argv = append(argv, "--data-dir", d)
			}
			if c.Bool("json") {
				argv = append(argv, "--json")
			}
			return execCtxd(e, "replay", argv)
		},
	}
}

// findCtxd returns the ctxd binary: the one next to the running ctxctl
// first (a build of both, `go build -o bin/ ./cmd/...`, stays consistent),
// else the first on PATH.
func findCtxd(e *env) (string, error) {
	if self, err := e.executable(); err == nil {
		if real, err := filepath.EvalSymlinks(self); err == nil {
			self = real
		}
		p := filepath.Join(filepath.Dir(self), ctxdName)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return e.lookPath(ctxdName)
}

// execCtxd runs ctxd with args, passing stdin, stdout and stderr through,
// and ends ctxctl with ctxd's exit status. what names the ctxctl command
// in the error for a missing binary.
func execCtxd(e *env, what string, args []string) error {
	bin, err := findCtxd(e)
	if err != nil {
		return fmt.Errorf("ctxctl %s runs the engine in the ctxd binary, which was not found next to ctxctl or on PATH: build both with `go build -o bin/ ./cmd/...`", what)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = e.stdin, e.stdout, e.stderr
	// No CommandContext: on Ctrl-C the terminal signals ctxd too, and
	// ctxctl waits for it to finish its own shutdown.
	err = cmd.Run()
	if x, ok := errors.AsType[*exec.ExitError](err); ok {
		code := x.ExitCode()
		if code < 0 { // killed by a signal
			code = exitFailure
		}
		return exitError{code: code}
	}
	if err != nil {
		return fmt.Errorf("run %s: %w", bin, err)
	}
	return nil
}
