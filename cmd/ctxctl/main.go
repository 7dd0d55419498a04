// Command ctxctl is ctxd's command line (docs/design.md §1): `ctxctl check`
// validates configuration; status, session, compact, checkpoint, artifact,
// doctor and import talk to the running daemon through api.Client only;
// replay and compact --transcript run the engine in the ctxd binary (found
// next to ctxctl, else on PATH). docs/cli.md documents every command.
//
// Flag order matters (urfave/cli/v2): global flags go before the command,
// and a command's flags before its arguments:
//
//	ctxctl [global flags] COMMAND [command flags] [arguments]
//
// Exit codes: 0 success, 1 failure (e.g. an invalid configuration, an
// unreachable daemon), 2 usage error; replay and compact --transcript exit
// with ctxd's status. Data goes to stdout, everything else to stderr.
package main

import "os"

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr, os.Getenv))
}
