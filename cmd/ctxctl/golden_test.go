package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/api"
)

// goldenDir holds one file per ctxctl run of TestGoldenCommands.
const goldenDir = "testdata/golden"

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func text(s string) []api.Block { return []api.Block{{Type: api.BlockText, Text: s}} }

// bigLog is a tool result long enough to be offloaded (offload.max_chars
// is 16000 by default), deterministic.
func bigLog() string {
	var b strings.Builder
	for i := range 600 {
		fmt.Fprintf(&b, "--- FAIL: TestReconcile/case_%03d (0.01s)\n    cursor.go:41: stale cursor 17 after batch %d\n", i, i)
	}
	return b.String()
}

// failingTests is a short tool result (not offloaded).
const failingTests = "--- FAIL: TestReconcile/resume (0.01s)\n    cursor.go:41: stale cursor 17 after batch 18\nFAIL\n"

// firstMessages is the start of the golden session: a prompt, a tool
// round, and an answer with usage. Nothing in it is offloaded: an offload
// stub names the data directory and an artifact id, which differ between
// runs and would change the token estimates.
func firstMessages(result string) []api.Message {
	return []api.Message{
		{Role: api.RoleUser, Content: text("The nightly reconciliation job failed again. Find out why."), Time: t0},
		{Role: api.RoleAssistant, Model: "claude-sonnet-4-5", Time: t0.Add(time.Second),
			Content: []api.Block{
				{Type: api.BlockText, Text: "I'll run the reconciliation tests first."},
				{Type: api.BlockToolCall, ID: "call_1", Name: "bash", Input: json.RawMessage(`{"command":"go test ./reconcile/..."}`)},
			},
			Usage: &api.Usage{InputTokens: 1200, CacheReadInputTokens: 300, OutputTokens: 40}},
		{Role: api.RoleTool, ToolCallID: "call_1", ToolName: "bash", IsError: true, Time: t0.Add(2 * time.Second), Content: text(result)},
		{Role: api.RoleAssistant, Model: "claude-sonnet-4-5", Time: t0.Add(3 * time.Second),
			Content: text("Every case fails on a stale cursor: the job resumes from a cursor saved before the batch was committed."),
			Usage:   &api.Usage{InputTokens: 9000, CacheReadInputTokens: 1500, OutputTokens: 60}},
	}
}

func moreMessages() []api.Message {
	return []api.Message{
		{Role: api.RoleUser, Content: text("Fix it so the cursor is saved in the same transaction."), Time: t0.Add(time.Minute)},
		{Role: api.RoleAssistant, Model: "claude-sonnet-4-5", Time: t0.Add(time.Minute + time.Second),
			Content: text("Done: the cursor is now written inside the batch transaction, and the tests pass."),
			Usage:   &api.Usage{InputTokens: 4000, CacheReadInputTokens: 6000, OutputTokens: 50}},
	}
}

// TestGoldenCommands drives every ctxctl command against a real daemon,
// text and --json, and compares each run (exit code, stdout, stderr) with
// its golden file after normalizing paths, times, durations, versions and
// artifact ids. go test ./cmd/ctxctl -update rewrites the files.
func TestGoldenCommands(t *testing.T) {
	d := startDaemon(t)
	norm := d.normalizer()
	ctx := context.Background()
	n := 0
	step := func(name string, args ...string) (int, string, string) {
		t.Helper()
		n++
		code, stdout, stderr := d.run(t, args...)
		got := norm.apply(transcriptOf(args, code, stdout, stderr))
		golden(t, filepath.Join(goldenDir, fmt.Sprintf("%02d-%s.txt", n, name)), got)
		return code, stdout, stderr
	}
	expect := func(code, want int, stderr string) {
		t.Helper()
		if code != want {
			t.Errorf("exit %d, want %d; stderr: %s", code, want, stderr)
		}
	}

	code, _, stderr := step("status", "status")
	expect(code, 0, stderr)
	code, _, stderr = step("status-json", "status", "--json")
	expect(code, 0, stderr)
	code, _, stderr = step("session-list-empty", "session", "list")
	expect(code, 0, stderr)

	if _, err := d.client.CreateSession(ctx, api.CreateSessionRequest{ID: "s1", Model: "claude-sonnet-4-5", System: "You are a careful engineer."}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.client.AppendMessages(ctx, "s1", api.AppendMessagesRequest{Messages: firstMessages(failingTests)}); err != nil {
		t.Fatal(err)
	}

	code, _, stderr = step("session-list", "session", "list")
	expect(code, 0, stderr)
	code, _, stderr = step("session-list-json", "session", "list", "--json")
	expect(code, 0, stderr)
	code, _, stderr = step("session-show", "session", "show", "s1")
	expect(code, 0, stderr)
	code, _, stderr = step("session-show-json", "session", "show", "--json", "s1")
	expect(code, 0, stderr)
	code, _, stderr = step("session-context", "session", "context", "--no-presend", "s1")
	expect(code, 0, stderr)
	code, _, stderr = step("session-context-anthropic", "session", "context", "--format", "anthropic", "--no-presend", "s1")
	expect(code, 0, stderr)
	code, _, stderr = step("session-context-openai", "session", "context", "--format", "openai", "--no-presend", "--json", "s1")
	expect(code, 0, stderr)
	code, _, stderr = step("session-events", "session", "events", "s1")
	expect(code, 0, stderr)
	code, _, stderr = step("session-events-json", "session", "events", "--json", "--from", "3", "s1")
	expect(code, 0, stderr)

	code, _, stderr = step("compact", "compact", "s1")
	expect(code, 0, stderr)
	code, _, stderr = step("compact-nothing-json", "compact", "--json", "s1")
	expect(code, 0, stderr)
	if _, err := d.client.AppendMessages(ctx, "s1", api.AppendMessagesRequest{Messages: moreMessages()}); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = step("compact-overflow-json", "compact", "--reason", "overflow", "--json", "s1")
	expect(code, 0, stderr)
	code, _, stderr = step("checkpoint-list", "checkpoint", "list", "s1")
	expect(code, 0, stderr)
	code, _, stderr = step("checkpoint-list-json", "checkpoint", "list", "--json", "s1")
	expect(code, 0, stderr)
	code, _, stderr = step("doctor-session", "doctor", "s1")
	expect(code, 0, stderr)
	code, _, stderr = step("doctor-session-json", "doctor", "--json", "s1")
	expect(code, 0, stderr)
	code, _, stderr = step("doctor", "doctor")
	expect(code, 0, stderr)

	// An offloaded result reads back whole, by URI and by bare id.
	if _, err := d.client.CreateSession(ctx, api.CreateSessionRequest{ID: "s2", Model: "claude-sonnet-4-5"}); err != nil {
		t.Fatal(err)
	}
	app, err := d.client.AppendMessages(ctx, "s2", api.AppendMessagesRequest{Messages: firstMessages(bigLog())})
	if err != nil {
		t.Fatal(err)
	}
	uri := offloadedArtifact(t, app)
	for _, ref := range []string{uri, api.ArtifactID(uri)} {
		code, stdout, stderr := d.run(t, "artifact", "get", ref)
		if code != 0 || stdout != bigLog() || stderr != "" {
			t.Errorf("artifact get %s: exit %d, %d bytes (want %d), stderr %q", ref, code, len(stdout), len(bigLog()), stderr)
		}
	}
	// --json, as docs/cli.md promises of every read command.
	code, stdout, stderr := d.run(t, "artifact", "get", "--json", uri)
	var aj struct {
		ID, URI, Text string
		Bytes         int
	}
	if err := json.Unmarshal([]byte(stdout), &aj); code != 0 || err != nil || aj.Text != bigLog() || aj.Bytes != len(bigLog()) || aj.URI != uri || aj.ID != api.ArtifactID(uri) {
		t.Errorf("artifact get --json: exit %d, %v, stderr %q", code, err, stderr)
	}
	code, _, stderr = step("artifact-get-missing", "artifact", "get", "artifact://"+strings.Repeat("0", 64))
	expect(code, 1, stderr)

	code, _, stderr = step("flag-after-argument", "session", "show", "s1", "--json")
	expect(code, 2, stderr)
	code, _, stderr = step("session-unknown-command", "session", "bogus")
	expect(code, 2, stderr)
	code, _, stderr = step("session-delete", "session", "delete", "s1")
	expect(code, 0, stderr)
	code, _, stderr = step("session-show-missing", "session", "show", "s1")
	expect(code, 1, stderr)
	code, _, stderr = step("status-unreachable", "--socket", "/nonexistent/ctxd.sock", "status")
	expect(code, 1, stderr)
	code, _, stderr = step("doctor-unreachable", "--socket", "/nonexistent/ctxd.sock", "doctor")
	expect(code, 1, stderr)
}

// offloadedArtifact returns the artifact URI of the offload event of an
// append.
func offloadedArtifact(t *testing.T, r *api.AppendMessagesResponse) string {
	t.Helper()
	for _, ev := range r.Events {
		if ev.Kind != api.EventOffload {
			continue
		}
		var data struct {
			Artifact string `json:"artifact"`
		}
		if err := json.Unmarshal(ev.Data, &data); err != nil || data.Artifact == "" {
			t.Fatalf("offload event without artifact: %s (%v)", ev.Data, err)
		}
		return data.Artifact
	}
	t.Fatalf("no offload event in %+v", r.Events)
	return ""
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
