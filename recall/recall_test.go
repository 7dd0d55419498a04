package recall

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// Each agent's way of stating its working directory, as the recorded
// agents send it (docs/testing.md): Claude Code's and pi's system prompts,
// Codex's environment item.
func TestWorkingDir(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"<env>\nWorking directory: /home/dev/proj\nIs directory a git repo: Yes\n</env>", "/home/dev/proj"},
		{" - Primary working directory: /srv/app  \n", "/srv/app"},
		{"Current date: 2026-01-01\nCurrent working directory: /tmp/x y\n", "/tmp/x y"},
		{"<environment_context>\n  <cwd>/home/dev/work</cwd>\n  <shell>bash</shell>\n</environment_context>", "/home/dev/work"},
		{"The tool's working directory: defaults to the turn cwd.", ""},
		{"no directory here", ""},
	} {
		if got := WorkingDir(tc.text); got != tc.want {
			t.Errorf("WorkingDir(%.40q) = %q, want %q", tc.text, got, tc.want)
		}
	}
}

// A hit's excerpt is at most MaxLineChars characters, valid UTF-8, and
// holds the match.
func TestExcerptHoldsTheMatch(t *testing.T) {
	line := strings.Repeat("é", 1000) + "NEEDLE" + strings.Repeat("ü", 1000)
	at := strings.Index(line, "NEEDLE")
	ex := excerpt(line, at, MaxLineChars)
	if !utf8.ValidString(ex) || !strings.Contains(ex, "NEEDLE") || utf8.RuneCountInString(ex) > MaxLineChars+2 {
		t.Fatalf("excerpt %d chars, valid %v: %.60q", utf8.RuneCountInString(ex), utf8.ValidString(ex), ex)
	}
}

func TestMatcherWords(t *testing.T) {
	m, err := newMatcher("  Widget   PANIC ")
	if err != nil {
		t.Fatal(err)
	}
	for line, want := range map[string]bool{
		"widget panic here":          true,
		"PANIC in the Widget loader": true,
		"widget only":                false,
		"":                           false,
	} {
		if got := m.match(line) >= 0; got != want {
			t.Errorf("match(%q) = %v", line, got)
		}
	}
	if _, err := newMatcher(" "); err == nil {
		t.Error("an empty query matched")
	}
}
