package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/transcript"
)

// Import batching: each append request stays under the daemon's body limit
// with room for the envelope, and holds at most importBatchMessages
// messages so that progress moves and no one request holds the session
// long.
const (
	importBatchBytes    = api.MaxRequestBytes - 64<<10
	importBatchMessages = 200
)

// importCommand is `ctxctl import [--session ID] [--context-limit N]
// [--model M] FILE`: a transcript loaded into the running daemon as a
// session, served like a live one.
func importCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "import",
		Usage: "load a transcript file into the running ctxd as a session",
		UsageText: "ctxctl import [--session ID] [--context-limit N] [--model M] FILE\n\n" +
			"FILE is any format ctxctl replay reads. The session gets the transcript's\n" +
			"model and system prompt; open tool calls are closed as abandoned; recorded\n" +
			"usage drives post-check compactions as it would live. The session id is\n" +
			"printed on stdout.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "session", Usage: "the new session's `ID` (default: the daemon picks one)"},
			&cli.Uint64Flag{Name: "context-limit", Usage: "the context window in `TOKENS` (default: the transcript's, else the daemon's model catalog)"},
			&cli.StringFlag{Name: "model", Usage: "the session's `MODEL` (default: the transcript's)"},
		},
		Action: func(c *cli.Context) error { return runImport(c, e) },
	}
}

func runImport(c *cli.Context, e *env) error {
	args, err := exactArgs(c, "FILE")
	if err != nil {
		return err
	}
	file := args[0]
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	tr, err := transcript.Import(f, transcript.Options{})
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	for _, n := range tr.Notes() {
		fmt.Fprintf(e.stderr, "ctxctl import: %s: note: %s\n", file, n)
	}
	abandoned := tr.CloseAbandoned()

	model := tr.Model
	if c.IsSet("model") {
		model = c.String("model")
	}
	limit := tr.ContextLimit
	if c.IsSet("context-limit") {
		limit = c.Uint64("context-limit")
	}
	if model == "" && limit == 0 {
		return fmt.Errorf("%s: the transcript names no model and no context window: give --model or --context-limit", file)
	}
	msgs, sizes, dropped, err := toAPIMessages(tr)
	if err != nil {
		return err
	}

	cl := e.client(c)
	s, err := cl.CreateSession(c.Context, api.CreateSessionRequest{
		ID:           c.String("session"),
		Model:        model,
		ContextLimit: limit,
		System:       tr.System,
	})
	if err != nil {
		return fmt.Errorf("create session: %w", err)
	}

	bar := newProgress(e.stderr, "import")
	done := 0
	for start := 0; start < len(msgs); {
		end, bytes := start, 0
		for end < len(msgs) && end-start < importBatchMessages && (end == start || bytes+sizes[end]+1 <= importBatchBytes) {
			bytes += sizes[end] + 1
			end++
		}
		if _, err := cl.AppendMessages(c.Context, s.ID, api.AppendMessagesRequest{Messages: msgs[start:end]}); err != nil {
			bar.clear()
			return fmt.Errorf("append messages %d..%d of %d to session %s (the first %d are stored; ctxctl session delete %s to start over): %w",
				start+1, end, len(msgs), s.ID, done, s.ID, err)
		}
		done, start = end, end
		bar.set(done, len(msgs))
	}
	bar.clear()

	fmt.Fprintln(e.stdout, s.ID)
	info := fmt.Sprintf("imported %d messages (%s, %d responses, %d tool calls", len(msgs), tr.Format, tr.Responses, tr.ToolCalls)
	if abandoned > 0 {
		info += fmt.Sprintf(", %d abandoned calls closed", abandoned)
	}
	if dropped > 0 {
		info += fmt.Sprintf(", %d empty assistant messages (aborted responses) left out", dropped)
	}
	info += ") into session " + s.ID
	if fin, err := cl.GetSession(c.Context, s.ID); err == nil {
		info += fmt.Sprintf(": %s, %d checkpoint%s, compaction %s", tokensLine(fin.Tokens, fin.Threshold), fin.Checkpoints, plural(int(fin.Checkpoints), "", "s"), orDash(fin.Compaction))
	}
	fmt.Fprintln(e.stderr, info)
	return nil
}

// toAPIMessages converts the transcript's messages to wire messages (their
// JSON is the same, api's parity test keeps it so) and returns each one's
// encoded size. Seq and Tokens are the daemon's to set.
func toAPIMessages(tr *transcript.Transcript) ([]api.Message, []int, int, error) {
	msgs := make([]api.Message, 0, len(tr.Messages))
	sizes := make([]int, 0, len(tr.Messages))
	dropped := 0
	for i := range tr.Messages {
		m := &tr.Messages[i]
		if m.Role == history.RoleAssistant && len(m.Content) == 0 {
			// An aborted or failed response (pi records them with no
			// content): the daemon refuses an empty assistant message
			// (docs/api.md), and the agent never sent it to its provider.
			dropped++
			continue
		}
		b, err := json.Marshal(m)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("encode message %d: %w", i, err)
		}
		var am api.Message
		if err := json.Unmarshal(b, &am); err != nil {
			return nil, nil, 0, fmt.Errorf("convert message %d: %w", i, err)
		}
		am.Seq, am.Tokens = 0, 0
		msgs = append(msgs, am)
		sizes = append(sizes, len(b))
	}
	return msgs, sizes, dropped, nil
}

// progress draws a bar on a terminal, redrawn in place; on anything else
// it draws nothing.
type progress struct {
	w     io.Writer
	label string
	last  int
}

// newProgress returns a bar on w when w is a terminal (a character
// device), else one that prints nothing.
func newProgress(w io.Writer, label string) *progress {
	f, ok := w.(*os.File)
	if !ok {
		return &progress{}
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return &progress{}
	}
	return &progress{w: w, label: label, last: -1}
}

func (p *progress) set(done, total int) {
	if p.w == nil || total == 0 {
		return
	}
	pct := done * 100 / total
	if pct == p.last {
		return
	}
	p.last = pct
	n := pct * 30 / 100
	fmt.Fprintf(p.w, "\r%s [%s%s] %3d%% (%d/%d)", p.label, strings.Repeat("=", n), strings.Repeat(" ", 30-n), pct, done, total)
}

func (p *progress) clear() {
	if p.w == nil || p.last < 0 {
		return
	}
	fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", len(p.label)+50))
	p.last = -1
}
