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
			key: "proxy.summarizer", pos: "2:1", msg: "\"client\""},
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

// TestRuleBaseURLHasNoUserInfoQueryOrFragment (a fresh tester's finding
// 3): a base_url with user:pass@ was shown by status and doctor, one with
// a query was mangled by the appended API path. Both tables refuse user
// info, a query and a fragment at the key's position, never repeating the
// URL (it may hold a password).
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
