package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeTemp writes src to a file named name in a fresh temporary directory.
func writeTemp(t *testing.T, name, src string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// loadSrc loads defaults plus one --config file holding src.
func loadSrc(t *testing.T, src string) (Config, []Warning, []Problem) {
	t.Helper()
	p := writeTemp(t, "c.toml", src)
	cfg, warnings, err := Load(Options{Files: []string{p}})
	return cfg, warnings, problemsOf(t, err)
}

func problemsOf(t *testing.T, err error) []Problem {
	t.Helper()
	if err == nil {
		return nil
	}
	var cerr *Error
	if !errors.As(err, &cerr) {
		t.Fatalf("error is %T, want *config.Error: %v", err, err)
	}
	return cerr.Problems
}

// ruleCase is one case of a rule's table test: src is a whole file; an
// empty key and msg mean src must be valid; pos is "LINE:COL" or "" for a problem
// without a position; only: the problem at key must be the file's sole
// problem.
type ruleCase struct {
	name string
	src  string
	key  string
	pos  string
	msg  string
	only bool
}

func runRuleCases(t *testing.T, cases []ruleCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, problems := loadSrc(t, tc.src)
			if tc.key == "" && tc.msg == "" {
				if len(problems) > 0 {
					t.Fatalf("want valid, got problems:\n%s", dump(problems))
				}
				return
			}
			if tc.only && len(problems) != 1 {
				t.Errorf("want only the problem at %s, got:\n%s", tc.key, dump(problems))
			}
			for _, p := range problems {
				if p.Key != tc.key {
					continue
				}
				got := ""
				if p.Line > 0 {
					got = fmt.Sprintf("%d:%d", p.Line, p.Col)
				}
				if got != tc.pos {
					t.Errorf("problem %q at %q, want at %q", p, got, tc.pos)
				}
				if !strings.Contains(p.Message, tc.msg) {
					t.Errorf("problem message %q does not contain %q", p.Message, tc.msg)
				}
				return
			}
			t.Fatalf("no problem for key %s; got:\n%s", tc.key, dump(problems))
		})
	}
}

// wantProblems fails t for each of wants (a problem's text, as
// Problem.String gives it, or part of one) that no problem contains.
func wantProblems(t *testing.T, problems []Problem, wants ...string) {
	t.Helper()
	all := dump(problems)
	for _, w := range wants {
		if !strings.Contains(all, w) {
			t.Errorf("missing problem %q in:\n%s", w, all)
		}
	}
}

func dump(ps []Problem) string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString(p.String())
		b.WriteByte('\n')
	}
	return b.String()
}
