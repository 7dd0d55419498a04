package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/ctxd/ctxd/api"

	"github.com/urfave/cli/v2"
)

// statusCommand is `ctxctl status [--json]`: the daemon's version, uptime,
// sessions, storage backend, workers and queue (api.Status).
func statusCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "status",
		Usage:     "show whether ctxd is running, its version, sessions, storage, workers and queue",
		UsageText: "ctxctl status [--json]",
		Flags:     []cli.Flag{jsonFlag()},
		Action: func(c *cli.Context) error {
			if _, err := exactArgs(c); err != nil {
				return err
			}
			cl := e.client(c)
			st, err := cl.Status(c.Context)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return writeJSON(e.stdout, st)
			}
			up := time.Duration(st.UptimeSeconds * float64(time.Second)).Truncate(time.Second)
			w := e.stdout
			fmt.Fprintf(w, "ctxd %s running on %s\n", st.Version, cl.SocketPath())
			fmt.Fprintf(w, "started:   %s (up %s)\n", stamp(st.Started), up)
			fmt.Fprintf(w, "sessions:  %s\n", sessionsCount(st.Sessions))
			if l := windowsLine(st.Windows); l != "" {
				fmt.Fprintf(w, "windows:   %s\n", l)
			}
			fmt.Fprintf(w, "storage:   %s\n", storageLine(st.Storage))
			fmt.Fprintf(w, "workers:   %d busy of %d\n", st.Workers.Busy, st.Workers.Size)
			fmt.Fprintf(w, "queue:     %s\n", queueLine(*st))
			fmt.Fprintf(w, "proxy:     %s\n", proxyLine(st.Proxy))
			return nil
		},
	}
}

// queueLine describes the compaction queue: the local pool's depth and
// bound, or a fleet's shared queue (the same on every node).
func queueLine(st api.Status) string {
	s := st.Storage
	if s == nil || s.Backend != api.StorageNATS || s.NATS == nil {
		return fmt.Sprintf("%d waiting of %d", st.Queue.Depth, st.Queue.Capacity)
	}
	j := s.NATS.Jobs
	if j == nil {
		return fmt.Sprintf("fleet queue unknown (the cluster did not answer); %d waited on by this node", st.Queue.Depth)
	}
	line := fmt.Sprintf("fleet: %d waiting, %d held by nodes, %d workers free", j.Queued, j.Held, j.FreeWorkers)
	if j.Redelivered > 0 {
		line += fmt.Sprintf(", %d redelivered after a node stopped", j.Redelivered)
	}
	return line + fmt.Sprintf("; a dead node's job moves after %s without its progress signal", time.Duration(j.AckWaitMS)*time.Millisecond)
}

// proxyLine describes the provider proxy in one line.
func proxyLine(p *api.ProxyStatus) string {
	switch {
	case p == nil:
		return "not reported by this daemon"
	case !p.Enabled:
		return "off (proxy.enabled = false)"
	case p.Listen == "":
		return "NOT LISTENING: " + p.Error
	}
	ups := p.Upstream
	if len(p.Upstreams) > 0 {
		var parts []string
		for _, u := range p.Upstreams {
			parts = append(parts, fmt.Sprintf("%s %s (%s)", u.Name, u.BaseURL, strings.Join(u.Endpoints, ", ")))
		}
		ups = strings.Join(parts, "; ")
	}
	mode := ""
	switch p.Mode {
	case "":
	case "observe":
		mode = ", mode observe (every request forwarded as the client sent it; the ledger projects the savings)"
	default:
		mode = ", mode " + p.Mode
	}
	line := fmt.Sprintf("http://%s%s → %s (%s, %s managed, %s passed through, %s recovered, %s, %s, at most %s in one conversation)",
		p.Listen, mode, ups, count(p.Requests, "request", "requests"), count(p.Managed, "", ""), count(p.PassedThrough, "", ""),
		count(p.Overflows, "overflow", "overflows"), count(p.Conversations, "conversation started", "conversations started"),
		count(p.Branches, "branch", "branches"), count(p.MaxBranches, "session", "sessions"))
	if p.ClientRuleBreaks > 0 {
		line += fmt.Sprintf("; %s broke docs/design.md §4a themselves (sent as ctxd's context and their new messages as written; those not recorded)", count(p.ClientRuleBreaks, "client request", "client requests"))
	}
	if p.DeclinedUpgrades > 0 {
		line += fmt.Sprintf("; %s declined (426: the client fell back to HTTP)", count(p.DeclinedUpgrades, "WebSocket upgrade", "WebSocket upgrades"))
	}
	if p.Violations > 0 {
		line += fmt.Sprintf("; %s broke docs/design.md §4a and %s not sent (a bug: see the log)", count(p.Violations, "assembled context", "assembled contexts"), plural(int(min(p.Violations, 2)), "was", "were"))
	}
	for _, c := range p.Credentials {
		line += fmt.Sprintf("\n           credential %s: %s, %s", c.Credential, count(c.Sessions, "session", "sessions"), count(c.Bytes, "byte", "bytes"))
	}
	return line
}

// count is "1 session", "2 sessions": n with the noun of its number; with
// no nouns, n alone.
func count[N int | int64 | uint64](n N, one, many string) string {
	if one == "" {
		return fmt.Sprint(n)
	}
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprint(n) + " " + many
}

// sessionsCount is Status.Sessions for people: -1 means the storage could
// not be reached.
func sessionsCount(n int) string {
	if n < 0 {
		return "unknown (the storage is unreachable)"
	}
	return fmt.Sprint(n)
}

// storageLine describes the storage backend in one line: badger's
// directory, or a fleet node's NATS connection (state, servers without
// credentials, streams and buckets).
func storageLine(s *api.StorageStatus) string {
	switch {
	case s == nil:
		return "not reported by this daemon"
	case s.Backend == api.StorageNATS && s.NATS != nil:
		n := s.NATS
		var state string
		if n.State == "connected" {
			state = "connected to " + n.ConnectedServer
		} else {
			state = strings.ToUpper(n.State)
			if !n.DownSince.IsZero() {
				state += " since " + stamp(n.DownSince)
			}
			state += ": no servers available, requests are refused (503 unavailable)"
			if n.LastError != "" {
				state += " (" + n.LastError + ")"
			}
		}
		return fmt.Sprintf("nats, %s; servers %s; streams %s, %s; buckets %s (key-value), %s (objects); R%d",
			state, strings.Join(n.Servers, ", "), n.EventsStream, n.JobsStream, n.MetaBucket, n.ArtifactsBucket, n.Replicas)
	case s.Dir != "":
		return s.Backend + " in " + s.Dir
	}
	return s.Backend
}

// windowsLine says where the windows of the sessions in memory came from:
// "2 wire, 1 learned (sessions in memory)"; "" when none is loaded.
func windowsLine(w map[string]int) string {
	var parts []string
	for _, src := range []string{"session", "config", "wire", "catalog", "learned", "unknown"} {
		if n := w[src]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, src))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return strings.Join(parts, ", ") + " (sessions in memory, by where their context window came from)"
}
