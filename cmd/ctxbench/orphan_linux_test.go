//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestNoOrphanDaemon: a ctxbench killed with SIGKILL in the middle of a run
// (it cannot stop its ctxd itself) leaves no ctxd running.
func TestNoOrphanDaemon(t *testing.T) {
	ctxd, bench := buildCtxd(t), buildCmd(t, "ctxbench")
	cmd := exec.Command(bench, "--ctxd", ctxd, "--agents", "2", "--generated", "--rate", "2", "--duration", "60s")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	child := 0
	for deadline := time.Now().Add(time.Minute); child == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("ctxbench started no ctxd within a minute")
		}
		// Any of ctxbench's threads may have started it.
		tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/task/*/children")
		for _, p := range tasks {
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				child, _ = strconv.Atoi(f)
			}
		}
	}
	time.Sleep(500 * time.Millisecond) // the daemon is up and serving
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(child) + "/stat")
		// Gone, or a zombie waiting for init to reap it.
		if err != nil || strings.Contains(string(b), ") Z ") {
			return
		}
		if time.Now().After(deadline) {
			syscall.Kill(child, syscall.SIGKILL)
			t.Fatalf("ctxd %d still running 30 s after its ctxbench was killed", child)
		}
	}
}
