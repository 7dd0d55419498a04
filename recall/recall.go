// Package recall gives an agent back what a compaction replaced
// (docs/design.md §5.6 "Recall"): it renders a range of a session's
// original messages as plain, greppable text — each message opened by a
// line naming its sequence number, role and tool, then its text, its tool
// calls with their inputs and its tool results whole — writes the text a
// checkpoint replaced to a recall file, and searches and reads a session's
// stored messages, summaries and offloaded results for ctxctl mcp.
//
// It knows no storage and no HTTP: callers hand it messages and the full
// text of offloaded results.
package recall

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/ctxd/ctxd/history"
)

// FilePrefix and FileExt make the name of a recall file: recall-<first>-<last>.txt,
// first and last being the sequence numbers of the first and last message
// it holds. Every recall file of a session lies in the session's offload
// directory, so FileGlob matches them all.
const (
	FilePrefix = "recall-"
	FileExt    = ".txt"
	FileGlob   = FilePrefix + "*" + FileExt
)

// FileName is the name of the recall file of messages first to last
// (sequence numbers).
func FileName(first, last uint64) string {
	return fmt.Sprintf("%s%d-%d%s", FilePrefix, first, last, FileExt)
}

// MessagePrefix opens the header line of every message in a rendering:
// "=== seq 12 · assistant". A search for it lists the messages of a file.
const MessagePrefix = "=== seq "

// Full maps a tool result's tool_call_id to the full text of the result
// when the stored message is an offload stub (docs/design.md §6); Render
// puts that text in place of the stub. Nil means none.
type Full func(toolCallID string) (text string, ok bool)

// Render writes messages to w in the recall format: for each, a header
// line "=== seq N · role[ · NAME][ · call ID][ · error] · TIME" (role "tool
// result" for a tool message, NAME its tool), then
// its blocks — text as is, thinking after "[thinking]", each tool call as
// "[tool call NAME id=ID]" followed by its input, one "key: value" line
// per top-level field with string values verbatim (so code and commands are
// found by a plain text search, not as escaped JSON), images and other
// blocks named in one line. A tool result that is an offload stub is
// followed by the full text full gives for its call id.
func Render(w *bytes.Buffer, msgs []history.Message, full Full) {
	for _, m := range msgs {
		RenderMessage(w, m, full)
	}
}

// RenderMessage writes one message as Render does.
func RenderMessage(w *bytes.Buffer, m history.Message, full Full) {
	role := string(m.Role)
	if m.Role == history.RoleTool {
		role = "tool result"
	}
	fmt.Fprintf(w, "%s%d · %s", MessagePrefix, m.Seq, role)
	if m.Role == history.RoleTool {
		if m.ToolName != "" {
			fmt.Fprintf(w, " · %s", m.ToolName)
		}
		if m.ToolCallID != "" {
			fmt.Fprintf(w, " · call %s", m.ToolCallID)
		}
		if m.IsError {
			w.WriteString(" · error")
		}
	}
	if !m.Time.IsZero() {
		fmt.Fprintf(w, " · %s", m.Time.UTC().Format(time.RFC3339))
	}
	w.WriteByte('\n')
	for _, b := range m.Content {
		switch b.Type {
		case history.BlockText:
			line(w, b.Text)
		case history.BlockThinking:
			if b.Text != "" {
				w.WriteString("[thinking]\n")
				line(w, b.Text)
			}
		case history.BlockRedactedThinking:
			w.WriteString("[redacted thinking]\n")
		case history.BlockToolCall:
			fmt.Fprintf(w, "[tool call %s id=%s]\n", b.Name, b.ID)
			renderInput(w, b.Input)
		case history.BlockImage:
			fmt.Fprintf(w, "[image %s %s]\n", b.MediaType, b.Artifact)
		case history.BlockJSON:
			line(w, string(b.JSON))
		case history.BlockCompaction:
			w.WriteString("[provider compaction]\n")
			line(w, b.Text)
		default:
			fmt.Fprintf(w, "[%s block]\n", b.Type)
		}
	}
	if m.Role == history.RoleTool && full != nil {
		if text, ok := full(m.ToolCallID); ok {
			fmt.Fprintf(w, "[the whole offloaded result, %d bytes:]\n", len(text))
			line(w, text)
		}
	}
}

// line writes s and a newline when s does not end with one.
func line(w *bytes.Buffer, s string) {
	w.WriteString(s)
	if !strings.HasSuffix(s, "\n") {
		w.WriteByte('\n')
	}
}

// renderInput writes a tool call's input: one "key: value" line per
// top-level field of an object, sorted by key, strings verbatim and other
// values as compact JSON; anything else as its JSON.
func renderInput(w *bytes.Buffer, input json.RawMessage) {
	if len(input) == 0 {
		return
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(input, &obj) != nil {
		line(w, string(input))
		return
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := obj[k]
		var s string
		if json.Unmarshal(v, &s) == nil {
			line(w, k+": "+s)
			continue
		}
		var c bytes.Buffer
		if json.Compact(&c, v) == nil {
			v = c.Bytes()
		}
		line(w, k+": "+string(v))
	}
}

// Header is the first lines of a recall file: what it holds and how to
// search it.
func Header(session string, first, last uint64, written time.Time) string {
	return fmt.Sprintf("ctxd recall file: session %s, messages %d to %d as they were sent, replaced by the summary of a compaction at %s.\n"+
		"Each message starts with a line %q; tool results offloaded to a file are given whole after their stub.\n\n",
		session, first, last, written.UTC().Format(time.RFC3339), MessagePrefix+"N · role")
}

// Footer is the paragraph a summary ends with when its recall file was
// written (docs/design.md §5.3): where the full text of what it replaced
// is, where earlier compactions' files are, and how to search them.
func Footer(path, dir string, first, last uint64) string {
	return fmt.Sprintf("\n\n## Full history\nThe messages this summary replaced (seq %d–%d) are in %s word for word, earlier compactions' beside it. "+
		"For a detail missing here (an exact error, a value, a command, what the user said), search them — grep -n -i 'word' %s — rather than guess or re-run a tool.",
		first, last, path, dir+"/"+FileGlob)
}

// Unavailable is the paragraph a summary ends with when its recall file
// could not be written: nothing else about the checkpoint changes.
const Unavailable = "\n\n## Full history\nThe full text of the messages this summary replaced is not available as a file (ctxd could not write it)."
