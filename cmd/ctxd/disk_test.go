package main

// Full-disk tests (docs/decisions.md "A full disk: a free-space reserve
// checked before every write"): the data directory on a small tmpfs. They need
// root to mount; without it they skip, except under CI=true, where CI runs
// as root and a skip would hide a regression.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/internal/store"
)

// mountTmpfs mounts a tmpfs of size (e.g. "20m") on a new directory and
// unmounts it at the end of the test.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	skip := t.Skipf
	if os.Getenv("CI") == "true" {
		skip = t.Fatalf
	}
	if os.Geteuid() != 0 {
		skip("mounting a tmpfs needs root (this test runs as root in CI)")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		skip("mount a %s tmpfs: %v: %s", size, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// fill appends zeros to path until the file system is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return
		}
	}
}

// TestDiskFull: on a small tmpfs (12 MB: a race-enabled daemon takes seconds
// per 900 KB append on a loaded machine), 900 KB appends (on 20 MB the 24th
// killed ctxd with SIGBUS before the free-space reserve) are refused with 507
// insufficient_storage once the reserve is reached, while reads, contexts and
// the status keep working; the daemon stops cleanly; a start on a full disk
// fails with one line naming the directory and the space needed (exit 1, no
// signal); once space is freed it starts with every acknowledged message.
func TestDiskFull(t *testing.T) {
	fs := mountTmpfs(t, "12m")
	e := newEnv(t, baseConfig+"\n[storage]\nmin_free_bytes = 4194304\n")
	e.dataDir = filepath.Join(fs, "data")
	p := e.start(t)
	c := e.client()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := c.CreateSession(ctx, api.CreateSessionRequest{ID: "s", Model: "local", ContextLimit: 1_000_000}); err != nil {
		t.Fatal(err)
	}
	stored, refused := 0, 0
	for i := 0; i < 40 && refused < 3; i++ {
		_, err := c.AppendMessages(ctx, "s", api.AppendMessagesRequest{Messages: []api.Message{userText(strings.Repeat(fmt.Sprint(i%10), 900_000))}})
		switch {
		case err == nil:
			if refused > 0 {
				t.Fatalf("append %d stored after a refusal", i)
			}
			stored++
		case api.ErrorCode(err) == api.InsufficientStorage:
			refused++
			if !strings.Contains(err.Error(), e.dataDir) || !strings.Contains(err.Error(), "storage.min_free_bytes") {
				t.Errorf("507 message should name the directory and the key: %v", err)
			}
		default:
			t.Fatalf("append %d: %v\n%s", i, err, p.stderr.String())
		}
	}
	if refused == 0 || stored < 5 {
		t.Fatalf("%d appends stored, %d refused: want refusals after at least 5", stored, refused)
	}
	t.Logf("%d appends of 900 KB stored, then refused", stored)

	// Something else takes the disk below the reserve: now every write is
	// refused, and reads keep working.
	free, err := store.FreeBytes(fs)
	if err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(fs, "filler")
	if err := os.WriteFile(filler, make([]byte, free-2<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	sess, err := c.GetSession(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if sess.Messages != uint64(stored) {
		t.Errorf("session has %d messages, want the %d acknowledged", sess.Messages, stored)
	}
	if _, err := c.ContextRaw(ctx, "s", api.FormatAnthropic); err != nil {
		t.Errorf("context on a full disk: %v", err)
	}
	if _, err := c.Compact(ctx, "s", api.CompactRequest{Wait: true}); api.ErrorCode(err) != api.InsufficientStorage {
		t.Errorf("compact on a full disk: %v, want insufficient_storage", err)
	}
	if _, err := c.CreateSession(ctx, api.CreateSessionRequest{ID: "t", Model: "local", ContextLimit: 100_000}); api.ErrorCode(err) != api.InsufficientStorage {
		t.Errorf("create on a full disk: %v, want insufficient_storage", err)
	}
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Disk) == 0 || st.Disk[0].Name != "data" || !st.Disk[0].Low || st.Disk[0].ReserveBytes != 4<<20 {
		t.Errorf("status disk = %+v, want data low with a 4 MiB reserve", st.Disk)
	}
	metrics, err := c.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(metrics), `ctxd_disk_low{dir="data"} 1`) {
		t.Errorf("metrics lack ctxd_disk_low{dir=\"data\"} 1")
	}
	if code := p.signalAndWait(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM on a full disk: exit %d\n%s", code, p.stderr.String())
	}

	// Start-up on a full disk: one line, exit 1, no signal.
	fill(t, filler)
	cmd := e.command()
	out, err := cmd.CombinedOutput()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if err == nil || ws.Signaled() || cmd.ProcessState.ExitCode() != 1 {
		t.Fatalf("start on a full disk: %v (signaled %v)\n%s", err, ws.Signaled(), out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], e.dataDir) || !strings.Contains(lines[0], "free at least") || !strings.Contains(lines[0], "storage.min_free_bytes") {
		t.Errorf("start on a full disk printed %d lines, want one naming the directory and the space needed:\n%s", len(lines), out)
	}

	// Space freed: everything acknowledged is there.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	e.start(t)
	sess, err = c.GetSession(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if sess.Messages != uint64(stored) {
		t.Errorf("after a restart: %d messages, want %d", sess.Messages, stored)
	}
}

// TestOffloadFailed: an oversized tool result whose offload directory is
// full (a 1 MB tmpfs below the reserve) or cannot be created (under a
// regular file) is kept whole; the append succeeds and says so with an
// offload_failed event, and the metric counts it.
func TestOffloadFailed(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string]func(t *testing.T) string{
		"unwritable": func(*testing.T) string { return filepath.Join(notDir, "offload") },
		"full":       func(t *testing.T) string { return filepath.Join(mountTmpfs(t, "1m"), "offload") },
	}
	for name, dirOf := range cases {
		t.Run(name, func(t *testing.T) {
			dir := dirOf(t)
			e := newEnv(t, baseConfig+fmt.Sprintf("\n[storage]\nmin_free_bytes = 2097152\n[offload]\ndir = %q\nmax_chars = 1000\nkeep_head = 100\nkeep_tail = 100\n", dir))
			e.start(t)
			c := e.client()
			ctx := context.Background()
			if _, err := c.CreateSession(ctx, api.CreateSessionRequest{ID: "s", Model: "local", ContextLimit: 100_000}); err != nil {
				t.Fatal(err)
			}
			call := api.Message{Role: api.RoleAssistant, Content: []api.Block{{Type: api.BlockToolCall, ID: "c1", Name: "bash", Input: json.RawMessage(`{}`)}}}
			big := strings.Repeat("line of output\n", 500)
			res, err := c.AppendMessages(ctx, "s", api.AppendMessagesRequest{Messages: []api.Message{userText("go"), call,
				{Role: api.RoleTool, ToolCallID: "c1", ToolName: "bash", Content: []api.Block{{Type: api.BlockText, Text: big}}}}})
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Messages[2].Content[0].Text; got != big {
				t.Errorf("the result was not kept whole (%d bytes, want %d)", len(got), len(big))
			}
			var ev *api.Event
			for i := range res.Events {
				if res.Events[i].Kind == api.EventOffloadFailed {
					ev = &res.Events[i]
				}
			}
			if ev == nil {
				t.Fatalf("no offload_failed event in %+v", res.Events)
			}
			var d struct {
				ToolCallID string `json:"tool_call_id"`
				Bytes      int    `json:"bytes"`
				Reason     string `json:"reason"`
				NoSpace    bool   `json:"no_space"`
			}
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				t.Fatal(err)
			}
			if d.ToolCallID != "c1" || d.Bytes != len(big) || d.Reason == "" || d.NoSpace != (name == "full") {
				t.Errorf("offload_failed data %s", ev.Data)
			}
			m, err := c.Metrics(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(m), "ctxd_offload_failed_total 1") {
				t.Error("metrics lack ctxd_offload_failed_total 1")
			}
		})
	}
}

// TestAppendLimitAsDocumented: docs/api.md "Limits" says about
// 5,000 one-line messages fit one append and 10,000 do not; the refusal is
// 413 too_large telling the client to split, and stores nothing.
func TestAppendLimitAsDocumented(t *testing.T) {
	e := newEnv(t, baseConfig)
	e.start(t)
	c := e.client()
	ctx := context.Background()
	if _, err := c.CreateSession(ctx, api.CreateSessionRequest{ID: "s", Model: "local", ContextLimit: 10_000_000}); err != nil {
		t.Fatal(err)
	}
	batch := func(n int) []api.Message {
		out := make([]api.Message, n)
		for i := range out {
			out[i] = userText(fmt.Sprintf("message %d", i))
		}
		return out
	}
	_, err := c.AppendMessages(ctx, "s", api.AppendMessagesRequest{Messages: batch(10_000)})
	if api.ErrorCode(err) != api.TooLarge || !strings.Contains(err.Error(), "split them into smaller appends") || !strings.Contains(err.Error(), `docs/api.md "Limits"`) {
		t.Fatalf("10,000 messages: %v, want too_large asking to split", err)
	}
	if s, err := c.GetSession(ctx, "s"); err != nil || s.Messages != 0 {
		t.Fatalf("after the refusal: %+v %v, want no message", s, err)
	}
	if _, err := c.AppendMessages(ctx, "s", api.AppendMessagesRequest{Messages: batch(4_500)}); err != nil {
		t.Fatalf("4,500 messages: %v", err)
	}
}
