package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// buildCtxd builds the daemon into a temporary directory (without -race:
// the daemon's own tests race it; here it is the load's target).
func buildCtxd(t *testing.T) string {
	t.Helper()
	return buildCmd(t, "ctxd")
}

// buildCmd builds the command github.com/ctxd/ctxd/cmd/<name> into a
// temporary directory and returns its path.
func buildCmd(t *testing.T, name string) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not found:", err)
	}
	bin := filepath.Join(t.TempDir(), name)
	out, err := exec.Command(gobin, "build", "-o", bin, "github.com/ctxd/ctxd/cmd/"+name).CombinedOutput()
	if err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, out)
	}
	return bin
}

// runJSON runs ctxbench in this process with args and --json, and decodes
// its report.
func runJSON(t *testing.T, args ...string) (*Report, int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, append(args, "--json"), &stdout, &stderr)
	var rep Report
	if code != 2 && stdout.Len() > 0 {
		if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
			t.Fatalf("report is not JSON: %v\n%s", err, stdout.String())
		}
	}
	return &rep, code, stderr.String()
}

// TestSmoke runs 4 agents for 3 s against a real ctxd with a 50 ms fake
// summarizer: nothing may be lost or reordered and compactions must have
// happened under the load.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a daemon")
	}
	bin := buildCtxd(t)
	rep, code, stderr := runJSON(t, "--ctxd", bin, "--agents", "4", "--duration", "3s", "--summarizer-latency", "50ms",
		"--context-length-rate", "0.1", "--overloaded-rate", "0.05", "--context-limit", "16000")
	if code != 0 || !rep.OK {
		t.Fatalf("exit %d, problems %v\n%s", code, rep.Problems, stderr)
	}
	l := rep.Load
	if l == nil || l.Appends == 0 || l.ContextReads == 0 {
		t.Fatalf("no load: %+v", l)
	}
	if in := l.Integrity; !in.OK() || in.Acknowledged != l.Messages || in.Acknowledged == 0 {
		t.Fatalf("integrity %+v for %d messages", in, l.Messages)
	}
	if l.Compactions.Total() == 0 || rep.CompactionsMetrics["ok"] == 0 {
		t.Fatalf("no compaction: events %+v, metrics %v", l.Compactions, rep.CompactionsMetrics)
	}
	if rep.Memory == nil || rep.Memory.RSS <= 0 || rep.HeapInuseMiB <= 0 || rep.Queue.Samples == 0 {
		t.Fatalf("no daemon figures: memory %+v, heap %v, queue %+v", rep.Memory, rep.HeapInuseMiB, rep.Queue)
	}
	if rep.Provider == nil || rep.Provider.Calls == 0 {
		t.Fatalf("the fake provider was not called: %+v", rep.Provider)
	}
}

// TestQueueFull: one worker, a queue of one and a slow summarizer; twelve
// compaction requests at once get queued or a clear unavailable error,
// never a hang.
func TestQueueFull(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a daemon")
	}
	bin := buildCtxd(t)
	rep, code, stderr := runJSON(t, "--ctxd", bin, "--queue-full", "12", "--workers", "1", "--queue", "1",
		"--summarizer-latency", "1s", "--request-timeout", "10s")
	if code != 0 || !rep.OK {
		t.Fatalf("exit %d, problems %v\n%s", code, rep.Problems, stderr)
	}
	q := rep.QueueFull
	if q.Hung != 0 || q.Unavailable == 0 || q.Queued+q.Unavailable != 12 || q.Queued > 3 {
		t.Fatalf("queue full: %+v", q)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--agents", "0"},
		{"--idle-sessions", "3", "--queue-full", "3"},
		{"--socket", "/x", "--ctxd", "/y"},
		{"--context-length-rate", "0.8", "--overloaded-rate", "0.5"},
		{"stray"},
		{"--arrivals", "uniform"},
		{"--arrivals", "poisson"}, // without --rate
		{"--rate", "2e9"},
		{"--rate", "1e-10"},
		{"--rate", "NaN"},
		{"--rate", "Inf"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errb.String())
		}
	}
}
