package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"
)

// ctxd's command line speaks ctxctl's dialect (urfave/cli/v2): `--flag`
// in the usage and help, the same help layout, the same usage errors.
// urfave/cli parses with the standard flag package underneath, so the
// single-dash spellings (`-config FILE`, `-config=FILE`) keep working.

// Flag names of the daemon (docs/operating.md, "Starting").
const (
	flagConfig    = "config"
	flagSocket    = "socket"
	flagDataDir   = "data-dir"
	flagListen    = "listen"
	flagLogFormat = "log-format"
	flagLogLevel  = "log-level"
)

// Flag names of the offline commands.
const (
	flagContextLimit = "context-limit"
	flagJSON         = "json"
)

// daemonUsage is the first part of `ctxd --help`.
const daemonUsage = `ctxd [--config FILE]... [--socket PATH] [--data-dir DIR] [--listen ADDR]
     [--log-format text|json] [--log-level debug|info|warn|error]
ctxd replay [--config FILE]... [--context-limit N] [--data-dir DIR] [--json] FILE
ctxd compact-transcript [--config FILE]... [--context-limit N] [--data-dir DIR] [--json] FILE`

// daemonDescription is the DESCRIPTION of `ctxd --help`.
const daemonDescription = `Serves the HTTP API on a unix socket (and, with --listen, on TCP behind a
bearer token) and the provider proxy; keeps sessions under the data directory.
SIGINT and SIGTERM stop it (exit 0), SIGHUP reloads the configuration.
A flag overrides its configuration key only when given. Exit codes: 0 clean
stop, 1 failure, 2 usage error. docs/operating.md describes every flag.

The offline commands run the engine on a transcript file in this process,
with no socket (ctxctl replay and ctxctl compact --transcript run them);
'ctxd replay --help' shows their flags.`

// helpTemplate is urfave/cli's application help with "OPTIONS" for
// "GLOBAL OPTIONS": the daemon has no subcommands whose options would
// differ (the offline commands have their own --help).
var helpTemplate = strings.ReplaceAll(cli.AppHelpTemplate, "GLOBAL OPTIONS:", "OPTIONS:")

// errUsage marks a command line that cannot be run: exit 2.
var errUsage = errors.New("usage")

// usageError is a usage problem with its message; errors.Is(err, errUsage)
// holds for it.
type usageError struct{ msg string }

func (u usageError) Error() string        { return u.msg }
func (u usageError) Is(target error) bool { return target == errUsage }

// newCLIApp returns the urfave/cli application around flags and action,
// writing help to stdout and nothing else itself: every error comes back
// from Run for the caller to print (no os.Exit, no help after an error).
func newCLIApp(name, usageText, description string, flags []cli.Flag, stdout, stderr io.Writer, action cli.ActionFunc) *cli.App {
	return &cli.App{
		Name:                      name,
		HelpName:                  name,
		Usage:                     "the context-management daemon for LLM agents",
		UsageText:                 usageText,
		Description:               description,
		Flags:                     flags,
		Action:                    action,
		CustomAppHelpTemplate:     helpTemplate,
		HideVersion:               true,
		HideHelpCommand:           true,
		DisableSliceFlagSeparator: true, // --config a,b.toml is one file
		Writer:                    stdout,
		ErrWriter:                 stderr,
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return usageError{msg: err.Error()}
		},
		ExitErrHandler: func(*cli.Context, error) {},
	}
}

// daemonFlags are the daemon's flags, with m's log settings as their
// defaults.
func (m *Main) daemonFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: flagConfig, Usage: "a configuration `FILE` layered above /etc/ctxd/config.toml and $XDG_CONFIG_HOME/ctxd/config.toml; repeat for more (lowest first)"},
		&cli.StringFlag{Name: flagSocket, Usage: "the unix socket `PATH` (default: daemon.socket, else $CTXD_SOCKET, $XDG_RUNTIME_DIR/ctxd.sock or /tmp/ctxd-<uid>/ctxd.sock)"},
		&cli.StringFlag{Name: flagDataDir, Usage: "the data `DIR` (default: storage.data_dir, else $XDG_STATE_HOME/ctxd or ~/.local/state/ctxd)"},
		&cli.StringFlag{Name: flagListen, Usage: "also serve the API on TCP at `ADDR` (host:port; needs daemon.auth_token_env)"},
		&cli.StringFlag{Name: flagLogFormat, Value: m.LogFormat, Usage: "log `FORMAT`: text or json"},
		&cli.StringFlag{Name: flagLogLevel, Value: m.LogLevel, Usage: "log `LEVEL`: debug, info, warn or error"},
	}
}

// ParseFlags reads args (without the program name). Only the flags given
// override the configuration files. `--help` (or -h) prints the help on
// m.Stdout and returns flag.ErrHelp; any other problem is an error for
// which errors.Is(err, errUsage) holds.
func (m *Main) ParseFlags(args []string) error {
	ran := false
	app := newCLIApp("ctxd", daemonUsage, daemonDescription, m.daemonFlags(), m.stdout(), m.stderr(), func(c *cli.Context) error {
		ran = true
		if c.NArg() > 0 {
			return usageError{msg: fmt.Sprintf("unexpected argument %q (ctxd takes flags only; the offline commands are replay and compact-transcript)", c.Args().First())}
		}
		m.ConfigFiles = c.StringSlice(flagConfig)
		m.Socket = c.String(flagSocket)
		m.DataDir = c.String(flagDataDir)
		m.Listen = c.String(flagListen)
		m.LogFormat = c.String(flagLogFormat)
		m.LogLevel = c.String(flagLogLevel)
		return nil
	})
	if err := app.Run(append([]string{"ctxd"}, args...)); err != nil {
		return err
	}
	if !ran { // urfave/cli printed the help and ran nothing
		return flag.ErrHelp
	}
	if _, err := parseLevel(m.LogLevel); err != nil {
		return usageError{msg: err.Error()}
	}
	if m.LogFormat != "text" && m.LogFormat != "json" {
		return usageError{msg: fmt.Sprintf("--log-format: %q is not text or json", m.LogFormat)}
	}
	return nil
}

// offlineArgs are the parsed flags and file of an offline command.
type offlineArgs struct {
	configs      []string
	contextLimit uint64
	dataDir      string
	json         bool
	file         string
}

// parseOffline reads the arguments of `ctxd replay` or `ctxd
// compact-transcript` (name). Flags may come before or after the file, as
// people type them and as ctxctl passes them (the file first). `--help`
// prints the help on stdout and returns flag.ErrHelp; any other problem is
// an error for which errors.Is(err, errUsage) holds.
func parseOffline(name string, args []string, stdout, stderr io.Writer) (offlineArgs, error) {
	flags := []cli.Flag{
		&cli.StringSliceFlag{Name: flagConfig, Usage: "a configuration `FILE` layered above the system and user files; repeat for more"},
		&cli.Uint64Flag{Name: flagContextLimit, Usage: "the context window in `TOKENS`", DefaultText: "the transcript's, else the model catalog's"},
		&cli.StringFlag{Name: flagDataDir, Usage: "keep the store in `DIR` (default: a temporary directory, removed after)"},
		&cli.BoolFlag{Name: flagJSON, Usage: "print one JSON object on stdout"},
	}
	var out offlineArgs
	ran := false
	usage := fmt.Sprintf("ctxd %s [--config FILE]... [--context-limit N] [--data-dir DIR] [--json] FILE", name)
	app := newCLIApp("ctxd "+name, usage, "", flags, stdout, stderr, func(c *cli.Context) error {
		ran = true
		if c.NArg() != 1 {
			return usageError{msg: fmt.Sprintf("one transcript file, got %d arguments", c.NArg())}
		}
		out = offlineArgs{
			configs:      c.StringSlice(flagConfig),
			contextLimit: c.Uint64(flagContextLimit),
			dataDir:      c.String(flagDataDir),
			json:         c.Bool(flagJSON),
			file:         c.Args().First(),
		}
		return nil
	})
	app.Usage = "run the engine on a transcript file, with no daemon"
	if err := app.Run(append([]string{"ctxd " + name}, flagsFirst(args, flags)...)); err != nil {
		return offlineArgs{}, err
	}
	if !ran {
		return offlineArgs{}, flag.ErrHelp
	}
	return out, nil
}

// flagsFirst returns args with every flag (and the value of a flag that
// takes one, given as the next argument) before the other arguments, in
// their orders; everything after "--" stays an argument. urfave/cli, like
// the flag package, stops at the first argument that is not a flag.
func flagsFirst(args []string, flags []cli.Flag) []string {
	takesValue := map[string]bool{}
	for _, f := range flags {
		_, isBool := f.(*cli.BoolFlag)
		for _, n := range f.Names() {
			takesValue[n] = !isBool
		}
	}
	var front, back []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			back = append(back, args[i+1:]...)
			return append(append(front, "--"), back...)
		case len(a) > 1 && a[0] == '-':
			front = append(front, a)
			name := strings.TrimLeft(a, "-")
			if !strings.Contains(name, "=") && takesValue[name] && i+1 < len(args) {
				i++
				front = append(front, args[i])
			}
		default:
			back = append(back, a)
		}
	}
	if len(back) == 0 {
		return front
	}
	return append(append(front, "--"), back...)
}

// stdout receives the help; nil Stdout means os.Stdout.
func (m *Main) stdout() io.Writer {
	if m.Stdout != nil {
		return m.Stdout
	}
	return os.Stdout
}
