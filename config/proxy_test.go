package config

import (
	"strings"
	"testing"
)

func TestRuleProxy(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{name: "defaults", src: "[proxy]\n"},
		{name: "ipv6 loopback", src: "[proxy]\nlisten = \"[::1]:9000\"\n"},
		{name: "upstream", src: "[proxy.upstreams.anthropic]\nbase_url = \"http://127.0.0.1:9999\"\n"},
		{name: "not loopback", src: "[proxy]\nlisten = \"0.0.0.0:7420\"\n",
			key: "proxy.listen", pos: "2:1", msg: "not a loopback address"},
		{name: "no port", src: "[proxy]\nlisten = \"127.0.0.1\"\n",
			key: "proxy.listen", pos: "2:1", msg: "host:port"},
		{name: "bad url", src: "[proxy.upstreams.anthropic]\nbase_url = \"api.anthropic.com\"\n",
			key: "proxy.upstreams.anthropic.base_url", pos: "2:1", msg: "absolute http"},
		{name: "openai upstream", src: "[proxy.upstreams.openai]\nbase_url = \"http://127.0.0.1:8000\"\n"},
		{name: "bad openai url", src: "[proxy.upstreams.openai]\nbase_url = \"api.openai.com\"\n",
			key: "proxy.upstreams.openai.base_url", pos: "2:1", msg: "absolute http"},
		{name: "unknown upstream", src: "[proxy.upstreams.gemini]\nbase_url = \"https://x\"\n",
			key: "proxy.upstreams.gemini", pos: "1:2", msg: "unknown table"},
		{name: "summarizer", src: "[proxy]\nsummarizer = \"daemon\"\n",
			key: "proxy.summarizer", pos: "2:1", msg: "got \"daemon\""},
		{name: "routable behind a frontend", src: "[proxy]\nlisten = \"0.0.0.0:7420\"\nauth = \"frontend\"\n"},
		{name: "routable with the daemon's token", src: "[daemon]\nauth_token_env = \"CTXD_AUTH_TOKEN\"\n[proxy]\nlisten = \"10.0.0.5:7420\"\nauth = \"token\"\n"},
		{name: "token without the daemon's token", src: "[proxy]\nlisten = \"10.0.0.5:7420\"\nauth = \"token\"\n",
			key: "proxy.auth", pos: "3:1", msg: "daemon.auth_token_env"},
		{name: "not loopback names the way out", src: "[proxy]\nlisten = \"10.0.0.5:7420\"\n",
			key: "proxy.listen", pos: "2:1", msg: "proxy.auth = \"token\""},
		{name: "bad auth", src: "[proxy]\nauth = \"mtls\"\n",
			key: "proxy.auth", pos: "2:1", msg: "got \"mtls\""},
		{name: "observe mode", src: "[proxy]\nmode = \"observe\"\n"},
		{name: "proxy memory under 1 MiB", src: "[proxy]\nmemory_bytes = 65536\n",
			key: "proxy.memory_bytes", pos: "2:1", msg: "must be at least 1048576"},
		{name: "proxy memory", src: "[proxy]\nmemory_bytes = 1048576\n"},
		{name: "bad mode", src: "[proxy]\nmode = \"shadow\"\n",
			key: "proxy.mode", pos: "2:1", msg: "got \"shadow\""},
		{name: "a price", src: "[models.\"claude-opus-4-8\".price]\ninput = 4.5\ncache_write_5m = 5.6\ncache_write_1h = 9\ncache_read = 0.45\noutput = 22\n"},
		{name: "a negative price", src: "[models.\"claude-opus-4-8\".price]\ninput = -1\n",
			key: "models.claude-opus-4-8.price.input", pos: "2:1", msg: "US dollars per million tokens"},
	})
}

func TestProxyDefaultsAndOmittedKeys(t *testing.T) {
	cfg, _, problems := loadSrc(t, "[proxy.upstreams.anthropic]\nbase_url = \"http://127.0.0.1:9\"\n")
	if len(problems) > 0 {
		t.Fatal(dump(problems))
	}
	p := cfg.Proxy
	if !p.Enabled || p.Listen != DefaultProxyListen || p.Summarizer != ProxySummarizerClient ||
		p.Upstreams.Anthropic.BaseURL != "http://127.0.0.1:9" || p.Upstreams.Anthropic.HeaderTimeoutMS != DefaultHeaderTimeoutMS {
		t.Errorf("proxy = %+v", p)
	}
	if p.Upstreams.OpenAI.BaseURL != DefaultOpenAIBaseURL || p.Upstreams.OpenAI.HeaderTimeoutMS != DefaultHeaderTimeoutMS {
		t.Errorf("openai upstream = %+v", p.Upstreams.OpenAI)
	}
	if d := Defaults().Proxy; d.Upstreams.Anthropic.BaseURL != DefaultAnthropicBaseURL || !d.Enabled {
		t.Errorf("defaults = %+v", d)
	}
}

// TestRuleBaseURLHasNoUserInfoQueryOrFragment (docs/decisions.md "URLs carry no
// credentials"): a base_url with user:pass@ was shown by status and doctor, one
// with a query was mangled by the appended API path. Both tables refuse user
// info, a query and a fragment at the key's position, never repeating the URL
// (it may hold a password).
func TestRuleBaseURLHasNoUserInfoQueryOrFragment(t *testing.T) {
	binding := func(u string) string {
		return "[[summarizer.bindings]]\nname = \"gw\"\nprovider = \"anthropic\"\nmodel = \"m\"\nbase_url = \"" + u + "\"\napi_key_env = \"K\"\n"
	}
	upstream := func(u string) string { return "[proxy.upstreams.anthropic]\nbase_url = \"" + u + "\"\n" }
	runRuleCases(t, []ruleCase{
		{name: "binding with a path", src: binding("https://gateway.example/anthropic")},
		{name: "binding user info", src: binding("https://user:s3cr3t-pass@gateway.example"),
			key: "summarizer.bindings[0].base_url", pos: "5:1", msg: "must not carry user info"},
		{name: "binding user only", src: binding("https://user@gateway.example"),
			key: "summarizer.bindings[0].base_url", pos: "5:1", msg: "must not carry user info"},
		{name: "binding query", src: binding("https://gateway.example/v?key=1"),
			key: "summarizer.bindings[0].base_url", pos: "5:1", msg: "must not have a query"},
		{name: "binding empty query", src: binding("https://gateway.example/?"),
			key: "summarizer.bindings[0].base_url", pos: "5:1", msg: "must not have a query"},
		{name: "binding fragment", src: binding("https://gateway.example/#x"),
			key: "summarizer.bindings[0].base_url", pos: "5:1", msg: "must not have a fragment"},
		{name: "upstream user info", src: upstream("http://user:s3cr3t-pass@127.0.0.1:9"),
			key: "proxy.upstreams.anthropic.base_url", pos: "2:1", msg: "must not carry user info"},
		{name: "upstream query", src: upstream("http://127.0.0.1:9?a=b"),
			key: "proxy.upstreams.anthropic.base_url", pos: "2:1", msg: "must not have a query"},
		{name: "upstream fragment", src: upstream("http://127.0.0.1:9#frag"),
			key: "proxy.upstreams.anthropic.base_url", pos: "2:1", msg: "must not have a fragment"},
	})
	_, _, problems := loadSrc(t, binding("https://user:s3cr3t-pass@gateway.example")+upstream("http://u:s3cr3t-pass@127.0.0.1:9"))
	if len(problems) != 2 {
		t.Fatalf("want 2 problems, got:\n%s", dump(problems))
	}
	for _, p := range problems {
		if strings.Contains(p.String(), "s3cr3t") {
			t.Errorf("problem repeats the password: %s", p)
		}
	}
}

// TestRuleUpstreamBaseURLWithoutV1: a proxy
// upstream's base_url ending in /v1 made the upstream receive
// /v1/v1/chat/completions (the proxy appends the client's whole path). It
// is refused at the key's position, saying to drop the /v1; a binding's
// base_url keeps accepting it (the summarizer does not double it).
func TestRuleUpstreamBaseURLWithoutV1(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{name: "openai v1", src: "[proxy.upstreams.openai]\nbase_url = \"http://127.0.0.1:8000/v1\"\n",
			key: "proxy.upstreams.openai.base_url", pos: "2:1", msg: "drop the /v1"},
		{name: "openai v1 slash", src: "[proxy.upstreams.openai]\nbase_url = \"http://127.0.0.1:8000/v1/\"\n",
			key: "proxy.upstreams.openai.base_url", pos: "2:1", msg: "/v1/v1/"},
		{name: "anthropic v1", src: "\n[proxy.upstreams.anthropic]\nbase_url = \"https://gw.example/anthropic/v1\"\n",
			key: "proxy.upstreams.anthropic.base_url", pos: "3:1", msg: "drop the /v1"},
		{name: "anthropic gateway path", src: "[proxy.upstreams.anthropic]\nbase_url = \"https://gw.example/anthropic\"\n"},
		{name: "v1beta is not v1", src: "[proxy.upstreams.openai]\nbase_url = \"https://gw.example/v1beta\"\n"},
		{name: "binding v1", src: "[[summarizer.bindings]]\nname = \"local\"\nprovider = \"openai\"\nmodel = \"m\"\nbase_url = \"http://127.0.0.1:8000/v1\"\napi_key_env = \"K\"\n"},
	})
}

// TestRuleListenPort: a listen port above 65535 passed check
// and ctxd failed at start; 0 (any free port) stays accepted.
func TestRuleListenPort(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{name: "proxy port too big", src: "[proxy]\nlisten = \"localhost:99999\"\n",
			key: "proxy.listen", pos: "2:1", msg: "must be 1 to 65535"},
		{name: "proxy port not a number", src: "[proxy]\nlisten = \"localhost:http\"\n",
			key: "proxy.listen", pos: "2:1", msg: "must be 1 to 65535"},
		{name: "proxy port 0", src: "[proxy]\nlisten = \"127.0.0.1:0\"\n"},
		{name: "proxy port max", src: "[proxy]\nlisten = \"127.0.0.1:65535\"\n"},
		{name: "daemon port too big", src: "[daemon]\nlisten = \"127.0.0.1:70000\"\nauth_token_env = \"T\"\n",
			key: "daemon.listen", pos: "2:1", msg: "must be 1 to 65535"},
	})
}
