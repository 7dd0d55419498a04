package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"
)

// statusCommand is `ctxctl status [--json]`: the daemon's version, uptime,
// sessions, workers and queue (api.Status).
func statusCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "status",
		Usage:     "show whether ctxd is running, its version, sessions, workers and queue",
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
			fmt.Fprintf(w, "sessions:  %d\n", st.Sessions)
			fmt.Fprintf(w, "workers:   %d busy of %d\n", st.Workers.Busy, st.Workers.Size)
			fmt.Fprintf(w, "queue:     %d waiting of %d\n", st.Queue.Depth, st.Queue.Capacity)
			return nil
		},
	}
}
