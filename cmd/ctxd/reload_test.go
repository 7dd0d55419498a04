package main

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// waitCount waits until the daemon's stderr contains s n times.
func waitCount(t *testing.T, p *proc, s string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(p.stderr.String(), s) < n {
		if time.Now().After(deadline) {
			t.Fatalf("ctxd log never said %q %d times:\n%s", s, n, p.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestReloadComparesTheEffectiveDataDir: a daemon started with a relative
// --data-dir used to warn at every SIGHUP that
// storage.data_dir had changed. The reload compares the directory the
// daemon uses; a real change still warns.
func TestReloadComparesTheEffectiveDataDir(t *testing.T) {
	e := newEnv(t, baseConfig)
	e.cwd = e.dir
	// The later --data-dir wins over command's absolute one.
	p := e.startWith(t, "--data-dir", "data")
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitLog(t, "configuration reloaded")
	if strings.Contains(p.stderr.String(), "key=storage.data_dir") {
		t.Errorf("an unchanged relative --data-dir was reported as changed:\n%s", p.stderr.String())
	}

	// A configured directory other than the running one: the flag still
	// wins, so still no change.
	e.writeConfig(t, baseConfig+"\n[storage]\ndata_dir = \"/elsewhere\"\n")
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitCount(t, p, "configuration reloaded", 2)
	if strings.Contains(p.stderr.String(), "key=storage.data_dir") {
		t.Errorf("storage.data_dir under --data-dir was reported as changed:\n%s", p.stderr.String())
	}
	if code := p.signalAndWait(t, syscall.SIGINT); code != 0 {
		t.Fatalf("exit code %d after SIGINT", code)
	}

	// Without the flag, a changed storage.data_dir warns.
	e.writeConfig(t, baseConfig+"\n[storage]\ndata_dir = \"data\"\n")
	p = e.startWith(t, "--data-dir", "")
	e.writeConfig(t, baseConfig+"\n[storage]\ndata_dir = \"other\"\n")
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitLog(t, "configuration reloaded")
	if !strings.Contains(p.stderr.String(), "key=storage.data_dir") {
		t.Errorf("a changed storage.data_dir was not reported:\n%s", p.stderr.String())
	}
	if code := p.signalAndWait(t, syscall.SIGINT); code != 0 {
		t.Fatalf("exit code %d after SIGINT", code)
	}
}
