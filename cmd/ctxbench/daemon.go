package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ctxd/ctxd/api"
)

// envFakeKey is the environment variable ctxbench sets in ctxd's
// environment and names in the binding's api_key_env.
const envFakeKey = "CTXBENCH_FAKE_KEY"

// daemonConfig is the configuration ctxbench writes for the ctxd it starts.
type daemonConfig struct {
	fakeURL       string
	workers       int
	queue         int
	syncWrites    bool
	summaryTokens int
	// preparePercent is context_compaction.prepare_percent (0: derived).
	preparePercent uint64
}

// toml renders the configuration file.
func (c daemonConfig) toml() string {
	return fmt.Sprintf(`# Written by ctxbench.
[[summarizer.bindings]]
name = "fake"
provider = "anthropic"
model = "claude-haiku-4-5"
base_url = %q
api_key_env = %q
max_output_tokens = %d

[storage]
sync_writes = %t

[workers]
size = %d
queue = %d

[context_compaction]
prepare_percent = %d
`, c.fakeURL, envFakeKey, c.summaryTokens, c.syncWrites, c.workers, c.queue, c.preparePercent)
}

// tailBuffer keeps the last max bytes written to it: the daemon's stderr,
// shown when something goes wrong.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// daemon is a ctxd process ctxbench started, with its files in a temporary
// directory removed by stop.
type daemon struct {
	dir    string
	socket string
	cmd    *exec.Cmd
	stderr *tailBuffer
	done   chan struct{}
	err    error
}

// findCtxd resolves --ctxd: the flag's value, else ctxd next to this
// executable, else ctxd on PATH.
func findCtxd(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "ctxd")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	p, err := exec.LookPath("ctxd")
	if err != nil {
		return "", errors.New("ctxd not found next to ctxbench nor on PATH: build it (go build -o bin/ ./cmd/ctxd ./cmd/ctxbench) or give --ctxd PATH")
	}
	return p, nil
}

// startDaemon writes cfg and starts bin on a socket in a new temporary
// directory, then waits until it answers /v1/status (at most 30 s).
func startDaemon(ctx context.Context, bin string, cfg daemonConfig) (*daemon, error) {
	// A short directory under /tmp keeps the socket path far below the
	// 108-byte sun_path limit; MkdirTemp makes it 0700 as ctxd requires.
	dir, err := os.MkdirTemp("/tmp", "ctxbench-")
	if err != nil {
		return nil, err
	}
	d := &daemon{dir: dir, socket: filepath.Join(dir, "ctxd.sock"), stderr: &tailBuffer{max: 64 << 10}, done: make(chan struct{})}
	configPath := filepath.Join(dir, "ctxd.toml")
	xdg := filepath.Join(dir, "xdg-config")
	if err := os.MkdirAll(xdg, 0o700); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := os.WriteFile(configPath, []byte(cfg.toml()), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	d.cmd = exec.Command(bin, "--socket", d.socket, "--data-dir", filepath.Join(dir, "data"),
		"--config", configPath, "--log-level", "warn")
	// No user configuration layer, no inherited socket: only the file above.
	d.cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + dir,
		"XDG_CONFIG_HOME=" + xdg,
		envFakeKey + "=ctxbench-not-a-key",
	}
	if v := os.Getenv("GOMAXPROCS"); v != "" {
		d.cmd.Env = append(d.cmd.Env, "GOMAXPROCS="+v)
	}
	d.cmd.Stderr = d.stderr
	orphanGuard(d.cmd)
	if err := d.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() { d.err = d.cmd.Wait(); close(d.done) }()

	c := &api.Client{Socket: d.socket}
	deadline := time.Now().Add(30 * time.Second)
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := c.Status(rctx)
		cancel()
		if err == nil {
			return d, nil
		}
		select {
		case <-d.done:
			e := fmt.Errorf("ctxd exited before it was ready: %v\n%s", d.err, d.stderr.String())
			os.RemoveAll(dir)
			return nil, e
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			d.stop()
			return nil, fmt.Errorf("ctxd not ready after 30 s: %v\n%s", err, d.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pid is the daemon's process id.
func (d *daemon) pid() int { return d.cmd.Process.Pid }

// stop sends SIGTERM, waits up to 45 s (ctxd's own shutdown budget is 30 s),
// then kills it, and removes its files. It returns ctxd's exit error, if
// any.
func (d *daemon) stop() error {
	defer os.RemoveAll(d.dir)
	select {
	case <-d.done:
		return d.err
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
		return d.err
	case <-time.After(45 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
		return errors.New("ctxd did not stop within 45 s of SIGTERM; killed")
	}
}

// Memory is a process's memory as /proc reports it, in MiB.
type Memory struct {
	// RSS is the resident set size now (VmRSS).
	RSS float64 `json:"rss_mib"`
	// PeakRSS is the largest resident set size so far (VmHWM).
	PeakRSS float64 `json:"peak_rss_mib"`
	// RSSAnon and RSSFile split RSS into anonymous memory (the Go heap,
	// badger's arenas) and mapped file pages (badger's memory-mapped
	// tables and logs: page cache the kernel reclaims under pressure).
	RSSAnon float64 `json:"rss_anon_mib"`
	RSSFile float64 `json:"rss_file_mib"`
}

// readMemory reads VmRSS, VmHWM, RssAnon and RssFile of process pid from
// /proc.
func readMemory(pid int) (Memory, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Memory{}, err
	}
	return parseProcStatus(b)
}

// parseProcStatus extracts VmRSS and VmHWM (kB) from a /proc/<pid>/status
// file.
func parseProcStatus(b []byte) (Memory, error) {
	var m Memory
	found := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM" && k != "RssAnon" && k != "RssFile") {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return Memory{}, fmt.Errorf("/proc status: unexpected %s line %q", k, sc.Text())
		}
		kb, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return Memory{}, fmt.Errorf("/proc status: %s: %w", k, err)
		}
		switch k {
		case "VmRSS":
			m.RSS = kb / 1024
			found++
		case "VmHWM":
			m.PeakRSS = kb / 1024
			found++
		case "RssAnon":
			m.RSSAnon = kb / 1024
		case "RssFile":
			m.RSSFile = kb / 1024
		}
	}
	if found != 2 {
		return Memory{}, errors.New("/proc status: no VmRSS or VmHWM line")
	}
	return m, nil
}

// metricValues returns the values of the samples named name in a
// Prometheus text exposition, keyed by their label text ("" for none;
// `outcome="ok"` for ctxd_compactions_total{outcome="ok"}).
func metricValues(text []byte, name string) map[string]float64 {
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		labels := ""
		switch {
		case strings.HasPrefix(rest, "{"):
			end := strings.Index(rest, "}")
			if end < 0 {
				continue
			}
			labels, rest = rest[1:end], rest[end+1:]
		case strings.HasPrefix(rest, " "):
		default:
			continue // a longer name with this prefix
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		out[labels] = v
	}
	return out
}
