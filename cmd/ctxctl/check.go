package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/ctxd/ctxd/config"
)

// checkCommand is `ctxctl check [--config FILE]... [--agent-file FILE]
// [--json]`: it validates the layered configuration (docs/design.md §3) and the
// compaction.md agent file (§5.4), like `nginx -t`.
func checkCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "check",
		Usage: "validate the configuration and print every problem",
		UsageText: "ctxctl check [--config FILE]... [--agent-file FILE] [--json]\n\n" +
			"Layers, lowest first: built-in defaults, " + config.SystemPath + ",\n" +
			"$XDG_CONFIG_HOME/ctxd/config.toml (default ~/.config), then each --config\n" +
			"in order. Problems print as FILE:LINE:COL: KEY: message on stderr.\n" +
			"Exit status: 0 valid, 1 invalid, 2 usage error.",
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "config", Usage: "a configuration `FILE` layered above the system and user files; repeat for more"},
			&cli.StringFlag{Name: "agent-file", Usage: "the compaction.md `FILE` to check (default: compaction.agent_file)"},
			&cli.BoolFlag{Name: "json", Usage: "print the effective configuration, or every problem, as JSON on stdout"},
		},
		Action: func(c *cli.Context) error { return runCheck(c, e) },
	}
}

// checkOutput is the --json document of a valid configuration: the
// effective configuration with TOML key names and "sources" (from
// config.Config), plus derived values, "valid": true and its warnings.
// Fields are only ever added.
type checkOutput struct {
	Valid bool `json:"valid"`
	config.Config
	Effective effectiveValues  `json:"effective"`
	Warnings  []config.Warning `json:"warnings,omitempty"`
}

// checkProblems is the --json document of an invalid configuration (exit
// 1): "valid": false, every problem (file, line, col, key, message: as
// printed on stderr) and the warnings.
type checkProblems struct {
	Valid    bool             `json:"valid"`
	Problems []config.Problem `json:"problems"`
	Warnings []config.Warning `json:"warnings,omitempty"`
}

// effectiveValues are values ctxd derives from the configuration.
type effectiveValues struct {
	// Exactly one of the two threshold fields is present.
	ThresholdPercent      *uint64 `json:"threshold_percent,omitempty"`
	ThresholdBufferTokens *uint64 `json:"threshold_buffer_tokens,omitempty"`
	// AgentFile is the compaction.md in effect, if any.
	AgentFile string `json:"agent_file,omitempty"`
	// SummarizerTimeoutMS is each summarizer call's timeout (§5.4).
	SummarizerTimeoutMS int64 `json:"summarizer_timeout_ms"`
	// ServerShape is set when compaction.shape is "server" (§10).
	ServerShape *serverShapeReport `json:"server_shape,omitempty"`
}

func runCheck(c *cli.Context, e *env) error {
	if c.NArg() != 0 {
		return usagef("check takes no arguments, got %q (flags must come before arguments)", c.Args().Slice())
	}
	opts := config.Options{
		SystemPath: e.systemConfig,
		UserPath:   config.UserPath(e.getenv),
		Files:      c.StringSlice("config"),
	}
	cfg, warnings, err := config.Load(opts)
	var problems []config.Problem
	agentPath := c.String("agent-file")
	if err != nil {
		var cerr *config.Error
		if !errors.As(err, &cerr) {
			return err
		}
		problems = append(problems, cerr.Problems...)
		if agentPath == "" {
			// Report the agent file's problems (a missing file) together
			// with the configuration's.
			agentPath = cerr.AgentFile
		}
	} else if agentPath == "" {
		agentPath = cfg.Compaction.AgentFile
	}
	var agent *config.AgentFile
	if agentPath != "" {
		a, aerr := config.LoadAgentFile(agentPath)
		var cerr *config.Error
		switch {
		case aerr == nil:
			agent = &a
		case errors.As(aerr, &cerr):
			problems = append(problems, cerr.Problems...)
		default:
			return aerr
		}
	}

	if err == nil {
		problems = append(problems, checkPrivateDirs(cfg, e.getenv)...)
		problems = append(problems, checkOffloadDir(cfg, e.getenv)...)
		problems = append(problems, checkSecretEnvs(cfg, e.getenv)...)
	}

	for _, w := range warnings {
		w.Message = "warning: " + w.Message
		fmt.Fprintln(e.stderr, w.String())
	}
	asJSON := func(v any) error {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(v); err != nil {
			return fmt.Errorf("write json: %w", err)
		}
		return nil
	}
	shape := serverShapeOf(cfg)
	if err == nil && shape != nil {
		fmt.Fprintln(e.stderr, shape.warning())
	}
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(e.stderr, p.String())
		}
		fmt.Fprintf(e.stderr, "ctxctl check: %d %s\n", len(problems), plural(len(problems), "problem", "problems"))
		if c.Bool("json") {
			if err := asJSON(checkProblems{Problems: problems, Warnings: warnings}); err != nil {
				return err
			}
		}
		return exitError{code: exitFailure}
	}

	if c.Bool("json") {
		out := checkOutput{Valid: true, Config: cfg, Warnings: warnings}
		if t := cfg.ContextCompaction.Trigger; t.Percent > 0 {
			out.Effective.ThresholdPercent = &t.Percent
		} else {
			out.Effective.ThresholdBufferTokens = &t.BufferTokens
		}
		out.Effective.AgentFile = agentPath
		out.Effective.SummarizerTimeoutMS = config.SummarizerTimeout(agent).Milliseconds()
		out.Effective.ServerShape = shape
		if shape != nil {
			// The warning printed on stderr is one of the document's too.
			out.Warnings = append(out.Warnings, config.Warning{Key: "compaction.shape", Message: strings.TrimPrefix(shape.warning(), "warning: ")})
		}
		if err := asJSON(out); err != nil {
			return err
		}
	}
	fmt.Fprintf(e.stderr, "ctxctl check: OK (%s)\n", describeLayers(opts, agentPath))
	return nil
}

// describeLayers names the sources checked, lowest first: the system and
// user files that exist, then each --config file.
func describeLayers(opts config.Options, agentPath string) string {
	var files []string
	for _, f := range []string{opts.SystemPath, opts.UserPath} {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err == nil {
			files = append(files, f)
		}
	}
	files = append(files, opts.Files...)
	s := "built-in defaults only"
	if len(files) > 0 {
		s = "checked " + strings.Join(files, ", ")
	}
	if agentPath != "" {
		s += "; agent file " + agentPath
	}
	return s
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// checkOffloadDir verifies that the offload directory (docs/design.md §6: created
// on first use) exists as a writable directory or can be created: its
// nearest existing ancestor is a directory ctxd's user may write to. It
// creates nothing. A directory that cannot be created would make every
// offload fail (the results stay whole, offload_failed events).
func checkOffloadDir(cfg config.Config, getenv func(string) string) []config.Problem {
	dir, key, table := cfg.Offload.Dir, "offload.dir", config.TableOffload
	if !cfg.Offload.Enabled {
		return nil
	}
	if dir == "" {
		data := cfg.Storage.DataDir
		if data == "" {
			data = defaultStateDir(getenv)
		}
		if data == "" {
			return nil
		}
		dir, key, table = filepath.Join(data, "offload"), "storage.data_dir", config.TableStorage
	}
	// The layer that set the key names the problem's file ("default" for
	// the built-in value).
	src := cfg.Sources[table]
	problem := func(format string, args ...any) []config.Problem {
		return []config.Problem{{File: src, Key: key, Message: fmt.Sprintf(format, args...)}}
	}
	dir, _ = filepath.Abs(dir)
	p := dir
	for {
		fi, err := os.Stat(p)
		switch {
		case err == nil && !fi.IsDir():
			return problem("offload directory %s cannot be created: %s is not a directory", dir, p)
		case err == nil:
			if aerr := unix.Access(p, unix.W_OK|unix.X_OK); aerr != nil {
				what := "cannot be created"
				if p == dir {
					what = "is not writable"
				}
				return problem("offload directory %s %s: %s: %v", dir, what, p, aerr)
			}
			return nil
		case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, unix.ENOTDIR):
			return problem("offload directory %s cannot be checked: %v", dir, err)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return nil
		}
		p = parent
	}
}

// checkPrivateDirs verifies what the daemon refuses at start in an
// existing data directory and configured offload.dir: one that belongs to
// another user, or grants group or others any access (docs/design.md §8b:
// sessions and tool results are the owner's alone). A missing directory is
// fine (ctxd creates it 0700), and so is a too-open default
// <data_dir>/offload, which ctxd tightens itself. It changes nothing.
func checkPrivateDirs(cfg config.Config, getenv func(string) string) []config.Problem {
	var out []config.Problem
	check := func(dir, what, key, table string) {
		if dir == "" {
			return
		}
		dir, _ = filepath.Abs(dir)
		fi, err := os.Stat(dir)
		if err != nil || !fi.IsDir() {
			return // created by ctxd, or reported by checkOffloadDir
		}
		problem := func(format string, args ...any) {
			out = append(out, config.Problem{File: cfg.Sources[table], Key: key, Message: fmt.Sprintf(format, args...)})
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != uint32(os.Getuid()) {
			problem("%s %s belongs to uid %d, not to this user (%d): ctxd would not start; choose a directory of your own or run: chown %d %s", what, dir, st.Uid, os.Getuid(), os.Getuid(), dir)
			return
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			problem("%s %s is mode %04o: other users could read what ctxd keeps there; ctxd would not start; run: chmod 700 %s", what, dir, perm, dir)
		}
	}
	data := cfg.Storage.DataDir
	if data == "" {
		data = defaultStateDir(getenv)
	}
	check(data, "data directory", "storage.data_dir", config.TableStorage)
	if cfg.Offload.Enabled {
		check(cfg.Offload.Dir, "offload directory", "offload.dir", config.TableOffload)
	}
	return out
}

// checkSecretEnvs verifies that storage.nats.token_env, with the nats
// backend, names a variable set in this environment: the daemon refuses to
// start without its NATS token. It checks this shell's environment: run
// check in the daemon's.
func checkSecretEnvs(cfg config.Config, getenv func(string) string) []config.Problem {
	var out []config.Problem
	if n := cfg.Storage.NATS; cfg.Storage.Backend == config.BackendNATS && n.TokenEnv != "" && getenv(n.TokenEnv) == "" {
		out = append(out, config.Problem{File: cfg.Sources[config.TableStorage], Key: "storage.nats.token_env",
			Message: fmt.Sprintf("names %s, which is unset or empty here: ctxd would not start (its NATS token); set it in the daemon's environment (check reads this shell's)", n.TokenEnv)})
	}
	return out
}

// defaultStateDir is ctxd's default data directory: $XDG_STATE_HOME/ctxd,
// else ~/.local/state/ctxd ("" when there is no home).
func defaultStateDir(getenv func(string) string) string {
	if d := getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "ctxd")
	}
	if home := getenv("HOME"); home != "" {
		return filepath.Join(home, ".local", "state", "ctxd")
	}
	return ""
}
