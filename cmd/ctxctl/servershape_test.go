package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/config"
)

// With compaction.shape "server", ctxctl check (a warning, exit 0, and
// effective.server_shape in --json) and ctxctl doctor (the configuration
// part, and a session's state from the daemon) say which models use the
// provider's compaction and which fall back to the summarizer, and why.
func TestShapeServerFallbacksReported(t *testing.T) {
	path := filepath.Join(t.TempDir(), "server.toml")
	conf := "[compaction]\nshape = \"server\"\n\n[models.\"gpt-5.2-codex\"]\ncontext_limit = 400000\nserver_compaction = true\n"
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := ctxctl(t, "check", "--json", "--config", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, w := range []string{`warning: compaction.shape is "server"`, "Chat Completions sessions", "with server_compaction: claude-opus-4-6, claude-opus-4-7, claude-opus-4-8, claude-sonnet-4-6, gpt-5.2-codex;", "falling back: claude-haiku-4-5,"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("check's stderr lacks %q:\n%s", w, stderr)
		}
	}
	var out struct {
		Effective struct {
			ServerShape *serverShapeReport `json:"server_shape"`
		} `json:"effective"`
		Warnings []config.Warning `json:"warnings"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Warnings) != 1 || out.Warnings[0].Key != "compaction.shape" || !strings.HasPrefix(out.Warnings[0].Message, `compaction.shape is "server": `) {
		t.Errorf("the JSON's warnings lack the shape's: %+v", out.Warnings)
	}
	sh := out.Effective.ServerShape
	if sh == nil || !slices.Contains(sh.Models, "claude-sonnet-4-6") || !slices.Contains(sh.FallbackModels, "gpt-4o") || slices.Contains(sh.FallbackModels, "gpt-5.2-codex") {
		t.Fatalf("effective.server_shape %+v", sh)
	}
	if _, _, stderr := ctxctl(t, "check"); strings.Contains(stderr, "shape") {
		t.Errorf("the default shape warns: %s", stderr)
	}

	// doctor: the configuration part needs no daemon.
	_, stdout, _ = ctxctl(t, "doctor", "--json", "--config", path)
	var rep doctorReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || rep.ServerShape == nil || !slices.Contains(rep.ServerShape.FallbackModels, "gpt-4o") {
		t.Fatalf("doctor --json server_shape: %v %+v", err, rep.ServerShape)
	}
	var b bytes.Buffer
	rep.Session = &doctorSessionReport{ID: "s1", Session: &api.Session{ID: "s1", Model: "gpt-4.1", Shape: "server",
		ServerShapeWhy: `compaction.shape is "server", but the Chat Completions API has no server-side compaction: it falls back to the summarizer bindings`}}
	writeDoctor(&b, &rep)
	for _, w := range []string{"shape server: the provider compacts proxied Anthropic Messages", "models that fall back to the summarizer: claude-haiku-4-5,",
		"shape server:    FALLS BACK to the summarizer — compaction.shape is \"server\", but the Chat Completions API"} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("doctor lacks %q:\n%s", w, b.String())
		}
	}
}
