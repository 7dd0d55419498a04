package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/mcpserver"
)

// sessionCommand is `ctxctl session list|show|context|events|search|read|delete`.
func sessionCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "session",
		Usage:     "list, inspect and delete sessions",
		UsageText: "ctxctl session COMMAND [command flags] [arguments]",
		Subcommands: []*cli.Command{
			{
				Name:      "list",
				Usage:     "list every session",
				UsageText: "ctxctl session list [--json]",
				Flags:     []cli.Flag{jsonFlag()},
				Action:    func(c *cli.Context) error { return sessionList(c, e) },
			},
			{
				Name:      "show",
				Usage:     "describe a session: tokens vs threshold, circuit, last checkpoint, last trigger check",
				UsageText: "ctxctl session show [--json] ID",
				Flags:     []cli.Flag{jsonFlag()},
				Action:    func(c *cli.Context) error { return sessionShow(c, e) },
			},
			{
				Name:  "context",
				Usage: "print the assembled context as JSON, ready to send",
				UsageText: "ctxctl session context [--format canonical|anthropic|openai] [--no-presend] ID\n\n" +
					"The bytes printed are exactly the daemon's. Without --no-presend the\n" +
					"request is the agent's pre-send check: it may wait for a compaction.",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "format", Value: api.FormatCanonical, Usage: "`FORMAT`: canonical, anthropic or openai"},
					&cli.BoolFlag{Name: "no-presend", Usage: "read the context as it stands: start and wait for no compaction"},
					&cli.BoolFlag{Name: "json", Usage: "accepted for uniformity: the output is always JSON"},
				},
				Action: func(c *cli.Context) error { return sessionContext(c, e) },
			},
			{
				Name:  "events",
				Usage: "print a session's event log, one line per event",
				UsageText: "ctxctl session events [--from N] [--follow] [--json] ID\n\n" +
					"With --json, one api.Event JSON object per line.",
				Flags: []cli.Flag{
					&cli.Uint64Flag{Name: "from", Usage: "start at event seq `N` (inclusive)"},
					&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep printing new events until interrupted"},
					jsonFlag(),
				},
				Action: func(c *cli.Context) error { return sessionEvents(c, e) },
			},
			{
				Name:      "search",
				Usage:     "search a session's full history (compacted messages, summaries, offloaded results) for lines holding QUERY",
				UsageText: "ctxctl session search [--session ID | --cwd DIR] [--limit N] [--offset K] QUERY",
				Flags:     recallFlags(&cli.IntFlag{Name: "limit", Usage: "at most `N` lines (1 to 100, default 20)"}),
				Action: func(c *cli.Context) error {
					args, err := exactArgs(c, "QUERY")
					if err != nil {
						return err
					}
					return recallRun(c, e, func(r *mcpserver.Recall) (string, error) {
						return r.Search(c.Context, mcpserver.SearchInput{Query: args[0], Limit: c.Int("limit"), Offset: c.Int("offset")})
					})
				},
			},
			{
				Name:      "read",
				Usage:     "print a session's messages FROM..TO (compacted or not), or an artifact, a page at a time",
				UsageText: "ctxctl session read [--session ID | --cwd DIR] [--from N] [--to N] [--artifact URI] [--offset K] [--max-chars N]",
				Flags: recallFlags(&cli.Uint64Flag{Name: "from", Usage: "first message seq `N`"},
					&cli.Uint64Flag{Name: "to", Usage: "last message seq `N` (default: the newest)"},
					&cli.StringFlag{Name: "artifact", Usage: "read the artifact `URI` instead"},
					&cli.IntFlag{Name: "max-chars", Usage: "at most `N` characters (default 20000)"}),
				Action: func(c *cli.Context) error {
					if _, err := exactArgs(c); err != nil {
						return err
					}
					return recallRun(c, e, func(r *mcpserver.Recall) (string, error) {
						return r.Read(c.Context, mcpserver.ReadInput{From: c.Uint64("from"), To: c.Uint64("to"), Artifact: c.String("artifact"),
							Offset: c.Int("offset"), MaxChars: c.Int("max-chars")})
					})
				},
			},
			{
				Name:  "ledger",
				Usage: "print a session's savings ledger: each request's tokens, usage and cost with and without ctxd, cache writes by cause, summarizer calls, net savings",
				UsageText: "ctxctl session ledger [--json] ID\n\n" +
					"Costs are US dollars at the price table ([models.\"<id>\".price], else the\n" +
					"built-in prices). docs/cli.md says what every column means.",
				Flags:  []cli.Flag{jsonFlag()},
				Action: func(c *cli.Context) error { return sessionLedger(c, e) },
			},
			{
				Name:  "mode",
				Usage: "set a proxied session's mode: enforce (ctxd's context goes upstream) or observe (the client's bytes go upstream, savings are projected)",
				UsageText: "ctxctl session mode ID enforce|observe|default\n\n" +
					"default follows the daemon's [proxy] mode again.",
				Action: func(c *cli.Context) error { return sessionMode(c, e) },
			},
			{
				Name:      "delete",
				Usage:     "delete a session with its events and checkpoints (artifacts stay)",
				UsageText: "ctxctl session delete ID",
				Action:    func(c *cli.Context) error { return sessionDelete(c, e) },
			},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("unknown session command %q (list, show, context, events, search, read, ledger, mode, delete)", c.Args().First())
			}
			return usagef("session: missing command (list, show, context, events, search, read, ledger, mode, delete)")
		},
	}
}

func sessionList(c *cli.Context, e *env) error {
	if _, err := exactArgs(c); err != nil {
		return err
	}
	// Page through the listing (api.MaxListLimit a request): text rows are
	// printed page by page, the JSON object once at the end.
	client := e.client(c)
	if c.Bool("json") {
		ss, err := client.ListSessions(c.Context)
		if err != nil {
			return err
		}
		if ss == nil {
			ss = []api.Session{}
		}
		return writeJSON(e.stdout, api.ListSessionsResponse{Sessions: ss})
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	n := 0
	for s, err := range client.Sessions(c.Context, api.MaxListLimit) {
		if err != nil {
			_ = tw.Flush()
			return err
		}
		if n == 0 {
			fmt.Fprintln(tw, "ID\tMODEL\tWINDOW\tMESSAGES\tTOKENS\tTHRESHOLD\tSOURCE\tCHECKPOINTS\tCOMPACTION\tCIRCUIT")
		}
		n++
		circuit := "closed"
		if s.Circuit.Open {
			circuit = "open"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%d\t%s\t%s\n", s.ID, s.Model, windowCell(&s), s.Messages, s.Tokens.Value, s.Threshold, orDash(s.Tokens.Source), s.Checkpoints, orDash(s.Compaction), circuit)
		if n%api.MaxListLimit == 0 {
			if err := tw.Flush(); err != nil {
				return err
			}
		}
	}
	if n == 0 {
		fmt.Fprintln(e.stderr, "no sessions")
		return nil
	}
	return tw.Flush()
}

func sessionShow(c *cli.Context, e *env) error {
	args, err := exactArgs(c, "ID")
	if err != nil {
		return err
	}
	s, err := e.client(c).GetSession(c.Context, args[0])
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return writeJSON(e.stdout, s)
	}
	writeSession(e.stdout, s)
	return nil
}

// writeSession prints a session for people, one "label: value" per line.
func writeSession(w io.Writer, s *api.Session) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	line := func(label, format string, args ...any) {
		fmt.Fprintf(tw, "%s:\t%s\n", label, fmt.Sprintf(format, args...))
	}
	line("session", "%s", s.ID)
	line("model", "%s", s.Model)
	line("context limit", "%s", windowLine(s))
	for _, d := range s.SettingsDiff {
		line("differs", "%s", d)
	}
	auto := "automatic compaction on"
	if !s.Auto {
		auto = "automatic compaction off: manual and overflow only"
	}
	if s.Threshold == 0 {
		line("threshold", "none while the window is unknown; %s", auto)
	} else {
		line("threshold", "%d tokens; %s", s.Threshold, auto)
	}
	line("tokens", "%s", tokensLine(s.Tokens, s.Threshold))
	line("speculative", "%s", speculativeLine(s))
	line("figure from", "%s", sourceWhy(s.Tokens.Source))
	line("messages", "%d (last seq %d)", s.Messages, s.LastSeq)
	line("open tool calls", "%d", s.OpenToolCalls)
	line("compaction", "%s", orDash(s.Compaction))
	line("circuit", "%s", circuitLine(s.Circuit))
	if s.LastError != "" {
		line("last failure", "%s", s.LastError)
	}
	line("checkpoints", "%d", s.Checkpoints)
	if s.LastCheckpoint != nil {
		line("last checkpoint", "%s", checkpointLine(s.LastCheckpoint))
	} else {
		line("last checkpoint", "none")
	}
	line("shape", "%s", shapeOf(s))
	if l := serverShapeLine(s); l != "" {
		line("shape server", "%s", l)
	}
	line("context editing", "%s", contextEditingOf(s))
	if s.LastCheck != nil {
		line("last check", "%s", checkLine(s.LastCheck))
	} else {
		line("last check", "none yet (no usage reported and no pre-send check)")
	}
	line("created", "%s", stamp(s.Created))
	if !s.Updated.IsZero() {
		line("updated", "%s", stamp(s.Updated))
	}
	if len(s.Labels) > 0 {
		var kv []string
		for k, v := range s.Labels {
			kv = append(kv, k+"="+v)
		}
		slices.Sort(kv)
		line("labels", "%s", strings.Join(kv, ", "))
	}
	_ = tw.Flush()
}

// shapeOf is the compaction shape of a session: the daemon's figure when it
// sends one, else the last checkpoint's.
func shapeOf(s *api.Session) string {
	if s.Shape != "" {
		return s.Shape
	}
	if s.LastCheckpoint != nil && s.LastCheckpoint.Shape != "" {
		return s.LastCheckpoint.Shape + " (of the last checkpoint)"
	}
	return "- (not reported by this daemon; see ctxctl doctor)"
}

// contextEditingOf is the context-editing mode in effect for a session, as
// the daemon reports it.
func contextEditingOf(s *api.Session) string {
	if s.ContextEditing == "" {
		return "- (not reported by this daemon; see ctxctl doctor)"
	}
	if s.ContextEditingWhy != "" {
		return s.ContextEditing + ": " + s.ContextEditingWhy
	}
	return s.ContextEditing
}

// checkLine says why compaction did or did not fire at a trigger check.
func checkLine(tc *api.TriggerCheck) string {
	var b strings.Builder
	if tc.Signal != "" {
		b.WriteString(tc.Signal)
	} else {
		b.WriteString("check")
	}
	if !tc.Time.IsZero() {
		fmt.Fprintf(&b, " at %s", stamp(tc.Time))
	}
	if tc.Tokens.Source != "" || tc.Tokens.Value > 0 {
		if tc.Threshold == 0 {
			fmt.Fprintf(&b, ", %d tokens (%s), no threshold", tc.Tokens.Value, orDash(tc.Tokens.Source))
		} else {
			fmt.Fprintf(&b, ", %d tokens (%s) vs threshold %d", tc.Tokens.Value, orDash(tc.Tokens.Source), tc.Threshold)
		}
	}
	if tc.Fired {
		b.WriteString(": fired")
	} else {
		b.WriteString(": did not fire")
	}
	if r := strings.TrimPrefix(tc.Reason, tc.Signal+": "); r != "" {
		b.WriteString(" — " + r) // the signal is named already
	}
	return b.String()
}

func sessionContext(c *cli.Context, e *env) error {
	args, err := exactArgs(c, "ID")
	if err != nil {
		return err
	}
	format := c.String("format")
	switch format {
	case api.FormatCanonical, api.FormatAnthropic, api.FormatOpenAI:
	default:
		return usagef("--format %q: want canonical, anthropic or openai", format)
	}
	b, err := e.client(c).ContextWith(c.Context, args[0], api.ContextOptions{Format: format, NoPreSend: c.Bool("no-presend")})
	if err != nil {
		return err
	}
	if _, err := e.stdout.Write(b); err != nil {
		return err
	}
	if len(b) == 0 || b[len(b)-1] != '\n' {
		_, err = e.stdout.Write([]byte("\n"))
	}
	return err
}

func sessionEvents(c *cli.Context, e *env) error {
	args, err := exactArgs(c, "ID")
	if err != nil {
		return err
	}
	asJSON := c.Bool("json")
	follow := c.Bool("follow")
	enc := json.NewEncoder(e.stdout)
	err = e.client(c).StreamEvents(c.Context, args[0], api.EventsOptions{From: c.Uint64("from"), Follow: follow}, func(ev api.Event) error {
		if asJSON {
			return enc.Encode(ev)
		}
		_, err := fmt.Fprintf(e.stdout, "%d\t%s\t%s\t%s\n", ev.Seq, stamp(ev.Time), ev.Kind, eventSummary(ev))
		return err
	})
	if follow && errors.Is(err, context.Canceled) {
		return nil // interrupted: the normal end of --follow
	}
	return err
}

// eventSummary is an event's data in one short line.
func eventSummary(ev api.Event) string {
	if ev.Message != nil {
		return messageSummary(ev.Message)
	}
	if len(ev.Data) == 0 {
		return ""
	}
	return truncate(string(ev.Data), 120)
}

// messageSummary is a message in one short line: role, tool calls or the
// tool answered, the first text.
func messageSummary(m *api.Message) string {
	var parts []string
	switch {
	case m.Role == api.RoleTool:
		s := "tool " + orDash(m.ToolName) + " " + m.ToolCallID
		if m.IsError {
			s += " error"
		}
		parts = append(parts, s)
	default:
		parts = append(parts, string(m.Role))
	}
	var text string
	var calls []string
	for _, b := range m.Content {
		switch b.Type {
		case api.BlockToolCall:
			calls = append(calls, b.Name)
		case api.BlockText:
			if text == "" {
				text = b.Text
			}
		}
	}
	if len(calls) > 0 {
		parts = append(parts, "calls "+strings.Join(calls, ","))
	}
	if m.Usage != nil {
		u := m.Usage
		parts = append(parts, fmt.Sprintf("usage %d", u.InputTokens+u.CacheCreationInputTokens+u.CacheReadInputTokens+u.OutputTokens))
	}
	if text != "" {
		parts = append(parts, fmt.Sprintf("%q", truncate(text, 60)))
	}
	return strings.Join(parts, " ")
}

func sessionDelete(c *cli.Context, e *env) error {
	args, err := exactArgs(c, "ID")
	if err != nil {
		return err
	}
	if err := e.client(c).DeleteSession(c.Context, args[0]); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "deleted session %s\n", args[0])
	return nil
}

// windowLine is a session's context window and where it came from, for
// session show and doctor: "200000 tokens (catalog)".
func windowLine(s *api.Session) string {
	switch {
	case s.WindowSource == "unknown":
		return "unknown — the model is in no catalog or configuration: managed, automatic compaction waits until the provider's first overflow names the window"
	case s.WindowSource == "":
		return fmt.Sprintf("%d tokens", s.ContextLimit)
	}
	return fmt.Sprintf("%d tokens (%s)", s.ContextLimit, s.WindowSource)
}

// windowCell is the WINDOW column of session list: "200000/catalog".
func windowCell(s *api.Session) string {
	switch s.WindowSource {
	case "unknown":
		return "unknown"
	case "":
		return fmt.Sprint(s.ContextLimit)
	}
	return fmt.Sprintf("%d/%s", s.ContextLimit, s.WindowSource)
}

// speculativeLine says when the session prepares a summary in the
// background and whether it is compacted before an idle prompt cache
// lapses.
func speculativeLine(s *api.Session) string {
	prep := "summaries not prepared in advance"
	if s.PrepareMark > 0 {
		prep = fmt.Sprintf("summary prepared from %d tokens", s.PrepareMark)
	}
	idle := "idle compaction off"
	if s.IdleCompaction {
		idle = "idle compaction on"
	}
	return prep + "; " + idle
}
