package config

import (
	"strings"
	"testing"
)

func TestRuleTriggerExactlyOneOfPercentOrBufferTokens(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{name: "percent 1", src: "[context_compaction]\ntrigger = { percent = 1 }\n"},
		{name: "percent 99", src: "[context_compaction]\ntrigger = { percent = 99 }\n"},
		{name: "buffer 1", src: "[context_compaction]\ntrigger = { buffer_tokens = 1 }\n"},
		{name: "dotted percent", src: "[context_compaction]\ntrigger.percent = 50\n"},
		{name: "percent 0", src: "[context_compaction]\ntrigger = { percent = 0 }\n",
			key: "context_compaction.trigger.percent", pos: "2:13", msg: "1..=99"},
		{name: "percent 100", src: "[context_compaction]\ntrigger = { percent = 100 }\n",
			key: "context_compaction.trigger.percent", pos: "2:13", msg: "1..=99"},
		{name: "buffer 0", src: "[context_compaction]\ntrigger = { buffer_tokens = 0 }\n",
			key: "context_compaction.trigger.buffer_tokens", pos: "2:13", msg: "> 0"},
		{name: "both", src: "[context_compaction]\ntrigger = { percent = 50, buffer_tokens = 10 }\n",
			key: "context_compaction.trigger", pos: "2:1", msg: "exactly one"},
		{name: "neither", src: "[context_compaction]\ntrigger = {}\n",
			key: "context_compaction.trigger", pos: "2:1", msg: "exactly one"},
		{name: "negative percent", src: "[context_compaction]\ntrigger = { percent = -5 }\n",
			key: "context_compaction.trigger.percent", pos: "2:23", msg: "negative"},
		{name: "unknown key in trigger", src: "[context_compaction]\ntrigger = { pct = 5 }\n",
			key: "context_compaction.trigger.pct", pos: "2:13", msg: "unknown key"},
		{name: "trigger not a table", src: "[context_compaction]\ntrigger = 70\n",
			key: "context_compaction.trigger", pos: "2:11", msg: "expected a table, got an integer"},
	})
}

func TestRuleTriggerAuthoredReplacesDefaultWhole(t *testing.T) {
	cfg, _, problems := loadSrc(t, "[context_compaction]\ntrigger = { buffer_tokens = 20000 }\n")
	if len(problems) > 0 {
		t.Fatal(dump(problems))
	}
	if got := cfg.ContextCompaction.Trigger; got != (Trigger{BufferTokens: 20000}) {
		t.Errorf("trigger = %+v, want only buffer_tokens 20000", got)
	}
}

func TestRuleLegacyBufferTokensAlias(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{name: "alone is valid", src: "[context_compaction]\nbuffer_tokens = 13000\n"},
		{name: "zero", src: "[context_compaction]\nbuffer_tokens = 0\n",
			key: "context_compaction.buffer_tokens", pos: "2:1", msg: "> 0"},
		{name: "with trigger", src: "[context_compaction]\ntrigger = { percent = 70 }\nbuffer_tokens = 13000\n",
			key: "context_compaction.buffer_tokens", pos: "3:1", msg: "keep only trigger"},
	})
	cfg, warnings, problems := loadSrc(t, "[context_compaction]\nbuffer_tokens = 13000\n")
	if len(problems) > 0 {
		t.Fatal(dump(problems))
	}
	if got := cfg.ContextCompaction; got.Trigger != (Trigger{BufferTokens: 13000}) || got.BufferTokens != 0 {
		t.Errorf("legacy alias not folded into trigger: %+v", got)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0].Message, "deprecated") {
		t.Errorf("want one deprecation warning, got %v", warnings)
	}
}

func TestRuleMaxSummaryBytesRange(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{name: "1", src: "[context_compaction]\nmax_summary_bytes = 1\n"},
		{name: "2 MiB", src: "[context_compaction]\nmax_summary_bytes = 2097152\n"},
		{name: "0", src: "[context_compaction]\nmax_summary_bytes = 0\n",
			key: "context_compaction.max_summary_bytes", pos: "2:1", msg: "1..=2097152"},
		{name: "2 MiB + 1", src: "[context_compaction]\nmax_summary_bytes = 2097153\n",
			key: "context_compaction.max_summary_bytes", pos: "2:1", msg: "1..=2097152"},
		{name: "string", src: "[context_compaction]\nmax_summary_bytes = \"1MB\"\n",
			key: "context_compaction.max_summary_bytes", pos: "2:21", msg: "expected a non-negative integer, got a string"},
	})
}

func TestRuleKeepRecentTokensIsU64(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{name: "0 disables retention", src: "[context_compaction]\nkeep_recent_tokens = 0\n"},
		{name: "max int64", src: "[context_compaction]\nkeep_recent_tokens = 9223372036854775807\n"},
		{name: "negative", src: "[context_compaction]\nkeep_recent_tokens = -1\n",
			key: "context_compaction.keep_recent_tokens", pos: "2:22", msg: "must not be negative"},
		{name: "float", src: "[context_compaction]\nkeep_recent_tokens = 1.5\n",
			key: "context_compaction.keep_recent_tokens", pos: "2:22", msg: "got a float"},
	})
}

func TestRuleCompactionShape(t *testing.T) {
	var cases []ruleCase
	for _, s := range []string{"auto", "keep-tail", "simple", "server"} {
		cases = append(cases, ruleCase{name: s, src: "[compaction]\nshape = \"" + s + "\"\n"})
	}
	cases = append(cases, ruleCase{name: "unknown", src: "[compaction]\nshape = \"tail\"\n",
		key: "compaction.shape", pos: "2:1", msg: `must be one of "auto", "keep-tail", "simple", "server"`})
	runRuleCases(t, cases)
}

func TestRuleExtractiveSummaryBytes(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{name: "1 KiB", src: "[compaction]\nextractive_summary_bytes = 1024\n"},
		{name: "2 MiB", src: "[compaction]\nextractive_summary_bytes = 2097152\n"},
		{name: "below 1 KiB", src: "[compaction]\nextractive_summary_bytes = 1023\n",
			key: "compaction.extractive_summary_bytes", pos: "2:1", msg: "1024..=2097152"},
		{name: "2 MiB + 1", src: "[compaction]\nextractive_summary_bytes = 2097153\n",
			key: "compaction.extractive_summary_bytes", pos: "2:1", msg: "1024..=2097152"},
		{name: "string", src: "[compaction]\nextractive_summary_bytes = \"10KB\"\n",
			key: "compaction.extractive_summary_bytes", pos: "2:28", msg: "expected a non-negative integer, got a string"},
	})
	// An authored [compaction] that omits the key takes the default.
	cfg, _, problems := loadSrc(t, "[compaction]\nshape = \"simple\"\n")
	if len(problems) > 0 || cfg.Compaction.ExtractiveSummaryBytes != DefaultExtractiveSummaryBytes {
		t.Errorf("omitted key: %d (problems %v), want the default %d", cfg.Compaction.ExtractiveSummaryBytes, problems, DefaultExtractiveSummaryBytes)
	}
}

func TestRuleOffloadHeadPlusTailBelowMaxChars(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{name: "just below", src: "[offload]\nmax_chars = 100\nkeep_head = 60\nkeep_tail = 39\n"},
		{name: "equal", src: "[offload]\nmax_chars = 100\nkeep_head = 60\nkeep_tail = 40\n",
			key: "offload.keep_head", pos: "3:1", msg: "must be less than max_chars"},
		{name: "omitted keys take defaults", src: "[offload]\nmax_chars = 5000\n",
			key: "offload.keep_head", pos: "1:2", msg: "(4000 + 1000) must be less than max_chars (5000)"},
		{name: "tail alone too big", src: "[offload]\nkeep_tail = 12000\n",
			key: "offload.keep_tail", pos: "2:1", msg: "must be less than max_chars"},
		{name: "no overflow", src: "[offload]\nmax_chars = 9223372036854775807\nkeep_head = 9223372036854775807\nkeep_tail = 9223372036854775807\n",
			key: "offload.keep_head", pos: "3:1", msg: "must be less than max_chars"},
		{name: "max_chars 0", src: "[offload]\nmax_chars = 0\nkeep_head = 0\nkeep_tail = 0\n",
			key: "offload.keep_head", pos: "3:1", msg: "must be less than max_chars"},
	})
}

func TestRuleContextEditingMode(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{name: "local", src: "[context_editing]\nmode = \"local\"\n"},
		{name: "server", src: "[context_editing]\nmode = \"server\"\n"},
		{name: "auto", src: "[context_editing]\nmode = \"auto\"\n"},
		{name: "other", src: "[context_editing]\nmode = \"remote\"\n",
			key: "context_editing.mode", pos: "2:1", msg: `"local", "server", "auto"`},
	})
}

func TestRuleProtectToolNamesReplacesDefault(t *testing.T) {
	cfg, _, problems := loadSrc(t, "[context_editing]\nprotect_tool_names = [\"notes\"]\n")
	if len(problems) > 0 {
		t.Fatal(dump(problems))
	}
	if got := strings.Join(cfg.ContextEditing.ProtectToolNames, ","); got != "notes" {
		t.Errorf("protect_tool_names = %q, want only notes (authored list replaces the default)", got)
	}
	cfg, _, _ = loadSrc(t, "[context_editing]\nmode = \"auto\"\n")
	if got := strings.Join(cfg.ContextEditing.ProtectToolNames, ","); got != "todo,plan" {
		t.Errorf("omitted protect_tool_names = %q, want the default todo,plan", got)
	}
}

func TestRuleBindingNeedsNameAndProvider(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{name: "extractive alone", src: "[[summarizer.bindings]]\nname = \"local\"\nprovider = \"extractive\"\n"},
		{name: "missing name", src: "[[summarizer.bindings]]\nprovider = \"extractive\"\n",
			key: "summarizer.bindings[0].name", pos: "", msg: "missing required key"},
		{name: "empty name", src: "[[summarizer.bindings]]\nname = \"\"\nprovider = \"extractive\"\n",
			key: "summarizer.bindings[0].name", pos: "2:1", msg: "must not be empty"},
		{name: "missing provider", src: "[[summarizer.bindings]]\nname = \"a\"\n",
			key: "summarizer.bindings[0].provider", pos: "", msg: "missing required key"},
		{name: "unknown provider", src: "[[summarizer.bindings]]\nname = \"a\"\nprovider = \"gemini\"\n",
			key: "summarizer.bindings[0].provider", pos: "3:1", msg: `"anthropic", "openai", "openai-responses", "extractive"`},
		{name: "second binding indexed", src: "[[summarizer.bindings]]\nname = \"a\"\nprovider = \"extractive\"\n[[summarizer.bindings]]\nname = \"b\"\nprovider = \"x\"\n",
			key: "summarizer.bindings[1].provider", pos: "6:1", msg: "must be one of"},
		{name: "bindings as plain table", src: "[summarizer.bindings]\nname = \"a\"\n",
			key: "summarizer.bindings", pos: "1:2", msg: "[[summarizer.bindings]]"},
		{name: "inline array of tables", src: "[summarizer]\nbindings = [{ name = \"a\", provider = \"extractive\" }, { name = \"b\", provider = \"x\" }]\n",
			key: "summarizer.bindings[1].provider", pos: "2:68", msg: "must be one of"},
	})
}

func TestRuleBindingModelRequiredForRemoteProviders(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{name: "anthropic with model", src: "[[summarizer.bindings]]\nname = \"a\"\nprovider = \"anthropic\"\nmodel = \"claude-haiku-4-5\"\napi_key_env = \"ANTHROPIC_API_KEY\"\n"},
		{name: "anthropic without model", src: "[[summarizer.bindings]]\nname = \"a\"\nprovider = \"anthropic\"\n",
			key: "summarizer.bindings[0].model", pos: "", msg: "needs a model"},
		{name: "openai empty model", src: "[[summarizer.bindings]]\nname = \"a\"\nprovider = \"openai\"\nmodel = \"\"\n",
			key: "summarizer.bindings[0].model", pos: "4:1", msg: "must not be empty"},
		{name: "bad base_url", src: "[[summarizer.bindings]]\nname = \"a\"\nprovider = \"openai\"\nmodel = \"gpt-4.1\"\nbase_url = \"localhost:8080\"\n",
			key: "summarizer.bindings[0].base_url", pos: "5:1", msg: "http or https URL"},
	})
}

func TestRuleAPIKeyEnvIsAVariableName(t *testing.T) {
	const head = "[[summarizer.bindings]]\nname = \"a\"\nprovider = \"openai\"\nmodel = \"gpt-4.1\"\n"
	secret := "sk-proj-Abc123Def456Ghi789Jkl012"
	runRuleCases(t, []ruleCase{
		{name: "name", src: head + "api_key_env = \"OPENAI_API_KEY\"\n"},
		{name: "leading underscore", src: head + "api_key_env = \"_KEY2\"\n"},
		{name: "sk- key", src: head + "api_key_env = \"" + secret + "\"\n",
			key: "summarizer.bindings[0].api_key_env", pos: "5:1", msg: "write that variable's NAME"},
		{name: "long random", src: head + "api_key_env = \"A1b2C3d4E5f6G7h8I9j0K1l2M3n4\"\n",
			key: "summarizer.bindings[0].api_key_env", pos: "5:1", msg: "looks like a secret"},
		{name: "lower case", src: head + "api_key_env = \"openai_key\"\n",
			key: "summarizer.bindings[0].api_key_env", pos: "5:1", msg: "[A-Z_][A-Z0-9_]*"},
		{name: "leading digit", src: head + "api_key_env = \"1KEY\"\n",
			key: "summarizer.bindings[0].api_key_env", pos: "5:1", msg: "[A-Z_][A-Z0-9_]*"},
	})
	_, _, problems := loadSrc(t, head+"api_key_env = \""+secret+"\"\n")
	if strings.Contains(dump(problems), secret) {
		t.Errorf("a problem repeats the secret:\n%s", dump(problems))
	}
}

func TestRuleBindingNamesUnique(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{name: "distinct", src: "[[summarizer.bindings]]\nname = \"a\"\nprovider = \"extractive\"\n[[summarizer.bindings]]\nname = \"b\"\nprovider = \"extractive\"\n"},
		{name: "duplicate", src: "[[summarizer.bindings]]\nname = \"a\"\nprovider = \"extractive\"\n[[summarizer.bindings]]\nname = \"a\"\nprovider = \"extractive\"\n",
			key: "summarizer.bindings[1].name", pos: "5:1", msg: "duplicate binding name \"a\""},
	})
}

func TestRuleModelLimitFactorAndID(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{name: "new model", src: "[models.\"my-llm\"]\ncontext_limit = 32768\n"},
		{name: "int factor", src: "[models.\"my-llm\"]\ncontext_limit = 32768\ntoken_factor = 2\n"},
		{name: "missing limit", src: "[models.\"my-llm\"]\ntoken_factor = 1.2\n",
			key: "models.my-llm.context_limit", pos: "", msg: "missing required key"},
		{name: "zero limit", src: "[models.\"gpt-4.1\"]\ncontext_limit = 0\n",
			key: "models.\"gpt-4.1\".context_limit", pos: "2:1", msg: "must be > 0"},
		{name: "the smallest window", src: "[models.m]\ncontext_limit = 1000\n"},
		{name: "window too small", src: "[models.m]\ncontext_limit = 10\n",
			key: "models.m.context_limit", pos: "2:1", msg: "10 tokens is outside 1000..=100000000"},
		{name: "window too large", src: "[models.m]\ncontext_limit = 100000001\n",
			key: "models.m.context_limit", pos: "2:1", msg: "outside 1000..=100000000"},
		{name: "zero factor", src: "[models.m]\ncontext_limit = 32768\ntoken_factor = 0.0\n",
			key: "models.m.token_factor", pos: "3:1", msg: "from 0.25 to 4"},
		{name: "nan factor", src: "[models.m]\ncontext_limit = 32768\ntoken_factor = nan\n",
			key: "models.m.token_factor", pos: "3:1", msg: "from 0.25 to 4"},
		{name: "inf factor", src: "[models.m]\ncontext_limit = 32768\ntoken_factor = inf\n",
			key: "models.m.token_factor", pos: "3:1", msg: "from 0.25 to 4"},
		{name: "huge factor", src: "[models.m]\ncontext_limit = 32768\ntoken_factor = 1e308\n",
			key: "models.m.token_factor", pos: "3:1", msg: "from 0.25 to 4"},
		{name: "the largest factor", src: "[models.m]\ncontext_limit = 32768\ntoken_factor = 4.0\n"},
		{name: "padded model id", src: "[models.\"claude-opus-4-8 \"]\ncontext_limit = 32768\n",
			key: "models.\"claude-opus-4-8 \"", pos: "1:9", msg: "white space"},
		{name: "empty model id", src: "[models.\"\"]\ncontext_limit = 32768\n",
			key: "models.\"\"", pos: "1:9", msg: "must not be empty"},
		{name: "unknown model key", src: "[models.m]\ncontext_limit = 32768\nwindow = 5\n",
			key: "models.m.window", pos: "3:1", msg: "unknown key"},
	})
}

func TestRuleWorkersBounded(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{name: "1 and 1", src: "[workers]\nsize = 1\nqueue = 1\n"},
		{name: "size 0", src: "[workers]\nsize = 0\n",
			key: "workers.size", pos: "2:1", msg: "at least 1"},
		{name: "queue 0", src: "[workers]\nqueue = 0\n",
			key: "workers.queue", pos: "2:1", msg: "at least 1"},
		{name: "the largest", src: "[workers]\nsize = 256\nqueue = 65536\n"},
		{name: "size too big", src: "[workers]\nsize = 100000000\n",
			key: "workers.size", pos: "2:1", msg: "at most 256"},
		{name: "queue too big", src: "[workers]\nqueue = 100000000000\n",
			key: "workers.queue", pos: "2:1", msg: "at most 65536"},
	})
}

func TestRuleDaemonListenNeedsToken(t *testing.T) {
	runRuleCases(t, []ruleCase{
		// Loopback without a token used to be accepted, and every local
		// user could use the daemon over it.
		{name: "ipv4 loopback without token", src: "[daemon]\nlisten = \"127.0.0.1:7411\"\n",
			key: "daemon.listen", pos: "2:1", msg: "TCP needs a bearer token (every local user can reach a loopback port): set auth_token_env"},
		{name: "ipv6 loopback without token", src: "[daemon]\nlisten = \"[::1]:7411\"\n",
			key: "daemon.listen", pos: "2:1", msg: "TCP needs a bearer token"},
		{name: "localhost without token", src: "[daemon]\nlisten = \"localhost:7411\"\n",
			key: "daemon.listen", pos: "2:1", msg: "TCP needs a bearer token"},
		{name: "ipv4 loopback", src: "[daemon]\nlisten = \"127.0.0.1:7411\"\nauth_token_env = \"CTXD_TOKEN\"\n"},
		{name: "localhost", src: "[daemon]\nlisten = \"localhost:7411\"\nauth_token_env = \"CTXD_TOKEN\"\n"},
		{name: "public with token", src: "[daemon]\nlisten = \"0.0.0.0:7411\"\nauth_token_env = \"CTXD_TOKEN\"\n"},
		{name: "public without token", src: "[daemon]\nlisten = \"0.0.0.0:7411\"\n",
			key: "daemon.listen", pos: "2:1", msg: "not even a loopback address"},
		{name: "all interfaces", src: "[daemon]\nlisten = \":7411\"\n",
			key: "daemon.listen", pos: "2:1", msg: "not even a loopback address"},
		{name: "no port", src: "[daemon]\nlisten = \"127.0.0.1\"\n",
			key: "daemon.listen", pos: "2:1", msg: "host:port"},
		{name: "token env is a secret", src: "[daemon]\nauth_token_env = \"sk-0123456789abcdef0123\"\n",
			key: "daemon.auth_token_env", pos: "2:1", msg: "looks like a secret"},
		{name: "allowed uid negative", src: "[daemon]\nallowed_uids = [1000, -1]\n",
			key: "daemon.allowed_uids[1]", pos: "2:23", msg: "must not be negative"},
		{name: "allowed uid too big", src: "[daemon]\nallowed_uids = [4294967296]\n",
			key: "daemon.allowed_uids[0]", pos: "2:17", msg: "out of range"},
	})
}

func TestRuleStrictUnknownKeysAndTables(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{name: "unknown root key", src: "verbose = true\n",
			key: "verbose", pos: "1:1", msg: "unknown key"},
		{name: "unknown table", src: "[loging]\nlevel = \"debug\"\n",
			key: "loging", pos: "1:2", msg: "unknown table"},
		{name: "typo suggests", src: "[offload]\nkeep_haed = 10\n",
			key: "offload.keep_haed", pos: "2:1", msg: "did you mean keep_head?"},
		{name: "unknown dotted", src: "offload.foo = 1\n",
			key: "offload.foo", pos: "1:1", msg: "unknown key"},
		{name: "unknown sub-table", src: "[offload.limits]\nx = 1\n",
			key: "offload.limits", pos: "1:2", msg: "unknown table"},
		{name: "unknown key in binding", src: "[[summarizer.bindings]]\nname = \"a\"\nprovider = \"extractive\"\ntemperature = 0.2\n",
			key: "summarizer.bindings[0].temperature", pos: "4:1", msg: "unknown key"},
		{name: "syntax error", src: "[offload\n",
			key: "", pos: "1:9", msg: "expected ']'"},
	})
}

func TestRuleTypesFailWithPosition(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{name: "bool as string", src: "[context_compaction]\nauto = \"yes\"\n",
			key: "context_compaction.auto", pos: "2:8", msg: "expected a boolean (true or false), got a string"},
		{name: "string as int", src: "[compaction]\nshape = 3\n",
			key: "compaction.shape", pos: "2:9", msg: "expected a string, got an integer"},
		{name: "list as string", src: "[offload]\nexclude = \"read\"\n",
			key: "offload.exclude", pos: "2:11", msg: "expected an array of strings, got a string"},
		{name: "list element", src: "[context_editing]\nprotect_tool_names = [\"todo\", 7]\n",
			key: "context_editing.protect_tool_names[1]", pos: "2:31", msg: "expected a string, got an integer"},
		{name: "table as value", src: "offload = 3\n",
			key: "offload", pos: "1:11", msg: "expected a table, got an integer"},
		{name: "scalar as table", src: "[compaction.shape]\nx = 1\n",
			key: "compaction.shape", pos: "1:2", msg: "expected a string, got a table"},
		{name: "date", src: "[workers]\nsize = 2024-01-01\n",
			key: "workers.size", pos: "2:8", msg: "got a date-time"},
		{name: "duplicate key", src: "[workers]\nsize = 1\nsize = 2\n",
			key: "workers.size", pos: "3:1", msg: "already set on line 2"},
	})
}

// TestRuleAllProblemsReportedTogether: one file with many independent
// mistakes yields one problem for each, in file order.
func TestRuleAllProblemsReportedTogether(t *testing.T) {
	src := `[context_compaction]
auto = 1
keep_recent_tokens = "many"
colour = "blue"

[offload]
keep_head = 20000

[workers]
size = 0
`
	_, _, problems := loadSrc(t, src)
	var keys []string
	for _, p := range problems {
		keys = append(keys, p.Key)
	}
	want := "context_compaction.auto context_compaction.keep_recent_tokens context_compaction.colour offload.keep_head workers.size"
	if got := strings.Join(keys, " "); got != want {
		t.Errorf("problem keys:\n got %s\nwant %s\n%s", got, want, dump(problems))
	}
}

func TestDefaultsAreValid(t *testing.T) {
	cfg, warnings, err := Load(Options{})
	if err != nil || len(warnings) > 0 {
		t.Fatalf("Load(defaults) = %v, %v", warnings, err)
	}
	if cfg.ContextCompaction.Trigger.Percent != 70 || cfg.ContextCompaction.KeepRecentTokens != 16384 ||
		cfg.ContextCompaction.MaxSummaryBytes != 262144 || !cfg.ContextCompaction.Auto ||
		cfg.Compaction.Shape != "auto" || cfg.Offload.MaxChars != 16000 || cfg.ContextEditing.Mode != "local" ||
		cfg.Workers.Size != 4 || !cfg.Storage.SyncWrites || len(cfg.Summarizer.Bindings) != 0 {
		t.Errorf("defaults differ from docs/design.md §3: %+v", cfg)
	}
	for table, src := range cfg.Sources {
		if src != SourceDefault {
			t.Errorf("Sources[%s] = %q, want default", table, src)
		}
	}
}

// A bad value in a table does not hide the table's other problems: every
// independent problem is reported at once; only problems about the bad
// value itself are suppressed.
func TestRuleTypeErrorDoesNotHideTheTable(t *testing.T) {
	_, _, problems := loadSrc(t, "[context_compaction]\nauto = \"yes\"\ntrigger = { percent = 150 }\n[offload]\nmax_chars = \"big\"\nkeep_head = 5000\nkeep_tail = 20000\n")
	keys := map[string]bool{}
	for _, p := range problems {
		keys[p.Key] = true
	}
	for _, want := range []string{"context_compaction.auto", "context_compaction.trigger.percent", "offload.max_chars"} {
		if !keys[want] {
			t.Errorf("no problem for %s in %+v", want, problems)
		}
	}
	if len(problems) != 4 {
		t.Errorf("%d problems, want 4 (the keep_head + keep_tail rule against the default max_chars too): %+v", len(problems), problems)
	}
}

func TestRuleCompactionFallbackAndKeepFirstRequest(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{name: "extractive", src: "[compaction]\nfallback = \"extractive\"\n"},
		{name: "none", src: "[compaction]\nfallback = \"none\"\n"},
		{name: "unknown", src: "[compaction]\nfallback = \"openai\"\n",
			key: "compaction.fallback", pos: "2:1", msg: `must be "extractive"`},
		{name: "keep_first_request off", src: "[compaction]\nkeep_first_request = false\n"},
		{name: "keep_first_request string", src: "[compaction]\nkeep_first_request = \"yes\"\n",
			key: "compaction.keep_first_request", pos: "2:22", msg: "bool"},
	})
	// An authored [compaction] table takes the defaults for the keys it
	// omits, and so does an overlay (both are policy keys).
	cfg, _, problems := loadSrc(t, "[compaction]\nshape = \"simple\"\n")
	if len(problems) > 0 {
		t.Fatal(dump(problems))
	}
	if !cfg.Compaction.KeepFirstRequest || cfg.Compaction.Fallback != FallbackExtractive || !cfg.ContextEditing.ClearToolInputs {
		t.Fatalf("defaults not taken: %+v %+v", cfg.Compaction, cfg.ContextEditing)
	}
	over, _, err := ApplyOverlay(cfg, []byte("[compaction]\nfallback = \"none\"\nkeep_first_request = false\n[context_editing]\nclear_tool_inputs = false\n"), "session s overlay")
	if err != nil {
		t.Fatal(err)
	}
	if over.Compaction.KeepFirstRequest || over.Compaction.Fallback != FallbackNone || over.ContextEditing.ClearToolInputs {
		t.Fatalf("overlay not applied: %+v %+v", over.Compaction, over.ContextEditing)
	}
}

// trigger = { buffer_tokens = N } with N at or above a catalog model's
// window warns, naming the models; below every window it does not.
func TestRuleBufferTokensAtOrAboveAWindowWarns(t *testing.T) {
	_, warnings, problems := loadSrc(t, "[context_compaction]\ntrigger = { buffer_tokens = 128000 }\n")
	if len(problems) > 0 {
		t.Fatal(dump(problems))
	}
	if len(warnings) != 1 || warnings[0].Key != "context_compaction.trigger.buffer_tokens" ||
		!strings.Contains(warnings[0].Message, "gpt-4o (128000)") || strings.Contains(warnings[0].Message, "claude") {
		t.Fatalf("warnings = %v", warnings)
	}
	if _, warnings, _ := loadSrc(t, "[context_compaction]\ntrigger = { buffer_tokens = 20000 }\n"); len(warnings) != 0 {
		t.Fatalf("warnings = %v", warnings)
	}
}
