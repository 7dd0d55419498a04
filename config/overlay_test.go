package config

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// overlayBase is a daemon configuration with the capabilities an overlay
// must not reach: two bindings with keys and URLs, an agent file, an
// offload directory, a listener.
const overlayBase = `
[compaction]
agent_file = "/srv/ctxd/compaction.md"
[offload]
dir = "/srv/ctxd/offload"
[[summarizer.bindings]]
name = "primary"
provider = "anthropic"
model = "claude-sonnet-4-5"
api_key_env = "ANTHROPIC_API_KEY"
[[summarizer.bindings]]
name = "cheap"
provider = "openai"
model = "gpt-4.1-mini"
base_url = "https://llm.internal.example"
api_key_env = "OPENAI_API_KEY"
[[summarizer.bindings]]
name = "local"
provider = "extractive"
[daemon]
listen = "127.0.0.1:7411"
auth_token_env = "CTXD_AUTH_TOKEN"
`

func overlayBaseConfig(t *testing.T) Config {
	t.Helper()
	base, _, err := Load(Options{Files: []string{writeTemp(t, "c.toml", overlayBase)}})
	if err != nil {
		t.Fatal(err)
	}
	return base
}

// TestOverlayRefusesCapabilities (docs/decisions.md "Session overlays
// carry policy, never capabilities"): a
// session overlay that defines a binding with its own URL and key variable,
// points agent_file at any file or offload.dir at any directory — or
// reaches the listener, storage or pool — is refused, naming the key.
func TestOverlayRefusesCapabilities(t *testing.T) {
	base := overlayBaseConfig(t)
	cases := []struct {
		name, overlay, want string
	}{
		{"a binding of its own (the exfiltration)", "[offload]\nmax_chars = 20000\n[[summarizer.bindings]]\nname = \"x\"\nprovider = \"anthropic\"\nmodel = \"m\"\nbase_url = \"http://127.0.0.1:9\"\napi_key_env = \"CTXD_AUTH_TOKEN\"\n",
			"session overlay:3:1: summarizer.bindings: not allowed in a session overlay"},
		{"bindings as a dotted key", "summarizer.bindings = [{ name = \"x\", provider = \"openai\", model = \"m\", api_key_env = \"ANTHROPIC_API_KEY\" }]\n",
			"session overlay:1:1: summarizer.bindings: not allowed in a session overlay"},
		{"the summarizer table inline", "summarizer = { bindings = [] }\n",
			"session overlay:1:1: summarizer: not allowed in a session overlay"},
		{"an empty summarizer table", "[summarizer]\n",
			"session overlay:1:1: summarizer: not allowed in a session overlay"},
		{"any file as the agent file", "[compaction]\nshape = \"simple\"\nagent_file = \"/root/secret.md\"\n",
			"session overlay:3:1: compaction.agent_file: not allowed in a session overlay"},
		{"any directory for offloads", "[offload]\ndir = \"/tmp/elsewhere\"\n",
			"session overlay:2:1: offload.dir: not allowed in a session overlay"},
		{"offload.dir as a dotted key", "offload.dir = \"/tmp/elsewhere\"\n",
			"session overlay:1:1: offload.dir: not allowed in a session overlay"},
		{"offload inline", "offload = { max_chars = 100, dir = \"/tmp/x\" }\n",
			"session overlay:1:30: offload.dir: not allowed in a session overlay"},
		{"the listener", "[daemon]\nlisten = \"0.0.0.0:1\"\n",
			"session overlay:1:1: daemon: not allowed in a session overlay"},
		{"storage", "storage.data_dir = \"/tmp/x\"\n",
			"session overlay:1:1: storage.data_dir: not allowed in a session overlay"},
		{"the fleet's NATS cluster", "[storage.nats]\nservers = [\"nats://evil.example:4222\"]\n",
			"session overlay:1:1: storage.nats: not allowed in a session overlay"},
		{"the storage backend", "storage.backend = \"nats\"\n",
			"session overlay:1:1: storage.backend: not allowed in a session overlay"},
		{"workers", "[workers]\nsize = 256\n",
			"session overlay:1:1: workers: not allowed in a session overlay"},
		{"a model's calibration", "[models.\"gpt-4o\"]\ncontext_limit = 64000\ntoken_factor = 9.0\n",
			`session overlay:3:1: models.gpt-4o.token_factor: not allowed in a session overlay`},
		{"a model's thinking binding", "models.mine = { context_limit = 4096, thinking_binding = true }\n",
			"session overlay:1:39: models.mine.thinking_binding: not allowed in a session overlay"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ApplyOverlay(base, []byte(tc.overlay), OverlayName)
			ps := problemsOf(t, err)
			if len(ps) != 1 || ps[0].String() != tc.want {
				t.Fatalf("problems:\n%swant exactly:\n%s", dump(ps), tc.want)
			}
		})
	}
	// The same keys are fine in the daemon's own files.
	if _, _, ps := loadSrc(t, "[offload]\ndir = \"/tmp/x\"\n[compaction]\nagent_file = \"/tmp/a.md\"\n"); len(ps) > 0 {
		t.Fatalf("a file may set paths:\n%s", dump(ps))
	}
}

// TestOverlayPolicyApplies: every key of the allow-list is accepted, and an
// authored [compaction] or [offload] table keeps the daemon's paths; a
// model entry keeps everything but its context_limit.
func TestOverlayPolicyApplies(t *testing.T) {
	base := overlayBaseConfig(t)
	overlay := `
[context_compaction]
auto = false
trigger = { buffer_tokens = 20000 }
max_summary_bytes = 4096
keep_recent_tokens = 0
[compaction]
shape = "keep-tail"
binding = "cheap"
[offload]
enabled = true
max_chars = 8000
keep_head = 1000
keep_tail = 500
exclude = ["read", "cat"]
[context_editing]
enabled = true
mode = "auto"
keep_recent_turns = 5
min_chars_to_elide = 10
max_total_tool_result_chars = 100
min_chars_per_pass = 10
protect_tool_names = ["todo"]
artifact_read_tools = ["read"]
[models."claude-sonnet-4-5-20250929"]
context_limit = 100000
[models.mine]
context_limit = 4096
`
	got, _, err := ApplyOverlay(base, []byte(overlay), OverlayName)
	if err != nil {
		t.Fatal(err)
	}
	if got.Compaction.AgentFile != "/srv/ctxd/compaction.md" || got.Offload.Dir != "/srv/ctxd/offload" {
		t.Errorf("the daemon's paths were reset by authored tables: agent_file %q, offload.dir %q", got.Compaction.AgentFile, got.Offload.Dir)
	}
	if got.Offload.MaxChars != 8000 || got.ContextCompaction.Auto || got.ContextEditing.Mode != EditModeAuto {
		t.Errorf("policy not applied: %+v %+v %+v", got.Offload, got.ContextCompaction, got.ContextEditing)
	}
	m := got.Models["claude-sonnet-4-5-20250929"]
	if m.ContextLimit != 100000 || !m.ThinkingBinding || m.TokenFactor != 1.35 || !m.ServerContextEditing {
		t.Errorf("overlay model entry lost the catalog's facts: %+v", m)
	}
	if m := got.Models["mine"]; m.ContextLimit != 4096 || m.TokenFactor != DefaultModelTokenFactor {
		t.Errorf("new model entry: %+v", m)
	}
	var names []string
	for _, b := range got.SummarizerBindings() {
		names = append(names, b.Name)
	}
	if !slices.Equal(names, []string{"cheap", "local"}) {
		t.Errorf("binding = \"cheap\" tries %v, want [cheap local]", names)
	}
	if len(got.Summarizer.Bindings) != 3 || got.Daemon.Listen != base.Daemon.Listen {
		t.Errorf("capabilities changed: %+v %+v", got.Summarizer, got.Daemon)
	}
}

// TestCompactionBinding: compaction.binding must name a binding the
// daemon's files define, in a file or an overlay; with none configured,
// only the default "extractive".
func TestCompactionBinding(t *testing.T) {
	base := overlayBaseConfig(t)
	_, _, err := ApplyOverlay(base, []byte("[compaction]\nbinding = \"mine\"\n"), OverlayName)
	ps := problemsOf(t, err)
	want := `session overlay:2:1: compaction.binding: no summarizer binding is named "mine": choose one of ["primary" "cheap" "local"] (summarizer.bindings in the daemon's files)`
	if len(ps) != 1 || ps[0].String() != want {
		t.Errorf("problems:\n%swant:\n%s", dump(ps), want)
	}
	runRuleCases(t, []ruleCase{
		{name: "default binding", src: "[compaction]\nbinding = \"extractive\"\n"},
		{name: "unknown without bindings", src: "[compaction]\nbinding = \"primary\"\n", key: "compaction.binding", pos: "2:1", msg: `no summarizer binding is named "primary"`},
		{name: "a defined one", src: "[compaction]\nbinding = \"b\"\n[[summarizer.bindings]]\nname = \"a\"\nprovider = \"extractive\"\n[[summarizer.bindings]]\nname = \"b\"\nprovider = \"extractive\"\n"},
	})
	cfg := Defaults()
	cfg.Compaction.Binding = "extractive"
	if got := cfg.SummarizerBindings(); got != nil {
		t.Errorf("no bindings configured: %v, want nil (the summarizer's default)", got)
	}
}

// TestOverlayKeysDoc: docs/config.md's overlay table lists exactly
// OverlayKeys, in order.
func TestOverlayKeysDoc(t *testing.T) {
	b, err := os.ReadFile("../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "<!-- overlay-keys:begin -->")
	table, _, ok2 := strings.Cut(table, "<!-- overlay-keys:end -->")
	if !ok || !ok2 {
		t.Fatal("docs/config.md has no <!-- overlay-keys:begin/end --> table")
	}
	row := regexp.MustCompile("(?m)^\\| `([^`]+)` \\|")
	var doc []string
	for _, m := range row.FindAllStringSubmatch(table, -1) {
		doc = append(doc, m[1])
	}
	if want := OverlayKeys(); !slices.Equal(doc, want) {
		t.Errorf("docs/config.md overlay table lists\n%q\nthe code allows\n%q", doc, want)
	}
}
