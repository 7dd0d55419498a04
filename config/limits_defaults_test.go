package config

import (
	"strings"
	"testing"
	"time"
)

// A zero [proxy.limits] key takes its built-in default; a set one stays.
func TestProxyLimitsWithDefaults(t *testing.T) {
	d := DefaultProxyLimits()
	if got := (ProxyLimits{}).WithDefaults(); got != d {
		t.Fatalf("zero limits with defaults = %+v, want %+v", got, d)
	}
	got := ProxyLimits{BodyBytes: 7, Connections: 3}.WithDefaults()
	want := d
	want.BodyBytes, want.Connections = 7, 3
	if got != want {
		t.Fatalf("WithDefaults = %+v, want %+v", got, want)
	}
}

// An unset upstream is its provider's public endpoint; one that is not an
// absolute http or https URL is refused naming its key.
func TestUpstreamBaseURLs(t *testing.T) {
	a, o, err := Upstreams{}.BaseURLs()
	if err != nil || a.String() != DefaultAnthropicBaseURL || o.String() != DefaultOpenAIBaseURL {
		t.Fatalf("defaults: %v %v %v", a, o, err)
	}
	a, o, err = Upstreams{Anthropic: Upstream{BaseURL: "http://127.0.0.1:9/up"}, OpenAI: Upstream{BaseURL: "https://vllm.example"}}.BaseURLs()
	if err != nil || a.Path != "/up" || o.Host != "vllm.example" {
		t.Fatalf("configured: %v %v %v", a, o, err)
	}
	for _, c := range []struct {
		u   Upstreams
		key string
	}{
		{Upstreams{Anthropic: Upstream{BaseURL: "ftp://x"}}, "proxy.upstreams.anthropic.base_url"},
		{Upstreams{OpenAI: Upstream{BaseURL: "/v1"}}, "proxy.upstreams.openai.base_url"},
	} {
		if _, _, err := c.u.BaseURLs(); err == nil || !strings.Contains(err.Error(), c.key) {
			t.Errorf("%+v: %v, want an error naming %s", c.u, err, c.key)
		}
	}
}

// A zero memory bound and dial timeout are their defaults; set ones stay.
func TestProxyZeroDefaults(t *testing.T) {
	if (Proxy{}).MemoryBound() != DefaultProxyMemoryBytes || (Proxy{MemoryBytes: 2 << 20}).MemoryBound() != 2<<20 {
		t.Error("MemoryBound")
	}
	if (Upstream{}).DialTimeout() != DefaultDialTimeoutMS*time.Millisecond || (Upstream{DialTimeoutMS: 5}).DialTimeout() != 5*time.Millisecond {
		t.Error("DialTimeout")
	}
}
