package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/internal/syncbuf"
)

// ctxdBin is the ctxd binary built by TestMain for the tests that need a
// real daemon; "" when it could not be built (buildErr says why).
var (
	ctxdBin  string
	buildErr error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ctxctl-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if gobin, err := exec.LookPath("go"); err != nil {
		buildErr = fmt.Errorf("go tool not found: %w", err)
	} else {
		bin := filepath.Join(dir, "ctxd")
		cmd := exec.Command(gobin, "build", "-o", bin, "../ctxd")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/ctxd: %v\n%s", err, out)
		} else {
			ctxdBin = bin
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// daemon is a ctxd process started for one test.
type daemon struct {
	socket, dataDir, xdg string
	client               *api.Client
	logs                 *syncbuf.Buffer
}

// shortDir returns a directory for a unix socket: t.TempDir() unless its
// path is too long for sun_path (104 bytes on some systems), else a short
// one under /tmp.
func shortDir(t *testing.T) string {
	d := t.TempDir()
	if len(d)+len("/ctxd.sock") < 100 {
		return d
	}
	d, err := os.MkdirTemp("/tmp", "cc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// fixedLengthDir is a new directory whose path has dataDirLen bytes
// wherever the test runs: summaries name recall files under the data
// directory, so their sizes in the golden outputs depend on its length.
func fixedLengthDir(t *testing.T) string {
	d := t.TempDir()
	if pad := dataDirLen - len(d) - 1; pad > 0 {
		d = filepath.Join(d, strings.Repeat("d", pad))
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// dataDirLen is the length of fixedLengthDir's paths.
const dataDirLen = 160

// startDaemon runs ctxd on a socket in a temp dir, with an empty user
// configuration and a temp data dir, and waits until it answers.
func startDaemon(t *testing.T) *daemon {
	t.Helper()
	return startDaemonConfig(t, "")
}

// startDaemonConfig is startDaemon with extra TOML appended to the user
// configuration (which turns the proxy off).
func startDaemonConfig(t *testing.T, extra string) *daemon {
	t.Helper()
	if ctxdBin == "" {
		if strings.HasPrefix(buildErr.Error(), "go tool not found") {
			t.Skip(buildErr)
		}
		t.Fatal(buildErr)
	}
	d := &daemon{
		socket:  filepath.Join(shortDir(t), "ctxd.sock"),
		dataDir: fixedLengthDir(t),
		xdg:     t.TempDir(),
		logs:    &syncbuf.Buffer{},
	}
	// t.TempDir's directories are 0755 under the usual umask; ctxd refuses
	// a data directory other users can read.
	if err := os.Chmod(d.dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	// The provider proxy stays off: its default port is shared by every
	// daemon on the machine (cmd/ctxd tests the proxy).
	if err := os.MkdirAll(filepath.Join(d.xdg, "ctxd"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.xdg, "ctxd", "config.toml"), []byte("[proxy]\nenabled = false\n"+extra), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(ctxdBin, "--socket", d.socket, "--data-dir", d.dataDir, "--log-level", "warn")
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+d.xdg, "XDG_STATE_HOME="+d.dataDir, "CTXD_SOCKET="+d.socket)
	cmd.Stdout, cmd.Stderr = d.logs, d.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("ctxd logs:\n%s", d.logs)
		}
	})
	d.client = &api.Client{Socket: d.socket}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := d.client.Status(ctx)
		cancel()
		if err == nil {
			return d
		}
		select {
		case werr := <-done:
			done <- werr // for the cleanup, which waits on it
			t.Fatalf("ctxd exited before answering: %v\n%s", werr, d.logs)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("ctxd did not answer within 30 s: %v\n%s", err, d.logs)
		}
		time.Sleep(20 * time.Millisecond) // readiness poll, not a wait for an outcome
	}
}

// env returns a ctxctl environment pointed at the daemon (through
// CTXD_SOCKET) with an empty user configuration and no system layer.
func (d *daemon) env(stdout, stderr io.Writer) *env {
	return &env{
		stdout: stdout,
		stderr: stderr,
		getenv: func(k string) string {
			switch k {
			case "XDG_CONFIG_HOME":
				return d.xdg
			case api.EnvSocket:
				return d.socket
			}
			return ""
		},
	}
}

// run runs ctxctl against the daemon.
func (d *daemon) run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = runEnv(append([]string{"ctxctl"}, args...), d.env(&out, &errb))
	return code, out.String(), errb.String()
}

// normalizer replaces what differs between runs and machines: paths,
// times, durations, versions, artifact ids.
type normalizer struct{ paths [][2]string }

var (
	reTime = regexp.MustCompile(`\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})`)
	// The free space of the daemon's disks changes between runs.
	reFreeBytes = regexp.MustCompile(`("free_bytes": )\d+`)
	reFreeText  = regexp.MustCompile(`\d+(\.\d)? [KMGTP]?i?B free`)
	reUptime    = regexp.MustCompile(`("uptime_seconds": )[0-9.e+-]+`)
	reUp        = regexp.MustCompile(`\(up [0-9hms.]+\)`)
	reArtifact  = regexp.MustCompile(`(artifact://|"artifact": "|/v1/artifacts/)[0-9a-f]{16,}`)
	reArtID     = regexp.MustCompile(`\b[0-9a-f]{64}\b`)
)

func (d *daemon) normalizer() *normalizer {
	return &normalizer{paths: [][2]string{
		{d.socket, "<SOCKET>"},
		{d.dataDir, "<DATA>"},
		{d.xdg, "<XDG>"},
	}}
}

func (n *normalizer) apply(s string) string {
	for _, p := range n.paths {
		s = strings.ReplaceAll(s, p[0], p[1])
	}
	s = reTime.ReplaceAllString(s, "<TIME>")
	s = reFreeBytes.ReplaceAllString(s, "${1}<N>")
	s = reFreeText.ReplaceAllString(s, "<SIZE> free")
	s = reUptime.ReplaceAllString(s, "${1}<N>")
	s = reUp.ReplaceAllString(s, "(up <DUR>)")
	s = reArtifact.ReplaceAllString(s, "${1}<ID>")
	s = reArtID.ReplaceAllString(s, "<ID>")
	s = strings.ReplaceAll(s, "ctxd "+api.Version, "ctxd <VERSION>")
	s = strings.ReplaceAll(s, `"version": "`+api.Version+`"`, `"version": "<VERSION>"`)
	return s
}

// transcriptOf is the golden text of one ctxctl run.
func transcriptOf(args []string, code int, stdout, stderr string) string {
	return fmt.Sprintf("$ ctxctl %s\n--- exit %d\n--- stdout\n%s--- stderr\n%s", strings.Join(args, " "), code, stdout, stderr)
}
