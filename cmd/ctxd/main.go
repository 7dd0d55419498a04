// Command ctxd is the context-management daemon (docs/design.md §1, §7): it
// serves the local HTTP API on a unix socket (and optionally loopback TCP),
// keeps sessions in badger under its data directory, and compacts them in a
// bounded worker pool.
//
//	ctxd [--config FILE]... [--socket PATH] [--data-dir DIR] [--listen ADDR]
//	     [--log-format text|json] [--log-level debug|info|warn|error]
//	ctxd replay [--config FILE]... [--context-limit N] [--data-dir DIR] [--json] FILE
//	ctxd compact-transcript [--config FILE]... [--context-limit N] [--data-dir DIR] [--json] FILE
//
// The last two run the engine on a transcript in this process, with no
// socket; `ctxctl replay` and `ctxctl compact --transcript` exec
// them.
//
// SIGINT and SIGTERM stop it gracefully (exit 0); SIGHUP reloads the
// configuration, keeping the old one when the new one is invalid. Exit
// codes: 0 clean shutdown, 1 failure, 2 usage error. See docs/operating.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && (os.Args[1] == cmdReplay || os.Args[1] == cmdCompactTranscript) {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := runOffline(ctx, os.Args[1], os.Args[2:], os.Stdout, os.Stderr, os.Getenv)
		stop()
		os.Exit(code)
	}
	m := NewMain()
	if err := m.ParseFlags(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "ctxd: %v\nRun 'ctxd --help' for usage.\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code := 0
	if err := m.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "ctxd:", err)
		code = 1
	}
	if err := m.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "ctxd: close:", err)
		code = 1
	}
	stop()
	os.Exit(code)
}
