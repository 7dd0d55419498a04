package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/mcpserver"
)

// mcpCommand is `ctxctl mcp [--session ID] [--cwd DIR]`: an MCP server on
// stdin/stdout whose tools search and read the stored history of a session
// (package mcpserver, docs/cli.md).
func mcpCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "mcp",
		Usage:     "serve MCP tools (search, read) over a session's full history on stdin/stdout, for an agent",
		UsageText: "ctxctl mcp [--session ID] [--cwd DIR]",
		Description: "Add it to an agent as a stdio MCP server (claude mcp add ctxd -- ctxctl mcp). Without --session\n" +
			"($CTXD_SESSION) the tools read the most recently updated session whose agent stated the\n" +
			"working directory --cwd (default: the directory ctxctl mcp runs in, which the agent sets).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "session", Usage: "the session `ID` to read (default: $CTXD_SESSION, else looked up by working directory)"},
			&cli.StringFlag{Name: "cwd", Usage: "the working `DIR` to look the session up by (default: the current directory)"},
		},
		Action: func(c *cli.Context) error {
			if _, err := exactArgs(c); err != nil {
				return err
			}
			opts, err := recallOptions(c, e)
			if err != nil {
				return err
			}
			srv, err := mcpserver.New(opts)
			if err != nil {
				return err
			}
			err = mcpserver.Serve(c.Context, srv, e.stdin, e.stdout)
			if c.Context.Err() != nil {
				return nil // a signal
			}
			return err
		},
	}
}

// recallFlags are the flags of session search and read: which session, the
// offset, and extra.
func recallFlags(extra ...cli.Flag) []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "session", Usage: "the session `ID` (default: $CTXD_SESSION, else looked up by --cwd)"},
		&cli.StringFlag{Name: "cwd", Usage: "look the session up by the working `DIR` its agent stated (default: the current directory)"},
		&cli.IntFlag{Name: "offset", Usage: "skip `K` lines (search) or characters (read): the previous page's next"},
	}, extra...)
}

// recallOptions are the mcpserver.Options of the flags --session and --cwd.
func recallOptions(c *cli.Context, e *env) (mcpserver.Options, error) {
	session := c.String("session")
	if session == "" {
		session = e.getenv("CTXD_SESSION")
	}
	dir := c.String("cwd")
	if dir == "" && session == "" {
		wd, err := os.Getwd()
		if err != nil {
			return mcpserver.Options{}, err
		}
		dir = wd
	}
	return mcpserver.Options{Client: e.client(c), Session: session, WorkingDir: dir, Version: api.Version}, nil
}

// recallRun prints what fn answers with the Recall of the flags.
func recallRun(c *cli.Context, e *env, fn func(*mcpserver.Recall) (string, error)) error {
	opts, err := recallOptions(c, e)
	if err != nil {
		return err
	}
	out, err := fn(mcpserver.NewRecall(opts))
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(e.stdout, out)
	return err
}
