// Command ctxbench is ctxd's load generator (docs/decisions.md "Load
// generator"): simulated agents replay recorded or generated transcripts
// against a real ctxd over its socket, through package api only, and report
// throughput, latency, compactions, queue depth, the daemon's memory, and any
// acknowledged message the daemon lost or reordered (which must be none).
//
//	ctxbench [--ctxd PATH | --socket PATH] [--agents N] [--transcript FILE]...
//	         [--generated] [--rate R] [--arrivals fixed|poisson]
//	         [--context-limit N] [--duration D]
//	         [--max-requests N] [--summarizer-latency D]
//	         [--context-length-rate F] [--overloaded-rate F] [--prepare-percent N]
//	         [--workers N] [--queue N] [--json]
//	ctxbench --idle-sessions N [--idle-wait D] ...
//	ctxbench --queue-full N --workers 1 --queue 1 --summarizer-latency 2s ...
//
// Unless --socket names a running daemon, ctxbench starts ctxd itself (the
// binary next to ctxbench, else on PATH, else --ctxd) on a socket and data
// directory in a new temporary directory, with a configuration whose only
// summarizer binding is ctxbench's own fake Anthropic provider on
// 127.0.0.1; it stops ctxd and removes the directory at the end. Every loop
// is bounded (--duration, --max-requests, or one pass of the transcript).
//
// Exit status: 0 when the run passed, 1 when a message was lost, duplicated
// or reordered, a request failed, or (--queue-full) a compaction request
// hung; 2 on a usage error.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
