package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/ctxd/ctxd/api"
)

// dashboardCommand is `ctxctl dashboard [--json]`: a one-time link to the
// dashboard on the daemon's TCP listener (api.RouteDashboardLink), else
// the proxy listener's address of it.
func dashboardCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:    "dashboard",
		Aliases: []string{"ui"},
		Usage:   "print a one-time link that opens the dashboard in a browser",
		UsageText: "ctxctl dashboard [--json]\n\n" +
			"On the daemon's TCP listener (daemon.listen) the dashboard needs the daemon's token:\n" +
			"the link's code, good once for " + api.DashboardLinkTTL.String() + ", sets a browser cookie in its place.\n" +
			"Without a TCP listener, the proxy's listener serves it to loopback without a token.",
		Flags: []cli.Flag{jsonFlag()},
		Action: func(c *cli.Context) error {
			if _, err := exactArgs(c); err != nil {
				return err
			}
			cl := e.client(c)
			link, err := cl.DashboardLink(c.Context)
			if err != nil {
				return err
			}
			if link.URL == "" {
				st, err := cl.Status(c.Context)
				if err != nil {
					return err
				}
				if st.Proxy != nil && st.Proxy.Enabled && st.Proxy.Listen == "" {
					return fmt.Errorf("no listener serves the dashboard to a browser: the proxy is enabled but not listening (%s); free its address or set daemon.listen (with daemon.auth_token_env)", st.Proxy.Error)
				}
				if st.Proxy == nil || st.Proxy.Listen == "" {
					return fmt.Errorf("no listener serves the dashboard to a browser: set daemon.listen (with daemon.auth_token_env) or enable the proxy ([proxy] enabled = true)")
				}
				link.URL, link.Path = "http://"+st.Proxy.Listen+"/ui/", "/ui/"
				if c.Bool("json") {
					return writeJSON(e.stdout, map[string]string{"url": link.URL})
				}
				fmt.Fprintf(e.stdout, "%s\n(the proxy's listener: loopback, no token; the daemon has no TCP listener)\n", link.URL)
				return nil
			}
			if c.Bool("json") {
				return writeJSON(e.stdout, link)
			}
			fmt.Fprintf(e.stdout, "%s\n(good once, until %s; it sets a cookie for this browser)\n", link.URL, stamp(link.Expires))
			return nil
		},
	}
}
