package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps ctxctl a thin client (docs/decisions.md "Replay
// runs in the ctxd binary"): it must not link the store, the summarizer's
// HTTP stack, the worker pool or the summarizer.
func TestDeps(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not found:", err)
	}
	out, err := exec.Command(gobin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		deps[p] = true
	}
	if !deps["github.com/ctxd/ctxd/api"] {
		t.Fatalf("go list -deps did not list api: wrong package?\n%s", out)
	}
	for _, bad := range []string{
		"github.com/dgraph-io/badger/v4",
		"github.com/hashicorp/go-retryablehttp",
		"github.com/ctxd/ctxd/workers",
		"github.com/ctxd/ctxd/summarizer",
		"github.com/ctxd/ctxd/engine",
		"github.com/ctxd/ctxd/server",
		"github.com/ctxd/ctxd/replay",
	} {
		if deps[bad] {
			t.Errorf("cmd/ctxctl links %s: ctxctl reaches the daemon through api.Client only", bad)
		}
	}
}
