package identity

import (
	"encoding/json"
	"net/http"
	"testing"
)

// AgentSession reads the agent's session id from the most explicit
// place that names one.
func TestAgentSession(t *testing.T) {
	h := func(kv ...string) http.Header {
		x := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			x.Set(kv[i], kv[i+1])
		}
		return x
	}
	for _, c := range []struct {
		name string
		h    http.Header
		md   string
		want string
	}{
		{"ctxd header first", h(HeaderSession, "mine", HeaderClaudeCodeSession, "cc"), `{"user_id":"{\"session_id\":\"md\"}"}`, "mine"},
		{"claude code header", h(HeaderClaudeCodeSession, "cc"), `{"user_id":"{\"session_id\":\"md\"}"}`, "cc"},
		{"session-id header", h("Session-Id", "codex"), ``, "codex"},
		{"metadata json string", h(), `{"user_id":"{\"device_id\":\"d\",\"session_id\":\"md\"}"}`, "md"},
		{"metadata legacy", h(), `{"user_id":"user_abc_account_def_session_0f0e"}`, "0f0e"},
		{"none", h(), `{"user_id":"someone"}`, ""},
		{"no metadata", h(), ``, ""},
	} {
		if got := AgentSession(c.h, json.RawMessage(c.md)); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// A conversation's key: the same for the same agent session, model and
// tools whatever the messages; another model (a side request) or another
// credential is another conversation. Without an agent session, the first
// message keys it, its cache marker and text form left out.
func TestConversationKey(t *testing.T) {
	secret := []byte("secret")
	tools := json.RawMessage(`[{"name":"Read"}]`)
	a := []json.RawMessage{json.RawMessage(`{"role":"user","content":"hi"}`)}
	b := []json.RawMessage{json.RawMessage(`{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}`)}
	c := []json.RawMessage{json.RawMessage(`{"role":"user","content":"other"}`)}
	if ConversationKey(secret, "fp", "s1", "m", tools, nil, a) != ConversationKey(secret, "fp", "s1", "m", tools, nil, c) {
		t.Error("one agent session, two keys")
	}
	if ConversationKey(secret, "fp", "s1", "m", tools, nil, a) == ConversationKey(secret, "fp", "s1", "small", tools, nil, a) {
		t.Error("a side request on another model has the main conversation's key")
	}
	if ConversationKey(secret, "fp", "s1", "m", tools, nil, a) == ConversationKey(secret, "fp2", "s1", "m", tools, nil, a) {
		t.Error("two credentials, one key")
	}
	if ConversationKey(secret, "fp", "", "m", tools, nil, a) != ConversationKey(secret, "fp", "", "m", tools, nil, b) {
		t.Error("the first message's marker or text form changed the key")
	}
	if ConversationKey(secret, "fp", "", "m", tools, nil, a) == ConversationKey(secret, "fp", "", "m", tools, nil, c) {
		t.Error("two first messages, one key")
	}
	if Fingerprint(secret, http.Header{"X-Api-Key": {"k1"}}) == Fingerprint(secret, http.Header{"X-Api-Key": {"k2"}}) {
		t.Error("two credentials, one fingerprint")
	}
}

// The window a request asks for is one whole number of tokens in the
// accepted range; anything else is refused naming the header.
func TestContextLimit(t *testing.T) {
	for _, c := range []struct {
		vs   []string
		want uint64
		ok   bool
	}{
		{nil, 0, true},
		{[]string{" 200000 "}, 200000, true},
		{[]string{"999"}, 0, false},
		{[]string{"200000", "300000"}, 0, false},
		{[]string{"200k"}, 0, false},
	} {
		h := http.Header{}
		for _, v := range c.vs {
			h.Add(HeaderContextLimit, v)
		}
		n, err := ContextLimit(h)
		if n != c.want || (err == nil) != c.ok {
			t.Errorf("%q: %d, %v", c.vs, n, err)
		}
	}
}

// Anthropic's context-1m beta, anywhere in the anthropic-beta list, asks
// for the 1M window; no beta, or another, asks for none.
func TestWireContextLimit(t *testing.T) {
	for _, c := range []struct {
		betas []string
		want  uint64
	}{
		{nil, 0},
		{[]string{"interleaved-thinking-2025-05-14"}, 0},
		{[]string{"claude-code-20250219,context-1m-2025-08-07"}, 1_000_000},
		{[]string{"a", "context-1m-2025-08-07"}, 1_000_000},
	} {
		if got := WireContextLimit(http.Header{"Anthropic-Beta": c.betas}); got != c.want {
			t.Errorf("%q: %d, want %d", c.betas, got, c.want)
		}
	}
}
