package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/contextedit"
)

// doctorCommand is `ctxctl doctor [--config FILE]... [--json] [SESSION]`:
// what is in effect and why, from the configuration ctxctl reads and from
// the daemon when it answers (docs/design.md §3, §5, §6).
func doctorCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "doctor",
		Usage: "explain the configuration in effect, the daemon's state and, for a session, why compaction did or did not fire",
		UsageText: "ctxctl doctor [--config FILE]... [--json] [SESSION]\n\n" +
			"The configuration part needs no daemon: it layers the files as ctxd does\n" +
			"(give the daemon's --config files). Exit status 1 when the configuration is\n" +
			"invalid, the daemon or its NATS cluster is unreachable, or SESSION does not exist.",
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "config", Usage: "a configuration `FILE` layered above the system and user files; repeat for more"},
			jsonFlag(),
		},
		Action: func(c *cli.Context) error { return runDoctor(c, e) },
	}
}

// doctorReport is the --json document of ctxctl doctor. Fields are only
// ever added.
type doctorReport struct {
	Config         doctorConfig     `json:"config"`
	ContextEditing []doctorEditMode `json:"context_editing"`
	Bindings       []doctorBinding  `json:"summarizer_bindings"`
	Timeout        doctorTimeout    `json:"summarizer_timeout"`
	// ServerShape is set when compaction.shape is "server".
	ServerShape *serverShapeReport   `json:"server_shape,omitempty"`
	Daemon      doctorDaemon         `json:"daemon"`
	Session     *doctorSessionReport `json:"session,omitempty"`
}

// doctorConfig is the configuration as ctxctl layered it.
type doctorConfig struct {
	Valid    bool          `json:"valid"`
	Layers   []doctorLayer `json:"layers"`
	Sources  []doctorTable `json:"tables"`
	Problems []string      `json:"problems,omitempty"`
	Warnings []string      `json:"warnings,omitempty"`
}

// doctorLayer is one configuration layer, lowest first.
type doctorLayer struct {
	Name    string `json:"name"`
	Path    string `json:"path,omitempty"`
	Present bool   `json:"present"`
}

// doctorTable names the layer that set one table.
type doctorTable struct {
	Table  string `json:"table"`
	Source string `json:"source"`
}

// doctorEditMode is the context-editing mode in effect for a model (or for
// a class of models when Model is empty) and why.
type doctorEditMode struct {
	Model                string `json:"model,omitempty"`
	ServerContextEditing bool   `json:"server_context_editing"`
	Mode                 string `json:"mode"`
	Why                  string `json:"why"`
}

// doctorBinding is one summarizer binding; the key's value is never shown.
type doctorBinding struct {
	Name      string `json:"name"`
	Provider  string `json:"provider"`
	Model     string `json:"model,omitempty"`
	BaseURL   string `json:"base_url,omitempty"`
	APIKeyEnv string `json:"api_key_env,omitempty"`
	// KeySet says whether APIKeyEnv is set in ctxctl's environment.
	KeySet bool `json:"key_set"`
	// Embedded marks the default extractive summarizer (no binding
	// configured).
	Embedded bool `json:"embedded,omitempty"`
}

// doctorTimeout is each summarizer call's timeout and where it comes from.
type doctorTimeout struct {
	MS        int64  `json:"ms"`
	AgentFile string `json:"agent_file,omitempty"`
	Why       string `json:"why"`
}

// doctorDaemon is what the daemon answered.
type doctorDaemon struct {
	Socket    string      `json:"socket"`
	Reachable bool        `json:"reachable"`
	Error     string      `json:"error,omitempty"`
	Status    *api.Status `json:"status,omitempty"`
}

// doctorSessionReport is a session as the daemon describes it, plus the
// explanation of its last trigger check.
type doctorSessionReport struct {
	ID      string       `json:"id"`
	Error   string       `json:"error,omitempty"`
	Session *api.Session `json:"session,omitempty"`
	// Why explains the last trigger check in one line.
	Why string `json:"why,omitempty"`
	// Speculative counts the session's speculative summaries by outcome
	// and IdleCompactions lists its idle compactions with their expected
	// payback (docs/design.md §5.1), from its ledger; omitted when none.
	Speculative     *doctorSpeculative `json:"speculative,omitempty"`
	IdleCompactions []api.LedgerEntry  `json:"idle_compactions,omitempty"`
}

// doctorSpeculative is a session's speculative summaries by outcome, and
// the summarizer cost of the unused ones in US dollars.
type doctorSpeculative struct {
	Made       uint64  `json:"made"`
	Used       uint64  `json:"used"`
	Extended   uint64  `json:"extended"`
	Unused     uint64  `json:"unused"`
	UnusedCost float64 `json:"unused_cost"`
}

// addLedger fills the report's speculative summaries and idle
// compactions from the session's ledger.
func (r *doctorSessionReport) addLedger(l *api.LedgerResponse) {
	t := l.Totals
	if t.PreparedMade+t.PreparedUnused > 0 {
		r.Speculative = &doctorSpeculative{Made: t.PreparedMade, Used: t.PreparedUsed, Extended: t.PreparedExtended,
			Unused: t.PreparedUnused, UnusedCost: t.PreparedUnusedCost}
	}
	for _, en := range l.Entries {
		if en.Kind == api.LedgerKindIdle {
			r.IdleCompactions = append(r.IdleCompactions, en)
		}
	}
}

func runDoctor(c *cli.Context, e *env) error {
	if c.NArg() > 1 {
		return usagef("doctor takes at most one SESSION, got %q (flags must come before arguments)", c.Args().Slice())
	}
	sessionID := c.Args().First()
	var rep doctorReport
	failed := false

	// Configuration: the layers of docs/design.md §3, read as ctxd reads them.
	opts := config.Options{SystemPath: e.systemConfig, UserPath: config.UserPath(e.getenv), Files: c.StringSlice("config")}
	for _, l := range []struct{ name, path string }{{"system", opts.SystemPath}, {"user", opts.UserPath}} {
		if l.path == "" {
			continue
		}
		_, err := os.Stat(l.path)
		rep.Config.Layers = append(rep.Config.Layers, doctorLayer{Name: l.name, Path: l.path, Present: err == nil})
	}
	for _, f := range opts.Files {
		_, err := os.Stat(f)
		rep.Config.Layers = append(rep.Config.Layers, doctorLayer{Name: "--config", Path: f, Present: err == nil})
	}
	cfg, warnings, err := config.Load(opts)
	for _, w := range warnings {
		rep.Config.Warnings = append(rep.Config.Warnings, w.String())
	}
	if err != nil {
		failed = true
		if cerr, ok := errors.AsType[*config.Error](err); ok {
			for _, p := range cerr.Problems {
				rep.Config.Problems = append(rep.Config.Problems, p.String())
			}
		} else {
			rep.Config.Problems = append(rep.Config.Problems, err.Error())
		}
		cfg = config.Defaults()
	} else {
		rep.Config.Valid = true
	}
	tables := []string{config.TableContextCompaction, config.TableCompaction, config.TableOffload, config.TableContextEditing,
		config.TableSummarizer, config.TableDaemon, config.TableStorage, config.TableWorkers, config.TableProxy}
	for _, t := range tables {
		rep.Config.Sources = append(rep.Config.Sources, doctorTable{Table: t, Source: orDefault(cfg.Sources[t])})
	}
	var models, modelSources []string
	for k, v := range cfg.Sources {
		if strings.HasPrefix(k, "models.") && v != config.SourceDefault {
			models = append(models, k)
			if !slices.Contains(modelSources, v) {
				modelSources = append(modelSources, v)
			}
		}
	}
	slices.Sort(models)
	slices.Sort(modelSources)
	// The models table as a whole: the built-in catalog, plus the layers
	// that add or change entries (each listed below it).
	rep.Config.Sources = append(rep.Config.Sources, doctorTable{Table: "models", Source: strings.Join(append([]string{config.SourceDefault + " (built-in catalog)"}, modelSources...), " + ")})
	for _, k := range models {
		rep.Config.Sources = append(rep.Config.Sources, doctorTable{Table: k, Source: cfg.Sources[k]})
	}

	// Summarizer bindings and timeout.
	if len(cfg.Summarizer.Bindings) == 0 {
		rep.Bindings = []doctorBinding{{Name: config.ProviderExtractive, Provider: config.ProviderExtractive, Embedded: true}}
	}
	for _, b := range cfg.Summarizer.Bindings {
		rep.Bindings = append(rep.Bindings, doctorBinding{Name: b.Name, Provider: b.Provider, Model: b.Model, BaseURL: b.BaseURL,
			APIKeyEnv: b.APIKeyEnv, KeySet: b.APIKeyEnv != "" && e.getenv(b.APIKeyEnv) != ""})
	}
	rep.Timeout = summarizerTimeout(cfg, &failed, &rep.Config)
	rep.ServerShape = serverShapeOf(cfg)

	// The daemon.
	cl := e.client(c)
	rep.Daemon.Socket = cl.SocketPath()
	if st, err := cl.Status(c.Context); err != nil {
		failed = true
		rep.Daemon.Error = describeError(err)
	} else {
		rep.Daemon.Reachable = true
		rep.Daemon.Status = st
		if n := st.Storage; n != nil && n.NATS != nil && n.NATS.State != "connected" {
			failed = true // the daemon answers, but refuses every session request
		}
	}

	// The session, and the context-editing mode for its model (or per
	// model class without one).
	var sess *api.Session
	if sessionID != "" {
		rep.Session = &doctorSessionReport{ID: sessionID}
		if !rep.Daemon.Reachable {
			rep.Session.Error = "the daemon is unreachable"
		} else if s, err := cl.GetSession(c.Context, sessionID); err != nil {
			failed = true
			rep.Session.Error = describeError(err)
		} else {
			sess = s
			rep.Session.Session = s
			rep.Session.Why = whyLastCheck(s)
			if l, err := cl.Ledger(c.Context, sessionID); err == nil {
				rep.Session.addLedger(l)
			}
		}
	}
	if sess != nil {
		m, known := cfg.Model(sess.Model)
		mode, why := contextedit.Mode(cfg.ContextEditing, m.ServerContextEditing)
		if !known {
			why += fmt.Sprintf(" (model %q is not in the catalog ctxctl read: server_context_editing taken as false)", sess.Model)
		}
		if sess.ContextEditing != "" {
			mode, why = sess.ContextEditing, sess.ContextEditingWhy+" (reported by the daemon)"
		}
		rep.ContextEditing = []doctorEditMode{{Model: sess.Model, ServerContextEditing: m.ServerContextEditing, Mode: mode, Why: why}}
	} else {
		// Per model: the answer depends only on the model's
		// server_context_editing, so two entries cover every model.
		for _, server := range []bool{false, true} {
			mode, why := contextedit.Mode(cfg.ContextEditing, server)
			rep.ContextEditing = append(rep.ContextEditing, doctorEditMode{ServerContextEditing: server, Mode: mode, Why: why})
		}
	}

	if c.Bool("json") {
		if err := writeJSON(e.stdout, rep); err != nil {
			return err
		}
	} else {
		writeDoctor(e.stdout, &rep)
	}
	for _, p := range rep.Config.Problems {
		fmt.Fprintln(e.stderr, p)
	}
	if failed {
		return exitError{code: exitFailure}
	}
	return nil
}

// summarizerTimeout reads the agent file the configuration names, if any,
// and returns the timeout it implies (docs/design.md §5.4).
func summarizerTimeout(cfg config.Config, failed *bool, dc *doctorConfig) doctorTimeout {
	path := cfg.Compaction.AgentFile
	if path == "" {
		return doctorTimeout{MS: config.SummarizerTimeout(nil).Milliseconds(), Why: "no compaction.agent_file: a flat timeout per call"}
	}
	a, err := config.LoadAgentFile(path)
	if err != nil {
		*failed = true
		if cerr, ok := errors.AsType[*config.Error](err); ok {
			for _, p := range cerr.Problems {
				dc.Problems = append(dc.Problems, p.String())
			}
		} else {
			dc.Problems = append(dc.Problems, err.Error())
		}
		dc.Valid = false
		return doctorTimeout{MS: config.SummarizerTimeout(nil).Milliseconds(), AgentFile: path, Why: "the agent file is invalid (see the problems); ctxd would refuse it"}
	}
	t := doctorTimeout{MS: config.SummarizerTimeout(&a).Milliseconds(), AgentFile: path}
	if a.Limits.TimeoutMS > 0 {
		t.Why = "limits.timeout_ms of the agent file, honored exactly"
	} else {
		t.Why = "the agent file sets no limits.timeout_ms: the agent-file default"
	}
	return t
}

// whyLastCheck explains a session's last trigger check, or its absence.
func whyLastCheck(s *api.Session) string {
	tc := s.LastCheck
	if tc == nil {
		if !s.Auto {
			return "no automatic check has run; context_compaction.auto is false for this session"
		}
		return "no automatic check has run yet: no usage reported and no pre-send context request"
	}
	return checkLine(tc)
}

func orDefault(s string) string {
	if s == "" {
		return config.SourceDefault
	}
	return s
}

// writeDoctor prints the report for people.
func writeDoctor(w io.Writer, r *doctorReport) {
	fmt.Fprintln(w, "configuration (as ctxctl layers it; pass the daemon's --config files to match it):")
	fmt.Fprintln(w, "  layers, lowest first: built-in defaults")
	for _, l := range r.Config.Layers {
		state := ""
		if !l.Present {
			state = " (absent)"
		}
		fmt.Fprintf(w, "    %s: %s%s\n", l.Name, l.Path, state)
	}
	if !r.Config.Valid {
		fmt.Fprintf(w, "  INVALID: %d problem%s (on stderr); built-in defaults shown below\n", len(r.Config.Problems), plural(len(r.Config.Problems), "", "s"))
	}
	for _, wn := range r.Config.Warnings {
		fmt.Fprintf(w, "  warning: %s\n", wn)
	}
	fmt.Fprintln(w, "  tables and the layer that set each:")
	for _, t := range r.Config.Sources {
		fmt.Fprintf(w, "    %-20s %s\n", t.Table, t.Source)
	}

	fmt.Fprintln(w, "context editing:")
	modes := r.ContextEditing
	if len(modes) == 2 && modes[0].Model == "" && modes[0].Mode == modes[1].Mode && modes[0].Why == modes[1].Why {
		fmt.Fprintf(w, "  every model: %s — %s\n", modes[0].Mode, modes[0].Why)
		modes = nil
	}
	for _, m := range modes {
		who := "models without server context editing"
		if m.ServerContextEditing {
			who = "models with server context editing"
		}
		if m.Model != "" {
			who = "model " + m.Model
		}
		fmt.Fprintf(w, "  %s: %s — %s\n", who, m.Mode, m.Why)
	}

	fmt.Fprintln(w, "summarizer bindings, tried in order:")
	for i, b := range r.Bindings {
		if b.Embedded {
			fmt.Fprintf(w, "  %d. extractive (embedded default: no binding configured, no network)\n", i+1)
			continue
		}
		desc := b.Provider
		if b.Model != "" {
			desc += " " + b.Model
		}
		if b.BaseURL != "" {
			desc += " at " + b.BaseURL
		}
		key := "no key"
		if b.APIKeyEnv != "" {
			state := "NOT SET"
			if b.KeySet {
				state = "set"
			}
			key = fmt.Sprintf("key in $%s: %s in this shell (the daemon's environment may differ)", b.APIKeyEnv, state)
		}
		fmt.Fprintf(w, "  %d. %s: %s; %s\n", i+1, b.Name, desc, key)
	}
	src := ""
	if r.Timeout.AgentFile != "" {
		src = " (" + r.Timeout.AgentFile + ")"
	}
	fmt.Fprintf(w, "summarizer timeout: %s per call — %s%s\n", msDuration(r.Timeout.MS), r.Timeout.Why, src)
	writeServerShape(w, r.ServerShape)

	if r.Daemon.Reachable {
		st := r.Daemon.Status
		fmt.Fprintf(w, "daemon: ctxd %s running on %s, %s session%s, %d/%d workers busy, queue %d/%d\n",
			st.Version, r.Daemon.Socket, sessionsCount(st.Sessions), plural(st.Sessions, "", "s"), st.Workers.Busy, st.Workers.Size, st.Queue.Depth, st.Queue.Capacity)
		fmt.Fprintf(w, "  storage: %s\n", storageLine(st.Storage))
		for _, d := range st.Disk {
			fmt.Fprintf(w, "  disk %s: %s\n", d.Name, diskLine(d))
		}
		fmt.Fprintf(w, "proxy: %s\n", proxyLine(st.Proxy))
	} else {
		fmt.Fprintf(w, "daemon: unreachable: %s\n", r.Daemon.Error)
	}

	if r.Session == nil {
		return
	}
	if r.Session.Session == nil {
		fmt.Fprintf(w, "session %s: %s\n", r.Session.ID, r.Session.Error)
		return
	}
	s := r.Session.Session
	fmt.Fprintf(w, "session %s (model %s, limit %s):\n", s.ID, s.Model, windowLine(s))
	for _, d := range s.SettingsDiff {
		fmt.Fprintf(w, "  differs:         %s\n", d)
	}
	fmt.Fprintf(w, "  tokens:          %s — %s\n", tokensLine(s.Tokens, s.Threshold), sourceWhy(s.Tokens.Source))
	fmt.Fprintf(w, "  speculative:     %s\n", speculativeLine(s))
	auto := "on"
	if !s.Auto {
		auto = "off"
	}
	fmt.Fprintf(w, "  auto compaction: %s\n", auto)
	fmt.Fprintf(w, "  last check:      %s\n", r.Session.Why)
	fmt.Fprintf(w, "  circuit:         %s\n", circuitLine(s.Circuit))
	if s.LastError != "" {
		fmt.Fprintf(w, "  last failure:    %s\n", s.LastError)
	}
	if s.OpenToolCalls > 0 {
		fmt.Fprintf(w, "  open tool calls: %d (no automatic compaction while a tool round is open)\n", s.OpenToolCalls)
	}
	fmt.Fprintf(w, "  compaction:      %s\n", orDash(s.Compaction))
	if s.LastCheckpoint != nil {
		fmt.Fprintf(w, "  last checkpoint: %s\n", checkpointLine(s.LastCheckpoint))
	} else {
		fmt.Fprintln(w, "  last checkpoint: none")
	}
	if sp := r.Session.Speculative; sp != nil {
		fmt.Fprintf(w, "  speculative:     %d summaries prepared: %d used, %d extended, %d never used (%s)\n",
			sp.Made, sp.Used, sp.Extended, sp.Unused, usd(sp.UnusedCost))
	}
	for _, en := range r.Session.IdleCompactions {
		fmt.Fprintf(w, "  idle compaction: %s: %d → %d tokens before a %s cache lapsed; expected payback %d input tokens (%s)\n",
			en.Time.UTC().Format(time.RFC3339), en.TokensBefore, en.TokensAfter, time.Duration(en.CacheTTLSeconds)*time.Second, en.PaybackTokens, usd(en.Payback))
	}
	fmt.Fprintf(w, "  shape:           %s\n", shapeOf(s))
	if l := serverShapeLine(s); l != "" {
		fmt.Fprintf(w, "  shape server:    %s\n", l)
	}
}

// diskLine describes one guarded directory's free space against the
// reserve, and what a low disk stops (docs/operating.md "Disk full").
func diskLine(d api.Disk) string {
	if d.Error != "" {
		return fmt.Sprintf("%s: free space unknown: %s", d.Dir, d.Error)
	}
	head := fmt.Sprintf("%s free in %s (reserve %s, storage.min_free_bytes)", sizeOf(d.FreeBytes), d.Dir, sizeOf(d.ReserveBytes))
	if !d.Low {
		return head + ": ok"
	}
	if d.Name == "offload" {
		return head + ": LOW — oversized tool results are kept whole (offload_failed) until space is freed"
	}
	return head + ": LOW — appends, new sessions and compactions are refused (507 insufficient_storage) until space is freed; reads still work"
}

// sizeOf writes n bytes in binary units with one decimal ("12.5 MiB").
func sizeOf(n uint64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	f, units := float64(n)/1024, "KMGTP"
	i := 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %ciB", f, units[i])
}

// msDuration prints milliseconds as a Go duration ("3m0s", "45s").
func msDuration(ms int64) string {
	s := fmt.Sprintf("%dms", ms)
	if ms%1000 == 0 {
		s = fmt.Sprintf("%ds", ms/1000)
	}
	return s
}
