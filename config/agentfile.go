package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"
)

// Summarizer timeouts of docs/design.md §5.4.
const (
	// DefaultSummarizerTimeout applies to each summarizer call when no
	// compaction.md agent file is configured.
	DefaultSummarizerTimeout = 180 * time.Second
	// AgentFileDefaultTimeout applies when an agent file sets
	// limits.timeout_ms = 0 or omits it.
	AgentFileDefaultTimeout = 30 * time.Second
	// MaxAgentTimeoutMS bounds limits.timeout_ms (24 h, in milliseconds), so
	// the value fits a time.Duration and a typo cannot hang a compaction
	// for months.
	MaxAgentTimeoutMS = 24 * 60 * 60 * 1000
)

// AgentFile is an authored compaction.md (docs/design.md §5.4): TOML front
// matter between "+++" lines, then the compaction prompt.
//
//	+++
//	[limits]
//	timeout_ms = 60000
//	+++
//	Summarize the session so far ...
type AgentFile struct {
	// Path is the file as given to LoadAgentFile.
	Path string `toml:"-" json:"path"`
	// Limits is the [limits] table of the front matter.
	Limits AgentLimits `toml:"limits" json:"limits"`
	// Prompt is the body after the front matter, with surrounding blank
	// lines removed: the trailing user message of the summarizer request.
	Prompt string `toml:"-" json:"-"`
}

// AgentLimits is the [limits] table of an agent file's front matter.
type AgentLimits struct {
	// TimeoutMS is each summarizer call's timeout in milliseconds, honored
	// exactly; 0 or omitted means 30 s. At most MaxAgentTimeoutMS.
	TimeoutMS uint64 `toml:"timeout_ms" json:"timeout_ms"`
}

// SummarizerTimeout returns the timeout of each summarizer call (docs/design.md
// §5.4): 180 s without an agent file (a nil a), limits.timeout_ms when it is
// > 0, else 30 s. It never depends on the history's size.
func SummarizerTimeout(a *AgentFile) time.Duration {
	switch {
	case a == nil:
		return DefaultSummarizerTimeout
	case a.Limits.TimeoutMS > 0:
		return time.Duration(a.Limits.TimeoutMS) * time.Millisecond
	default:
		return AgentFileDefaultTimeout
	}
}

// LoadAgentFile reads and validates the compaction.md at path (docs/design.md
// §5.4). The front matter, when the file starts with a "+++" line, is
// decoded strictly like the configuration: an unknown key fails with its
// position. A file without front matter is all prompt. On failure it
// returns an *Error listing every problem (unreadable file, unclosed front
// matter, unknown keys, wrong types, timeout out of range, empty prompt).
func LoadAgentFile(path string) (AgentFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		msg := "cannot read: " + err.Error()
		var pe *fs.PathError
		if errors.As(err, &pe) {
			msg = "cannot read: " + pe.Err.Error()
		}
		return AgentFile{}, &Error{Problems: []Problem{{File: path, Message: msg}}}
	}
	return parseAgentFile(path, data)
}

// parseAgentFile is LoadAgentFile on bytes already read.
func parseAgentFile(path string, data []byte) (AgentFile, error) {
	a := AgentFile{Path: path}
	var problems []Problem
	front, body, bodyLine, ok := splitFrontMatter(data)
	if !ok {
		return AgentFile{}, &Error{Problems: []Problem{{File: path, Line: 1, Col: 1,
			Message: "front matter opened with +++ is never closed: end it with a line holding only +++"}}}
	}
	if front != nil {
		d := newDoc(path, front, reflect.TypeFor[AgentFile](), false)
		d.decode(&a)
		problems = append(problems, d.problems...)
		if d.reliable("limits") && a.Limits.TimeoutMS > MaxAgentTimeoutMS {
			p := d.pos["limits.timeout_ms"]
			problems = append(problems, Problem{File: path, Line: p.line, Col: p.col, Key: "limits.timeout_ms",
				Message: fmt.Sprintf("must be at most %d (24 h, in milliseconds); 0 means 30 s", MaxAgentTimeoutMS)})
		}
	}
	switch {
	case !utf8.Valid(body):
		problems = append(problems, Problem{File: path, Line: bodyLine, Col: 1, Message: "prompt is not valid UTF-8"})
	case len(bytes.TrimSpace(body)) == 0:
		problems = append(problems, Problem{File: path, Line: bodyLine, Col: 1,
			Message: "prompt is empty: write the compaction prompt after the front matter"})
	}
	if len(problems) > 0 {
		sortProblems(problems, []string{path})
		return AgentFile{}, &Error{Problems: problems}
	}
	a.Path = path
	a.Prompt = strings.TrimSpace(string(body))
	return a, nil
}

// splitFrontMatter splits an agent file into its TOML front matter and its
// body. front keeps the file's line numbers: the opening +++ line is
// blanked, so positions reported in it are positions in the file. front is
// nil when the file has no front matter; ok is false when it is not closed.
// bodyLine is the 1-based line the body starts on.
func splitFrontMatter(data []byte) (front, body []byte, bodyLine int, ok bool) {
	first, rest, found := bytes.Cut(data, []byte("\n"))
	if string(bytes.TrimRight(first, "\r")) != "+++" {
		return nil, data, 1, true
	}
	if !found {
		return nil, nil, 0, false
	}
	off := len(first) + 1
	line := 2
	for len(rest) > 0 {
		l, next, _ := bytes.Cut(rest, []byte("\n"))
		if string(bytes.TrimRight(l, "\r")) == "+++" {
			front = make([]byte, off)
			copy(front, data[:off])
			for i := 0; i < len(first); i++ {
				front[i] = ' '
			}
			return front, next, line + 1, true
		}
		off += len(l) + 1
		rest = next
		line++
	}
	return nil, nil, 0, false
}
