package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/ctxd/ctxd/api"
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
	// ctx bounds every request; main cancels it on SIGINT/SIGTERM.
	ctx            context.Context
	stdin          io.Reader
	stdout, stderr io.Writer
	// getenv is os.Getenv outside tests.
	getenv func(string) string
	// systemConfig is the system configuration layer, config.SystemPath
	// outside tests.
	systemConfig string
	// executable is os.Executable outside tests: ctxctl looks for ctxd in
	// its directory first.
	executable func() (string, error)
	// lookPath is exec.LookPath outside tests.
	lookPath func(string) (string, error)
}

// run executes ctxctl with args (args[0] is the program name) and returns
// the exit code.
// SIGINT and SIGTERM cancel the running request (a followed event stream
// ends cleanly); a child ctxd (replay, compact --transcript) gets the
// signal itself and ctxctl waits for it.
func run(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runEnv(args, &env{
		ctx: ctx, stdin: os.Stdin, stdout: stdout, stderr: stderr, getenv: getenv,
		systemConfig: config.SystemPath, executable: os.Executable, lookPath: exec.LookPath,
	})
}

// runEnv is run with every dependency explicit; nil fields take the
// defaults of run.
func runEnv(args []string, e *env) int {
	e.fill()
	err := newApp(e).RunContext(e.ctx, args)
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
		fmt.Fprintf(e.stderr, "ctxctl: %s\n", describeError(err))
		return exitFailure
	}
}

// fill sets the defaults of the fields a test left nil.
func (e *env) fill() {
	if e.ctx == nil {
		e.ctx = context.Background()
	}
	if e.stdin == nil {
		e.stdin = eofReader{}
	}
	if e.getenv == nil {
		e.getenv = func(string) string { return "" }
	}
	if e.executable == nil {
		e.executable = os.Executable
	}
	if e.lookPath == nil {
		e.lookPath = exec.LookPath
	}
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// describeError is the one line printed for a failed command. An error of
// the daemon carries its message (and the request field at fault); a
// daemon that cannot be reached says so and names the socket tried
// ("is ctxd running? socket: …", from api.Client).
func describeError(err error) string {
	if e, ok := errors.AsType[*api.Error](err); ok && e.Field != "" {
		return fmt.Sprintf("%v (field %s)", err, e.Field)
	}
	return err.Error()
}

// socketPath is the socket of the global --socket flag, else
// api.DefaultSocketPath ($CTXD_SOCKET, $XDG_RUNTIME_DIR/ctxd.sock,
// /tmp/ctxd-<uid>/ctxd.sock).
func (e *env) socketPath(c *cli.Context) string {
	if s := c.String("socket"); s != "" {
		return s
	}
	return api.DefaultSocketPath(e.getenv)
}

// client returns the api.Client for the daemon named by the global flags:
// ctxctl reaches ctxd through it alone.
func (e *env) client(c *cli.Context) *api.Client {
	return &api.Client{Socket: e.socketPath(c), UserAgent: "ctxctl/" + api.Version}
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
		statusCommand(e),
		sessionCommand(e),
		compactCommand(e),
		mcpCommand(e),
		checkpointCommand(e),
		artifactCommand(e),
		doctorCommand(e),
		replayCommand(e),
		importCommand(e),
		dashboardCommand(e),
	}
}

// newApp builds the ctxctl application around e. Global flags are declared
// on the App and must precede the command (urfave/cli/v2 does not accept
// them after it).
func newApp(e *env) *cli.App {
	onUsage := func(_ *cli.Context, err error, _ bool) error {
		return usageError{msg: err.Error()}
	}
	cmds := commands(e)
	var setUsage func([]*cli.Command)
	setUsage = func(cs []*cli.Command) {
		for _, c := range cs {
			if c.OnUsageError == nil {
				c.OnUsageError = onUsage
			}
			setUsage(c.Subcommands)
		}
	}
	setUsage(cmds)
	return &cli.App{
		Name:  "ctxctl",
		Usage: "configure and inspect ctxd, the context-management daemon for LLM agents",
		UsageText: "ctxctl [global flags] COMMAND [command flags] [arguments]\n\n" +
			"Flags go before arguments; global flags go before the command.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "socket", Usage: "the daemon's unix socket `PATH` (default: $CTXD_SOCKET, else $XDG_RUNTIME_DIR/ctxd.sock, else /tmp/ctxd-<uid>/ctxd.sock)"},
		},
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
