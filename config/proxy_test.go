package config

import "testing"

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
