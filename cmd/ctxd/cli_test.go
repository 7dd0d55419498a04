package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestParseFlagsSpellings: every flag reads in urfave/cli's --flag form and
// in the flag package's single-dash forms that ctxd's earlier command line
// documented, with = or a separate value; --config repeats in order.
func TestParseFlagsSpellings(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"double dash", []string{"--config", "a.toml", "--config", "b,c.toml", "--socket", "/s", "--data-dir", "/d", "--listen", "127.0.0.1:1", "--log-format", "json", "--log-level", "debug"}},
		{"single dash", []string{"-config", "a.toml", "-config", "b,c.toml", "-socket", "/s", "-data-dir", "/d", "-listen", "127.0.0.1:1", "-log-format", "json", "-log-level", "debug"}},
		{"equals", []string{"--config=a.toml", "-config=b,c.toml", "--socket=/s", "-data-dir=/d", "--listen=127.0.0.1:1", "-log-format=json", "--log-level=debug"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMain()
			if err := m.ParseFlags(tc.args); err != nil {
				t.Fatal(err)
			}
			if want := []string{"a.toml", "b,c.toml"}; !slices.Equal(m.ConfigFiles, want) {
				t.Errorf("ConfigFiles = %q, want %q", m.ConfigFiles, want)
			}
			if m.Socket != "/s" || m.DataDir != "/d" || m.Listen != "127.0.0.1:1" || m.LogFormat != "json" || m.LogLevel != "debug" {
				t.Errorf("socket %q, data dir %q, listen %q, log %q/%q", m.Socket, m.DataDir, m.Listen, m.LogFormat, m.LogLevel)
			}
		})
	}
}

// TestParseFlagsDefaults: no flag leaves every override empty and the log
// settings at their defaults; an empty --data-dir is no override.
func TestParseFlagsDefaults(t *testing.T) {
	m := NewMain()
	if err := m.ParseFlags([]string{"--data-dir", ""}); err != nil {
		t.Fatal(err)
	}
	if len(m.ConfigFiles) != 0 || m.Socket != "" || m.DataDir != "" || m.Listen != "" || m.LogFormat != "text" || m.LogLevel != "info" {
		t.Errorf("got %+v", m)
	}
}

// TestParseFlagsUsageErrors: what cannot be run is a usage error (exit 2)
// naming the problem, and prints nothing itself (main prints the one line).
func TestParseFlagsUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"--bogus"}, "flag provided but not defined: -bogus"},
		{"argument", []string{"serve"}, `unexpected argument "serve"`},
		{"missing value", []string{"--socket"}, "flag needs an argument: -socket"},
		{"log level", []string{"--log-level", "loud"}, `"loud" is not debug, info, warn or error`},
		{"log format", []string{"--log-format", "xml"}, `--log-format: "xml" is not text or json`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			m := NewMain()
			m.Stdout, m.Stderr = &out, &out
			err := m.ParseFlags(tc.args)
			if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want a usage error containing %q", err, tc.want)
			}
			if out.Len() != 0 {
				t.Errorf("printed %q", out.String())
			}
		})
	}
}

// TestHelpSpeaksCtxctlsDialect: --help and -h print urfave/cli's help on
// stdout, as ctxctl's, with every flag in its --flag form, and return
// flag.ErrHelp (exit 0); the Go flag package's "Usage of ctxd:" and
// single-dash listing are gone.
func TestHelpSpeaksCtxctlsDialect(t *testing.T) {
	for _, arg := range []string{"--help", "-h"} {
		var stdout, stderr bytes.Buffer
		m := NewMain()
		m.Stdout, m.Stderr = &stdout, &stderr
		if err := m.ParseFlags([]string{arg}); !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("%s: err = %v, want flag.ErrHelp", arg, err)
		}
		help := stdout.String()
		for _, want := range []string{"NAME:\n   ctxd - ", "USAGE:\n", "OPTIONS:\n", "--config FILE", "--socket PATH", "--data-dir DIR", "--listen ADDR", "--log-format FORMAT", "--log-level LEVEL", "ctxd replay ", "ctxd compact-transcript "} {
			if !strings.Contains(help, want) {
				t.Errorf("%s: the help lacks %q:\n%s", arg, want, help)
			}
		}
		if strings.Contains(help, "Usage of") || strings.Contains(help, "\n  -config") {
			t.Errorf("%s: the help is the flag package's:\n%s", arg, help)
		}
		if stderr.Len() != 0 {
			t.Errorf("%s: stderr %q", arg, stderr.String())
		}
	}
}

// TestOperatingDocListsEveryFlag: docs/operating.md's table of flags
// names every flag of the daemon, in the --flag form.
func TestOperatingDocListsEveryFlag(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operating.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range NewMain().daemonFlags() {
		if name := "`--" + f.Names()[0]; !bytes.Contains(doc, []byte(name)) {
			t.Errorf("docs/operating.md does not document %s`", name)
		}
	}
}

// TestOfflineFlagsAfterTheFile: the offline commands take their flags
// before or after the file (ctxctl passes the file first), in both
// spellings; "--" ends the flags.
func TestOfflineFlagsAfterTheFile(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		file string
	}{
		{"flags first", []string{"--config", "a.toml", "--json", "--context-limit", "9000", "--data-dir", "/d", "t.jsonl"}, "t.jsonl"},
		{"file first", []string{"t.jsonl", "--config", "a.toml", "--json", "--context-limit", "9000", "--data-dir", "/d"}, "t.jsonl"},
		{"mixed", []string{"-config=a.toml", "t.jsonl", "-json", "-context-limit", "9000", "--data-dir=/d"}, "t.jsonl"},
		{"dash file", []string{"--config", "a.toml", "--json", "--context-limit=9000", "--data-dir", "/d", "--", "-t.jsonl"}, "-t.jsonl"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			a, err := parseOffline(cmdReplay, tc.args, &out, &out)
			if err != nil {
				t.Fatal(err)
			}
			if a.file != tc.file || !slices.Equal(a.configs, []string{"a.toml"}) || !a.json || a.contextLimit != 9000 || a.dataDir != "/d" {
				t.Errorf("got %+v", a)
			}
		})
	}
	var out bytes.Buffer
	if _, err := parseOffline(cmdReplay, []string{"a.jsonl", "b.jsonl"}, &out, &out); !errors.Is(err, errUsage) {
		t.Errorf("two files: err = %v, want a usage error", err)
	}
	if _, err := parseOffline(cmdCompactTranscript, []string{"--help"}, &out, &out); !errors.Is(err, flag.ErrHelp) || !strings.Contains(out.String(), "ctxd compact-transcript [--config FILE]") {
		t.Errorf("--help: err = %v, output %q", err, out.String())
	}
}

// TestCompactTranscriptSaysWhereItsFilesWent: a summary of compact-transcript
// names recall files under its data directory; without --data-dir that
// directory is temporary, removed on exit, and a note on stderr says so;
// with --data-dir the files the summary names are there and no note is
// printed.
func TestCompactTranscriptSaysWhereItsFilesWent(t *testing.T) {
	file := filepath.Join("..", "..", "testdata", "corpus", "claude-code", "autocompact-150tools.compaction-call.jsonl")
	getenv := func(k string) string {
		if k == "HOME" || k == "XDG_CONFIG_HOME" {
			return t.TempDir()
		}
		return ""
	}
	var stdout, stderr bytes.Buffer
	if code := runOffline(t.Context(), cmdCompactTranscript, []string{file}, &stdout, &stderr, getenv); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "were removed with that temporary directory; --data-dir DIR keeps them") {
		t.Errorf("no note of the removed files on stderr: %q", stderr.String())
	}
	dir := filepath.Join(t.TempDir(), "kept") // made 0700, as the data directory must be
	stdout.Reset()
	stderr.Reset()
	if code := runOffline(t.Context(), cmdCompactTranscript, []string{"--data-dir", dir, file}, &stdout, &stderr, getenv); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if strings.Contains(stderr.String(), "note: the files the summary names") {
		t.Errorf("a note with --data-dir: %q", stderr.String())
	}
	named := regexp.MustCompile(regexp.QuoteMeta(dir) + `\S*recall-\d+-\d+\.txt`).FindString(stdout.String())
	if named == "" {
		t.Fatalf("the summary names no recall file under %s:\n%.2000s", dir, stdout.String())
	}
	if _, err := os.Stat(named); err != nil {
		t.Errorf("the recall file the summary names: %v", err)
	}
}

// TestOfflineDataDirIsPrivate: --data-dir of replay and compact-transcript
// follows the daemon's rule for its data directory: one open to other
// users is refused with the command that fixes it, and nothing is written
// into it.
func TestOfflineDataDirIsPrivate(t *testing.T) {
	file := filepath.Join("..", "..", "testdata", "demo", "claude-code-session.jsonl")
	getenv := func(k string) string {
		if k == "HOME" || k == "XDG_CONFIG_HOME" {
			return t.TempDir()
		}
		return ""
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{cmdReplay, cmdCompactTranscript} {
		var stdout, stderr bytes.Buffer
		code := runOffline(t.Context(), name, []string{"--data-dir", dir, file}, &stdout, &stderr, getenv)
		if code == 0 || !strings.Contains(stderr.String(), "--data-dir") || !strings.Contains(stderr.String(), "chmod 700") {
			t.Errorf("%s on a 0777 --data-dir: exit %d, stderr %q", name, code, stderr.String())
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("the refused directory holds %d entries", len(entries))
	}
}
