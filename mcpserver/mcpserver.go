// Package mcpserver is `ctxctl mcp` (docs/design.md §5.6 "Recall"): an MCP
// server, on the official Go SDK, whose tools give an agent back what its
// compactions replaced — `search` over a session's original messages,
// summaries and offloaded results, and `read` of a range of messages or of
// an artifact, in pages. It reaches the daemon through api.Client only.
//
// Which session: the one Options.Session names, else the most recently
// updated session whose agent stated Options.WorkingDir as its working
// directory, looked up at each call (an agent starts its MCP servers
// before its first request makes the session).
package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ctxd/ctxd/api"
)

// Name is the server's name in the MCP handshake; tools appear to an agent
// as mcp__ctxd__search and mcp__ctxd__read (Claude Code) when it is added
// under this name.
const Name = "ctxd"

// Limits of the tools.
const (
	// DefaultReadChars and MaxReadChars bound one page of read.
	DefaultReadChars = 20000
	MaxReadChars     = 200000
	// maxCandidates is how many of the most recently updated sessions the
	// working-directory lookup examines.
	maxCandidates = 50
)

// Options configure a server.
type Options struct {
	// Client reaches the daemon. Required.
	Client *api.Client
	// Session is the session the tools read; "" looks it up by WorkingDir.
	Session string
	// WorkingDir is the agent's working directory (the process's when ""
	// is given to New by the command).
	WorkingDir string
	// Version is the server's version in the handshake.
	Version string
}

// New returns the MCP server with the tools search and read. Errors: a
// missing client.
func New(opts Options) (*mcp.Server, error) {
	if opts.Client == nil {
		return nil, errors.New("mcpserver: no api client")
	}
	t := NewRecall(opts)
	s := mcp.NewServer(&mcp.Implementation{Name: Name, Title: "ctxd session history", Version: opts.Version}, &mcp.ServerOptions{
		Instructions: "ctxd keeps every original message of this session, also after a compaction replaced them by a summary. " +
			"When the summary lacks a detail (an exact error, a value, a command, a file's earlier content, what the user asked), " +
			"use search to find it and read to see it whole, instead of guessing or re-running tools.",
	})
	mcp.AddTool(s, &mcp.Tool{
		Name: "search",
		Description: "Search this session's full history — every original message (also those a compaction summarized away), " +
			"every summary and the whole text of every offloaded tool result — for lines holding the query (case-insensitive; " +
			"a line holding every word of the query matches too). Returns matching lines with the message's seq, role, tool " +
			"and, for an offloaded result, its artifact URI; pass offset to page.",
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in SearchInput) (*mcp.CallToolResult, any, error) {
		return result(t.Search(ctx, in))
	})
	mcp.AddTool(s, &mcp.Tool{
		Name: "read",
		Description: "Read this session's original messages from seq `from` to seq `to` (as text, each message opened by " +
			"'=== seq N · role'), or the whole text of an offloaded result by its `artifact` URI; at most max_chars " +
			"characters from character `offset` (the previous page's next).",
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in ReadInput) (*mcp.CallToolResult, any, error) {
		return result(t.Read(ctx, in))
	})
	return s, nil
}

// SearchInput is the search tool's input.
type SearchInput struct {
	Query  string `json:"query" jsonschema:"the text to look for"`
	Limit  int    `json:"limit,omitempty" jsonschema:"the most matching lines to return, 1 to 100 (default 20)"`
	Offset int    `json:"offset,omitempty" jsonschema:"matching lines to skip: the previous page's next offset"`
}

// ReadInput is the read tool's input.
type ReadInput struct {
	From     uint64 `json:"from,omitempty" jsonschema:"the first message seq (default 1)"`
	To       uint64 `json:"to,omitempty" jsonschema:"the last message seq (default: the newest)"`
	Artifact string `json:"artifact,omitempty" jsonschema:"an artifact URI (artifact://…) to read instead of messages"`
	Offset   int    `json:"offset,omitempty" jsonschema:"characters to skip: the previous page's next offset"`
	MaxChars int    `json:"max_chars,omitempty" jsonschema:"the most characters to return, 1 to 200000 (default 20000)"`
}

// Recall answers the tools' calls: the text an agent sees. ctxctl's
// `session search` and `session read` print the same text.
type Recall struct{ opts Options }

// NewRecall returns the Recall of opts (see Options).
func NewRecall(opts Options) *Recall {
	if opts.WorkingDir != "" {
		opts.WorkingDir = filepath.Clean(opts.WorkingDir)
	}
	return &Recall{opts: opts}
}

// result wraps a Recall answer as a tool result: a failure is a result the
// model reads (IsError), not a protocol error.
func result(text string, err error) (*mcp.CallToolResult, any, error) {
	if err != nil {
		return errResult("%s", err.Error()), nil, nil
	}
	return textResult(text), nil, nil
}

// errResult is a tool result that reports a failure to the model.
func errResult(format string, args ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

func textResult(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// session returns the session the tools read (see the package doc).
func (t *Recall) session(ctx context.Context) (string, error) {
	if t.opts.Session != "" {
		return t.opts.Session, nil
	}
	if t.opts.WorkingDir == "" {
		return "", errors.New("no session given (ctxctl mcp --session, or CTXD_SESSION) and no working directory to look one up by")
	}
	return FindSession(ctx, t.opts.Client, t.opts.WorkingDir)
}

// FindSession returns the most recently updated session (of the
// maxCandidates most recent) whose agent stated dir as its working
// directory. Errors: the client's; none found.
func FindSession(ctx context.Context, c *api.Client, dir string) (string, error) {
	dir = filepath.Clean(dir)
	all, err := c.ListSessions(ctx)
	if err != nil {
		return "", err
	}
	sort.SliceStable(all, func(i, j int) bool { return updated(all[i]).After(updated(all[j])) })
	for i, s := range all {
		if i == maxCandidates {
			break
		}
		p, err := c.ReadMessages(ctx, s.ID, api.ReadMessagesRequest{From: 1, To: 1, MaxChars: 1})
		if err != nil {
			if api.ErrorCode(err) == api.NotFound {
				continue // deleted meanwhile
			}
			return "", err
		}
		if p.WorkingDir != "" && filepath.Clean(p.WorkingDir) == dir {
			return s.ID, nil
		}
	}
	return "", fmt.Errorf("no ctxd session of the %d most recent states the working directory %s: start the agent through ctxd's proxy first, or pass --session (CTXD_SESSION)", min(len(all), maxCandidates), dir)
}

// updated is when s last changed (its creation when it never did).
func updated(s api.Session) time.Time {
	if s.Updated.IsZero() {
		return s.Created
	}
	return s.Updated
}

// Search is the search tool: the matching lines of the session as text.
// Errors: no session; the daemon's (a bad query names its field).
func (t *Recall) Search(ctx context.Context, in SearchInput) (string, error) {
	id, err := t.session(ctx)
	if err != nil {
		return "", err
	}
	r, err := t.opts.Client.Search(ctx, id, in.Query, in.Limit, in.Offset)
	if err != nil {
		return "", fmt.Errorf("search: %s", describe(err))
	}
	var b strings.Builder
	if r.Total == 0 {
		fmt.Fprintf(&b, "No line of session %s holds %q.", id, in.Query)
		return b.String(), nil
	}
	fmt.Fprintf(&b, "Session %s: lines %d to %d of %d holding %q.\n", id, in.Offset+1, in.Offset+len(r.Hits), r.Total, in.Query)
	for _, h := range r.Hits {
		fmt.Fprintf(&b, "seq %d · %s", h.Seq, hitWhat(h))
		fmt.Fprintf(&b, " · line %d: %s\n", h.Line, h.Text)
	}
	if r.Next > 0 {
		fmt.Fprintf(&b, "More: search with offset %d.\n", r.Next)
	}
	b.WriteString("Read a message whole with read {\"from\": SEQ, \"to\": SEQ}; an offloaded result with read {\"artifact\": URI}.")
	return b.String(), nil
}

// hitWhat names where a hit is.
func hitWhat(h api.SearchHit) string {
	switch h.Source {
	case api.SearchSummary:
		return "summary of a compaction"
	case api.SearchOffloaded:
		return fmt.Sprintf("offloaded result of %s (%s)", orTool(h.Tool), h.Artifact)
	}
	s := h.Role
	if h.Tool != "" {
		s += " · " + h.Tool
	}
	return s
}

func orTool(s string) string {
	if s == "" {
		return "a tool"
	}
	return s
}

// Read is the read tool: a page of a range of messages, or of an
// artifact, as text. Errors: bad bounds; no session; the daemon's.
func (t *Recall) Read(ctx context.Context, in ReadInput) (string, error) {
	if in.MaxChars == 0 {
		in.MaxChars = DefaultReadChars
	}
	if in.MaxChars < 1 || in.MaxChars > MaxReadChars || in.Offset < 0 {
		return "", fmt.Errorf("read: max_chars must be 1 to %d and offset at least 0", MaxReadChars)
	}
	if in.Artifact != "" {
		b, err := t.opts.Client.Artifact(ctx, in.Artifact)
		if err != nil {
			return "", fmt.Errorf("read %s: %s", in.Artifact, describe(err))
		}
		text := string(b)
		if !utf8.ValidString(text) {
			return "", fmt.Errorf("read %s: %d bytes that are not text", in.Artifact, len(b))
		}
		total := utf8.RuneCountInString(text)
		start := runeOffset(text, in.Offset)
		end := start + runeOffset(text[start:], in.MaxChars)
		page := text[start:end]
		var s strings.Builder
		shown := utf8.RuneCountInString(page)
		fmt.Fprintf(&s, "%s: characters %d to %d of %d.\n", in.Artifact, min(in.Offset, total), min(in.Offset, total)+shown, total)
		s.WriteString(page)
		if end < len(text) {
			fmt.Fprintf(&s, "\n[More: read with offset %d.]", in.Offset+shown)
		}
		return s.String(), nil
	}
	id, err := t.session(ctx)
	if err != nil {
		return "", err
	}
	p, err := t.opts.Client.ReadMessages(ctx, id, api.ReadMessagesRequest{From: in.From, To: in.To, Offset: in.Offset, MaxChars: in.MaxChars})
	if err != nil {
		return "", fmt.Errorf("read: %s", describe(err))
	}
	var s strings.Builder
	if p.Text == "" {
		fmt.Fprintf(&s, "Session %s has no message from seq %d to %d.", id, p.From, p.To)
		return s.String(), nil
	}
	s.WriteString(p.Text)
	if p.Next > 0 {
		fmt.Fprintf(&s, "\n[More: read with from %d, to %d, offset %d.]", p.From, p.To, p.Next)
	}
	return s.String(), nil
}

// describe is an error's message with the field at fault.
func describe(err error) string {
	if e, ok := errors.AsType[*api.Error](err); ok && e.Field != "" {
		return fmt.Sprintf("%v (field %s)", err, e.Field)
	}
	return err.Error()
}

// runeOffset is the byte offset of the n-th character of s (len(s) when
// s has fewer).
func runeOffset(s string, n int) int {
	i := 0
	for off := range s {
		if i == n {
			return off
		}
		i++
	}
	return len(s)
}
