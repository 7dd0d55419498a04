package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/api"
)

var update = flag.Bool("update", false, "rewrite the golden files (testdata/config, cmd/ctxctl/testdata/golden)")

// ctxctl runs ctxctl in-process from the repository root, with no system
// layer and an empty user layer, so that goldens hold only relative paths.
func ctxctl(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	xdg := t.TempDir()
	e := &env{
		stdout: &out,
		stderr: &errb,
		getenv: func(k string) string {
			if k == "XDG_CONFIG_HOME" {
				return xdg
			}
			return ""
		},
	}
	code = runEnv(append([]string{"ctxctl"}, args...), e)
	return code, out.String(), errb.String()
}

// chdirRoot makes paths in goldens relative to the repository root.
func chdirRoot(t *testing.T) {
	t.Chdir(filepath.Join("..", ".."))
}

func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/ctxctl -update)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (run go test ./cmd/ctxctl -update to accept):\n--- got\n%s--- want\n%s", path, got, want)
	}
}

// TestCheckInvalidGolden: every invalid example exits 1 and prints exactly
// its golden file on stderr, nothing on stdout.
func TestCheckInvalidGolden(t *testing.T) {
	chdirRoot(t)
	files, err := filepath.Glob("testdata/config/invalid/*.toml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no invalid examples: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			code, stdout, stderr := ctxctl(t, "check", "--config", f)
			if code != 1 {
				t.Errorf("exit %d, want 1", code)
			}
			if stdout != "" {
				t.Errorf("stdout not empty: %q", stdout)
			}
			for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
				if !strings.HasPrefix(line, "testdata/") && !strings.HasPrefix(line, "ctxctl check: ") {
					t.Errorf("line does not start with a relative path: %q", line)
				}
			}
			if !strings.Contains(stderr, ".toml:") && !strings.Contains(stderr, ".md:") {
				t.Errorf("no problem has a position:\n%s", stderr)
			}
			golden(t, strings.TrimSuffix(f, ".toml")+".golden", stderr)
		})
	}
}

// TestCheckValidJSONGolden: valid examples exit 0 with a one-line OK on
// stderr and the effective configuration on stdout.
func TestCheckValidJSONGolden(t *testing.T) {
	chdirRoot(t)
	cases := []struct {
		name   string
		args   []string
		golden string
	}{
		{"minimal", []string{"--config", "testdata/config/valid/minimal.toml"}, "testdata/config/valid/minimal.json"},
		{"agent", []string{"--config", "testdata/config/valid/agent.toml"}, "testdata/config/valid/agent.json"},
		{"layered", []string{"--config", "testdata/config/layered/lower.toml", "--config", "testdata/config/layered/upper.toml"}, "testdata/config/layered/effective.json"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := ctxctl(t, append(append([]string{"check"}, tc.args...), "--json")...)
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, stderr)
			}
			if !strings.HasPrefix(stderr, "ctxctl check: OK") || strings.Count(stderr, "\n") != 1 {
				t.Errorf("stderr is not one OK line: %q", stderr)
			}
			golden(t, tc.golden, stdout)
		})
	}
}

func TestCheckJSONEffectiveValues(t *testing.T) {
	chdirRoot(t)
	decode := func(args ...string) map[string]any {
		t.Helper()
		code, stdout, stderr := ctxctl(t, append([]string{"check", "--json"}, args...)...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(stdout), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	eff := func(m map[string]any) map[string]any { return m["effective"].(map[string]any) }

	m := decode()
	if e := eff(m); e["threshold_percent"] != 70.0 || e["summarizer_timeout_ms"] != 180000.0 || e["threshold_buffer_tokens"] != nil {
		t.Errorf("defaults: effective = %v", e)
	}
	if src := m["sources"].(map[string]any); src["context_compaction"] != "default" {
		t.Errorf("sources = %v", src)
	}
	if cc := m["context_compaction"].(map[string]any); cc["keep_recent_tokens"] != 16384.0 {
		t.Errorf("context_compaction uses non-TOML names or values: %v", cc)
	}

	// Each model field's source: a partial entry keeps the catalog's other
	// fields, and says so.
	dir0 := t.TempDir()
	small := filepath.Join(dir0, "small.toml")
	if err := os.WriteFile(small, []byte("[models.\"claude-opus-4-8\"]\ncontext_limit = 30000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m = decode("--config", small)
	opus := m["models"].(map[string]any)["claude-opus-4-8"].(map[string]any)
	if opus["context_limit"] != 30000.0 || opus["thinking_binding"] != true || opus["server_compaction"] != true || opus["token_factor"] != 1.35 {
		t.Errorf("partial entry = %v, want the catalog's other fields", opus)
	}
	src := m["model_sources"].(map[string]any)["claude-opus-4-8"].(map[string]any)
	if src["context_limit"] != small || src["thinking_binding"] != "catalog" || src["token_factor"] != "catalog" {
		t.Errorf("model_sources = %v", src)
	}

	m = decode("--config", "testdata/config/valid/minimal.toml")
	if e := eff(m); e["threshold_buffer_tokens"] != 20000.0 || e["threshold_percent"] != nil {
		t.Errorf("buffer trigger: effective = %v", e)
	}

	// --agent-file wins over compaction.agent_file; 0/omitted timeout → 30 s.
	dir := t.TempDir()
	agent := filepath.Join(dir, "c.md")
	if err := os.WriteFile(agent, []byte("+++\n+++\nSummarize.\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m = decode("--config", "testdata/config/valid/agent.toml", "--agent-file", agent)
	if e := eff(m); e["summarizer_timeout_ms"] != 30000.0 || e["agent_file"] != agent {
		t.Errorf("agent file without timeout: effective = %v", e)
	}
	m = decode("--config", "testdata/config/valid/agent.toml")
	if e := eff(m); e["summarizer_timeout_ms"] != 45000.0 {
		t.Errorf("agent file timeout_ms = 45000: effective = %v", e)
	}
}

func TestCheckExampleConfigIsValid(t *testing.T) {
	chdirRoot(t)
	code, stdout, stderr := ctxctl(t, "check", "--config", "ctxd.example.toml")
	if code != 0 || stdout != "" || stderr != "ctxctl check: OK (checked ctxd.example.toml)\n" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

func TestCheckLayersSystemAndUserFiles(t *testing.T) {
	dir := t.TempDir()
	sys := filepath.Join(dir, "system.toml")
	xdg := filepath.Join(dir, "xdg")
	user := filepath.Join(xdg, "ctxd", "config.toml")
	if err := os.MkdirAll(filepath.Dir(user), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sys, []byte("[workers]\nsize = 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(user, []byte("[workers]\nsize = 2\n[offload]\nbogus = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	e := &env{stdout: &out, stderr: &errb, systemConfig: sys, getenv: func(k string) string {
		if k == "XDG_CONFIG_HOME" {
			return xdg
		}
		return ""
	}}
	if code := runEnv([]string{"ctxctl", "check"}, e); code != 1 {
		t.Fatalf("exit %d, want 1: %s", code, errb.String())
	}
	want := user + ":4:1: offload.bogus: unknown key\nctxctl check: 1 problem\n"
	if errb.String() != want {
		t.Errorf("stderr:\n%s\nwant:\n%s", errb.String(), want)
	}
}

func TestCheckWarningsKeepExitZero(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.toml")
	if err := os.WriteFile(p, []byte("[context_compaction]\nbuffer_tokens = 9000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := ctxctl(t, "check", "--config", p)
	want := p + ":2:1: context_compaction.buffer_tokens: warning: deprecated alias: write trigger = { buffer_tokens = N } instead\nctxctl check: OK (checked " + p + ")\n"
	if code != 0 || stderr != want {
		t.Errorf("exit %d, stderr:\n%s\nwant:\n%s", code, stderr, want)
	}
}

func TestUsageErrorsExitTwo(t *testing.T) {
	tests := []struct {
		name string
		args []string
		msg  string
	}{
		{"no command", nil, "missing command"},
		{"unknown command", []string{"chek"}, `unknown command "chek"`},
		{"unknown flag", []string{"check", "--bogus"}, "flag provided but not defined: -bogus"},
		{"positional argument", []string{"check", "ctxd.toml"}, "check takes no arguments"},
		{"flag after argument", []string{"check", "x.toml", "--json"}, "flags must come before arguments"},
		{"global flag after command is unknown", []string{"check", "--config"}, "flag needs an argument"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := ctxctl(t, tt.args...)
			if code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if stdout != "" || !strings.Contains(stderr, tt.msg) {
				t.Errorf("stdout %q, stderr %q; want stderr containing %q", stdout, stderr, tt.msg)
			}
		})
	}
}

func TestHelpExitsZero(t *testing.T) {
	code, stdout, _ := ctxctl(t, "check", "--help")
	if code != 0 || !strings.Contains(stdout, "--agent-file") {
		t.Errorf("exit %d, stdout %q", code, stdout)
	}
}

func TestConfigFlagKeepsCommas(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a,b.toml")
	if err := os.WriteFile(p, []byte("[workers]\nsize = 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := ctxctl(t, "check", "--config", p); code != 0 {
		t.Errorf("exit %d: %s", code, stderr)
	}
}

// TestCheckReportsEverything: a missing agent file is reported
// together with the configuration's other problems, and an offload
// directory that cannot be created is a problem naming the key.
func TestCheckReportsEverything(t *testing.T) {
	dir := t.TempDir()
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(dir, "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, toml string
		want       []string
	}{
		{"agent file and bad key", "[compaction]\nagent_file = \"missing.md\"\n[workers]\nsize = 0\n",
			[]string{"workers.size: must be at least 1", "missing.md: cannot read: no such file or directory", "2 problems"}},
		{"offload dir under a file", "[offload]\ndir = \"" + filepath.Join(notDir, "off") + "\"\n",
			[]string{"offload.dir: offload directory " + filepath.Join(notDir, "off") + " cannot be created: " + notDir + " is not a directory", "1 problem"}},
		{"data dir under a file", "[storage]\ndata_dir = \"" + filepath.Join(notDir, "data") + "\"\n",
			[]string{"storage.data_dir: offload directory " + filepath.Join(notDir, "data", "offload") + " cannot be created", "1 problem"}},
		// ctxd refuses to start on a data directory or offload.dir others
		// can enter: check says so before.
		{"data dir open to others", "[storage]\ndata_dir = \"" + open + "\"\n",
			[]string{"storage.data_dir: data directory " + open + " is mode 0755", "chmod 700 " + open, "1 problem"}},
		{"offload dir open to others", "[offload]\ndir = \"" + open + "\"\n",
			[]string{"offload.dir: offload directory " + open + " is mode 0755", "1 problem"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.toml")
			if err := os.WriteFile(path, []byte(tc.toml), 0o600); err != nil {
				t.Fatal(err)
			}
			code, _, stderr := ctxctl(t, "check", "--config", path)
			if code != 1 {
				t.Errorf("exit %d, want 1", code)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
		})
	}
	// A creatable directory is fine.
	path := filepath.Join(dir, "ok.toml")
	if err := os.WriteFile(path, []byte("[offload]\ndir = \""+filepath.Join(dir, "a", "b")+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := ctxctl(t, "check", "--config", path); code != 0 {
		t.Errorf("exit %d for a creatable offload dir:\n%s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "a")); err == nil {
		t.Error("check created the offload directory; it must create nothing")
	}
}

// TestDoctorDiskLow: doctor's disk line says what a low disk stops.
func TestDoctorDiskLow(t *testing.T) {
	var b bytes.Buffer
	writeDoctor(&b, &doctorReport{Daemon: doctorDaemon{Reachable: true, Socket: "s", Status: &api.Status{Disk: []api.Disk{
		{Name: "data", Dir: "/d", FreeBytes: 3 << 20, ReserveBytes: 128 << 20, Low: true},
		{Name: "offload", Dir: "/d/offload", FreeBytes: 3 << 20, ReserveBytes: 128 << 20, Low: true},
	}}}})
	for _, w := range []string{
		"disk data: 3.0 MiB free in /d (reserve 128.0 MiB, storage.min_free_bytes): LOW — appends, new sessions and compactions are refused (507 insufficient_storage)",
		"disk offload: 3.0 MiB free in /d/offload (reserve 128.0 MiB, storage.min_free_bytes): LOW — oversized tool results are kept whole",
	} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("doctor lacks %q:\n%s", w, b.String())
		}
	}
}

// TestCheckRefusesUpstreamV1AndBadPorts: ctxctl check used to pass a
// proxy upstream base_url ending in /v1 (the upstream then got
// /v1/v1/chat/completions), a NATS server on port 99999 and proxy.listen
// on localhost:99999; each is now an error at file:line:col naming the
// key, exit 1. [storage.nats] under badger only warns.
func TestCheckRefusesUpstreamV1AndBadPorts(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.toml")
	src := "[proxy]\nlisten = \"localhost:99999\"\n[proxy.upstreams.openai]\nbase_url = \"http://127.0.0.1:8000/v1\"\n" +
		"[storage]\nbackend = \"nats\"\n[storage.nats]\nservers = [\"nats://127.0.0.1:99999\"]\n"
	if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := ctxctl(t, "check", "--config", p)
	for _, w := range []string{
		p + ":2:1: proxy.listen: port \"99999\": must be 1 to 65535",
		p + ":4:1: proxy.upstreams.openai.base_url: must not end in /v1",
		"drop the /v1",
		p + ":8:1: storage.nats.servers[0]: port \"99999\": must be 1 to 65535",
	} {
		if !strings.Contains(stderr, w) {
			t.Errorf("missing %q in:\n%s", w, stderr)
		}
	}
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}

	if err := os.WriteFile(p, []byte("[storage.nats]\nservers = [\"nats://n:4222\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = ctxctl(t, "check", "--config", p)
	if code != 0 || !strings.Contains(stderr, p+":1:10: storage.nats: warning: is ignored") {
		t.Errorf("exit %d, stderr:\n%s", code, stderr)
	}
}

// TestCheckRefusesUnsetSecretEnvs: check fails, naming the key, when
// storage.nats.token_env names a variable unset in its environment — the
// daemon would refuse to start — and passes once it is set.
func TestCheckRefusesUnsetSecretEnvs(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.toml")
	src := "[storage]\nbackend = \"nats\"\n[storage.nats]\nservers = [\"nats://n:4222\"]\ntoken_env = \"CTXD_NATS_TOKEN\"\n"
	if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(vars map[string]string) (int, string) {
		var out, errb bytes.Buffer
		xdg := t.TempDir()
		e := &env{stdout: &out, stderr: &errb, getenv: func(k string) string {
			if k == "XDG_CONFIG_HOME" {
				return xdg
			}
			return vars[k]
		}}
		return runEnv([]string{"ctxctl", "check", "--config", p}, e), errb.String()
	}
	code, stderr := run(nil)
	for _, w := range []string{
		p + ": storage.nats.token_env: names CTXD_NATS_TOKEN, which is unset or empty here",
	} {
		if !strings.Contains(stderr, w) {
			t.Errorf("missing %q in:\n%s", w, stderr)
		}
	}
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if code, stderr := run(map[string]string{"CTXD_NATS_TOKEN": "s3cret"}); code != 0 || strings.Contains(stderr, "s3cret") {
		t.Errorf("with the token set: exit %d:\n%s", code, stderr)
	}
}

// TestCheckFleetNodeExampleIsValid: contrib/ctxd-fleet-node.toml, the
// fleet node of docs/operating.md, passes check in an environment with its
// two tokens set.
func TestCheckFleetNodeExampleIsValid(t *testing.T) {
	chdirRoot(t)
	var out, errb bytes.Buffer
	xdg := t.TempDir()
	vars := map[string]string{"XDG_CONFIG_HOME": xdg, "CTXD_AUTH_TOKEN": "0123456789abcdef0123", "CTXD_NATS_TOKEN": "nats-secret"}
	e := &env{stdout: &out, stderr: &errb, getenv: func(k string) string { return vars[k] }}
	if code := runEnv([]string{"ctxctl", "check", "--config", "contrib/ctxd-fleet-node.toml"}, e); code != 0 || errb.String() != "ctxctl check: OK (checked contrib/ctxd-fleet-node.toml)\n" {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
}

// `ctxctl check --json` on an invalid configuration prints every problem
// as JSON on stdout (as stderr lists them) and exits 1; a valid one says
// "valid": true.
func TestCheckJSONPrintsProblems(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(bad, []byte("[workers]\nsize = 0\n[offload]\nbogus = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := ctxctl(t, "check", "--json", "--config", bad)
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr %s", code, stderr)
	}
	var doc struct {
		Valid    *bool            `json:"valid"`
		Problems []map[string]any `json:"problems"`
	}
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%q", err, stdout)
	}
	if doc.Valid == nil || *doc.Valid || len(doc.Problems) != 2 {
		t.Fatalf("document %s", stdout)
	}
	for _, p := range doc.Problems {
		if p["file"] != bad || p["line"] == nil || p["key"] == "" || p["message"] == "" || !strings.Contains(stderr, p["key"].(string)) {
			t.Errorf("problem %v (stderr %s)", p, stderr)
		}
	}
	chdirRoot(t)
	code, stdout, _ = ctxctl(t, "check", "--json", "--config", "testdata/config/valid/minimal.toml")
	if code != 0 || !strings.HasPrefix(stdout, "{\n  \"valid\": true,") {
		t.Errorf("valid configuration: exit %d, %.80q", code, stdout)
	}
}
