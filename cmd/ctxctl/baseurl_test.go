package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckRefusesBaseURLUserInfoQueryFragment (docs/decisions.md "URLs carry
// no credentials"): check refuses a base_url with user info, a query or a
// fragment with file:line:col and the key, and neither check nor doctor prints
// the password.
func TestCheckRefusesBaseURLUserInfoQueryFragment(t *testing.T) {
	const toml = `[[summarizer.bindings]]
name = "gw"
provider = "anthropic"
model = "claude-haiku-4-5"
base_url = "https://alice:s3cr3t-pass@gateway.example"
api_key_env = "K"

[[summarizer.bindings]]
name = "gw2"
provider = "openai"
model = "gpt-4o-mini"
base_url = "https://gateway.example/v1?api-version=2024"
api_key_env = "K"

[proxy.upstreams.openai]
base_url = "http://127.0.0.1:8000/#x"
`
	path := filepath.Join(t.TempDir(), "c.toml")
	if err := os.WriteFile(path, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := ctxctl(t, "check", "--config", path)
	if code != 1 {
		t.Errorf("check exit %d, want 1", code)
	}
	for _, w := range []string{
		path + ":5:1: summarizer.bindings[0].base_url: must not carry user info",
		path + ":12:1: summarizer.bindings[1].base_url: must not have a query",
		path + ":16:1: proxy.upstreams.openai.base_url: must not have a fragment",
		"3 problems",
	} {
		if !strings.Contains(stderr, w) {
			t.Errorf("check stderr lacks %q:\n%s", w, stderr)
		}
	}
	_, dout, derr := ctxctl(t, "doctor", "--config", path)
	for name, out := range map[string]string{"check stdout": stdout, "check stderr": stderr, "doctor stdout": dout, "doctor stderr": derr} {
		if strings.Contains(out, "s3cr3t") || strings.Contains(out, "alice") {
			t.Errorf("%s shows the base_url's user info:\n%s", name, out)
		}
	}
}
