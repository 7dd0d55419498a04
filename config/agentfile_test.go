package config

import (
	"strings"
	"testing"
	"time"
)

func TestSummarizerTimeout(t *testing.T) {
	tests := []struct {
		name  string
		agent *AgentFile
		want  time.Duration
	}{
		{"no agent file: 180 s flat", nil, 180 * time.Second},
		{"timeout_ms omitted or 0: 30 s", &AgentFile{}, 30 * time.Second},
		{"timeout_ms honored exactly", &AgentFile{Limits: AgentLimits{TimeoutMS: 45123}}, 45123 * time.Millisecond},
		{"1 ms", &AgentFile{Limits: AgentLimits{TimeoutMS: 1}}, time.Millisecond},
		{"24 h", &AgentFile{Limits: AgentLimits{TimeoutMS: MaxAgentTimeoutMS}}, 24 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := SummarizerTimeout(tt.agent); got != tt.want {
				t.Errorf("SummarizerTimeout = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRuleAgentFileFrontMatter(t *testing.T) {
	tests := []struct {
		name    string
		src     string
		timeout uint64
		prompt  string
		problem string // "" = valid; else the expected problem, file name elided
	}{
		{name: "timeout and prompt", src: "+++\n[limits]\ntimeout_ms = 60000\n+++\nSummarize.\n", timeout: 60000, prompt: "Summarize."},
		{name: "empty front matter", src: "+++\n+++\n\nSummarize.\n\n", prompt: "Summarize."},
		{name: "zero timeout", src: "+++\nlimits.timeout_ms = 0\n+++\nS\n", prompt: "S"},
		{name: "crlf", src: "+++\r\n[limits]\r\ntimeout_ms = 5\r\n+++\r\nS\r\n", timeout: 5, prompt: "S"},
		{name: "no front matter", src: "Just a prompt.\n", prompt: "Just a prompt."},
		{name: "unknown key", src: "+++\n[limits]\ntimeout = 60000\n+++\nS\n",
			problem: ":3:1: limits.timeout: unknown key (did you mean timeout_ms?)"},
		{name: "unknown table", src: "+++\nmodel = \"x\"\n+++\nS\n",
			problem: ":2:1: model: unknown key"},
		{name: "negative", src: "+++\n[limits]\ntimeout_ms = -1\n+++\nS\n",
			problem: ":3:14: limits.timeout_ms: must not be negative (got -1)"},
		{name: "string", src: "+++\n[limits]\ntimeout_ms = \"30s\"\n+++\nS\n",
			problem: ":3:14: limits.timeout_ms: expected a non-negative integer, got a string"},
		{name: "above 24 h", src: "+++\n[limits]\ntimeout_ms = 86400001\n+++\nS\n",
			problem: ":3:1: limits.timeout_ms: must be at most 86400000 (24 h, in milliseconds); 0 means 30 s"},
		{name: "unclosed", src: "+++\n[limits]\ntimeout_ms = 1\nS\n",
			problem: ":1:1: front matter opened with +++ is never closed: end it with a line holding only +++"},
		{name: "empty prompt", src: "+++\n[limits]\ntimeout_ms = 1\n+++\n\n  \n",
			problem: ":5:1: prompt is empty: write the compaction prompt after the front matter"},
		{name: "syntax error", src: "+++\n[limits\n+++\nS\n",
			problem: ":2:8: expected ']' to close table name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := writeTemp(t, "compaction.md", tt.src)
			a, err := LoadAgentFile(p)
			if tt.problem == "" {
				if err != nil {
					t.Fatal(err)
				}
				if a.Limits.TimeoutMS != tt.timeout || a.Prompt != tt.prompt || a.Path != p {
					t.Errorf("got %+v", a)
				}
				return
			}
			ps := problemsOf(t, err)
			if len(ps) != 1 || strings.TrimPrefix(ps[0].String(), p) != tt.problem {
				t.Errorf("problems:\n%s\nwant %s%s", dump(ps), p, tt.problem)
			}
		})
	}
	if _, err := LoadAgentFile(writeTemp(t, "x", "") + ".absent"); err == nil || !strings.Contains(err.Error(), "cannot read") {
		t.Errorf("missing agent file: %v", err)
	}
}
