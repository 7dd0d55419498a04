// Command ctxctl is ctxd's command line (DESIGN.md §1): `ctxctl check`
// validates configuration; later commands compact sessions and inspect
// sessions, checkpoints, artifacts and events.
//
// Flag order matters (urfave/cli/v2): global flags go before the command,
// and a command's flags before its arguments:
//
//	ctxctl [global flags] COMMAND [command flags] [arguments]
//
// Exit codes: 0 success, 1 failure (e.g. an invalid configuration), 2 usage
// error. Data goes to stdout, everything else to stderr.
package main

import "os"

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr, os.Getenv))
}
