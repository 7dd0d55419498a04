package config

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
)

// Problem is one thing wrong with a configuration source, located as
// precisely as the source allows.
type Problem struct {
	// File is the path of the file as given to Load, an overlay name, or
	// "default".
	File string `json:"file"`
	// Line and Col are 1-based; 0 means the problem has no position (a
	// missing required key, an unreadable file).
	Line int `json:"line,omitempty"`
	Col  int `json:"col,omitempty"`
	// Key is the TOML key path, e.g. `models."gpt-4.1".context_limit` or
	// `summarizer.bindings[0].provider` (array index 0-based); "" when the
	// problem is about the whole file.
	Key string `json:"key,omitempty"`
	// Message says what is wrong and how to fix it.
	Message string `json:"message"`
}

// String formats p as `FILE:LINE:COL: KEY: message`, leaving out LINE:COL
// when p has no position and KEY when it has no key.
func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(p.Line))
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(p.Col))
	}
	b.WriteString(": ")
	if p.Key != "" {
		b.WriteString(p.Key)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

// Warning is a problem that does not stop ctxd: a deprecated alias, a key
// that has no effect. It prints like a Problem.
type Warning = Problem

// Error is returned by Load, ApplyOverlay and LoadAgentFile when a source is
// invalid. It carries every problem found, in source order.
type Error struct {
	Problems []Problem
	// AgentFile is compaction.agent_file as the layers set it (resolved),
	// when Load failed for other reasons: `ctxctl check` reads it all the
	// same, to report its problems together with these.
	AgentFile string
}

// Error joins the problems one per line.
func (e *Error) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// sortProblems orders problems by source (in the order given), then line,
// then column; problems without a position come last within their source.
func sortProblems(ps []Problem, order []string) {
	rank := func(f string) int {
		if i := slices.Index(order, f); i >= 0 {
			return i
		}
		return len(order)
	}
	line := func(l int) int {
		if l == 0 {
			return int(^uint(0) >> 1)
		}
		return l
	}
	slices.SortStableFunc(ps, func(a, b Problem) int {
		return cmp.Or(
			cmp.Compare(rank(a.File), rank(b.File)),
			cmp.Compare(line(a.Line), line(b.Line)),
			cmp.Compare(a.Col, b.Col),
		)
	})
}

// keyPath renders key segments as a TOML dotted key, quoting segments that
// are not bare keys.
func keyPath(segs ...string) string {
	p := ""
	for _, s := range segs {
		p = childPath(p, s)
	}
	return p
}

// childPath appends key segment seg to path.
func childPath(path, seg string) string {
	if path == "" {
		return quoteKey(seg)
	}
	return path + "." + quoteKey(seg)
}

// indexPath appends an array index to path: "summarizer.bindings[0]".
func indexPath(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

// quoteKey quotes s unless it is a bare TOML key.
func quoteKey(s string) string {
	if s == "" {
		return `""`
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return strconv.Quote(s)
		}
	}
	return s
}

// modelSourceKey is the Sources key of model entry id.
func modelSourceKey(id string) string {
	return keyPath("models", id)
}
