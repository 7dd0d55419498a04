package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/ctxd/ctxd/config"
)

// Exit codes of ctxctl.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// env is what a ctxctl run sees of its process: tests fill it in instead of
// exec'ing the binary.
type env struct {
	stdout, stderr io.Writer
	// getenv is os.Getenv outside tests.
	getenv func(string) string
	// systemConfig is the system configuration layer, config.SystemPath
	// outside tests.
	systemConfig string
}

// run executes ctxctl with args (args[0] is the program name) and returns
// the exit code.
func run(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	return runEnv(args, &env{stdout: stdout, stderr: stderr, getenv: getenv, systemConfig: config.SystemPath})
}

// runEnv is run with every dependency explicit.
func runEnv(args []string, e *env) int {
	err := newApp(e).Run(args)
	var usage usageError
	var exit exitError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &usage):
		fmt.Fprintf(e.stderr, "ctxctl: %s\nRun 'ctxctl --help' for usage.\n", usage.msg)
		return exitUsage
	case errors.As(err, &exit):
		// The command has already printed what went wrong.
		return exit.code
	default:
		fmt.Fprintf(e.stderr, "ctxctl: %v\n", err)
		return exitFailure
	}
}

// usageError is a command line that cannot be run: exit 2.
type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }

func usagef(format string, args ...any) error {
	return usageError{msg: fmt.Sprintf(format, args...)}
}

// exitError ends a command with code after it printed its own diagnostics.
type exitError struct{ code int }

func (x exitError) Error() string { return fmt.Sprintf("exit status %d", x.code) }

// commands lists ctxctl's commands; a new command is one more file with a
// constructor added here.
func commands(e *env) []*cli.Command {
	return []*cli.Command{
		checkCommand(e),
	}
}

// newApp builds the ctxctl application around e. Global flags (none yet)
// are declared on the App and must precede the command.
func newApp(e *env) *cli.App {
	onUsage := func(_ *cli.Context, err error, _ bool) error {
		return usageError{msg: err.Error()}
	}
	cmds := commands(e)
	for _, c := range cmds {
		if c.OnUsageError == nil {
			c.OnUsageError = onUsage
		}
	}
	return &cli.App{
		Name:  "ctxctl",
		Usage: "configure and inspect ctxd, the context-management daemon for LLM agents",
		UsageText: "ctxctl [global flags] COMMAND [command flags] [arguments]\n\n" +
			"Flags go before arguments; global flags go before the command.",
		Commands:                  cmds,
		HideVersion:               true,
		HideHelpCommand:           true,
		DisableSliceFlagSeparator: true, // --config a,b.toml is one file
		Writer:                    e.stdout,
		ErrWriter:                 e.stderr,
		OnUsageError:              onUsage,
		// Errors come back to runEnv, which alone decides the exit code:
		// urfave's default handler would call os.Exit.
		ExitErrHandler: func(*cli.Context, error) {},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("unknown command %q", c.Args().First())
			}
			return usagef("missing command")
		},
	}
}
