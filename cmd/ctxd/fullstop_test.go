package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxd/ctxd/api"
)

// TestStopOnAFullDisk (docs/decisions.md "A stop on a full disk"): another
// process fills the data directory's file system to the last byte while ctxd
// runs; a SIGTERM then made badger flush its memtable into a new memory-mapped
// table on the full file system, and the page write killed ctxd with SIGBUS.
// ctxd now leaves the store unclosed when the space a flush needs is not there
// (the write-ahead log holds every acknowledged write): exit 0 with a warning,
// and after space is freed every message is there.
func TestStopOnAFullDisk(t *testing.T) {
	fs := mountTmpfs(t, "24m")
	e := newEnv(t, baseConfig+"\n[storage]\nmin_free_bytes = 1048576\n")
	e.dataDir = filepath.Join(fs, "data")
	p := e.start(t)
	c := e.client()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := c.CreateSession(ctx, api.CreateSessionRequest{ID: "s", Model: "local", ContextLimit: 1_000_000}); err != nil {
		t.Fatal(err)
	}
	// Small messages stay in the memtable (values under badger's value
	// threshold are inline): the flush at close has a table to write.
	const n = 200
	for i := range n {
		if _, err := c.AppendMessages(ctx, "s", api.AppendMessagesRequest{Messages: []api.Message{userText(strings.Repeat("x", 2000) + string(rune('a'+i%26)))}}); err != nil {
			t.Fatal(err)
		}
	}
	filler := filepath.Join(fs, "filler")
	fill(t, filler)

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatal("ctxd did not exit after SIGTERM")
	}
	ws, _ := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() || p.cmd.ProcessState.ExitCode() != 0 {
		t.Fatalf("SIGTERM on a full disk: exit %d, signal %v\n%s", p.cmd.ProcessState.ExitCode(), ws.Signal(), p.stderr.String())
	}
	if !strings.Contains(p.stderr.String(), "store left unclosed") {
		t.Errorf("no warning that the store was left unclosed:\n%s", p.stderr.String())
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	p = e.start(t)
	sess, err := c.GetSession(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if sess.Messages != n {
		t.Errorf("after a restart: %d messages, want %d", sess.Messages, n)
	}
	if code := p.signalAndWait(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d", code)
	}
}
