package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/summarizer"
)

// ClientBinding is the name of the summarizer binding a proxied session
// gets: its own upstream, model and client credential (docs/design.md §10).
const ClientBinding = "proxy-client"

// errNoCredential: the session's client credential is not held (the daemon
// restarted since its last request).
var errNoCredential = errors.New("a proxied session is summarized with its client's credential, held in memory only: the compaction waits for the client's next request")

// errNotAccepted: with proxy.summarizer = "bindings", the session's
// client has not shown a credential the upstream accepted.
var errNotAccepted = errors.New("a proxied session is compacted only once the upstream accepted its client's credential: the compaction waits until it has")

// acceptedMax bounds the credential fingerprints remembered as accepted.
const acceptedMax = 4096

// accept remembers that the upstream accepted the credential fp
// (authenticated): its sessions may now be compacted, on the operator's
// bindings too.
func (p *Proxy) accept(fp string) {
	if fp == "" {
		return
	}
	p.acceptedMu.Lock()
	defer p.acceptedMu.Unlock()
	if _, ok := p.accepted[fp]; ok {
		return
	}
	if len(p.accepted) >= acceptedMax {
		for k := range p.accepted {
			delete(p.accepted, k)
			if len(p.accepted) < acceptedMax*3/4 {
				break
			}
		}
	}
	p.accepted[fp] = struct{}{}
}

// isAccepted reports whether the upstream accepted the credential fp since
// the daemon started.
func (p *Proxy) isAccepted(fp string) bool {
	p.acceptedMu.Lock()
	defer p.acceptedMu.Unlock()
	_, ok := p.accepted[fp]
	return ok
}

// heldCredential is a client's credential and prompt prefix, kept in memory
// only, for the summarizer calls of its session: never stored, never
// logged.
type heldCredential struct {
	cred  config.Credential
	model string
	// release releases the credential's hold on the redactor.
	release func()
	// fp is the credential's fingerprint (acceptance, quotas).
	fp string
}

// credentials maps a session id to the credential of its latest request.
type credentials struct {
	mu sync.Mutex
	m  map[string]*heldCredential
}

// holdCredential keeps the credential of a session's latest request.
func (p *Proxy) holdCredential(id string, req *request, h http.Header, fp string) {
	c := &heldCredential{fp: fp, model: req.model, cred: config.Credential{
		APIKey:        h.Get("X-Api-Key"),
		Authorization: h.Get("Authorization"),
		Beta:          h.Get("Anthropic-Beta"),
	}, release: p.red.HoldHeader(h)}
	if req.d == dialectAnthropic || req.d == nil {
		// The summarizer request extends the prefix the provider cached:
		// the client's own system and tools (Messages API only: a Responses
		// client's tools — Codex's free-form tools with their grammars —
		// would make the summary request larger than the request it
		// compacts; ctxd sends the session's function tools instead).
		c.cred.System, c.cred.Tools, c.cred.ToolChoice = req.system, req.tools, bytes.Clone(req.toolChoice)
	}
	if req.d == dialectResponses {
		// The client's instructions and prefix items (developer messages,
		// Codex's additional_tools item: its code-mode tools as the API
		// declares them), byte for byte ahead of the history.
		c.cred.System = req.system
		if req.prefix > 0 {
			c.cred.Prefix = append(append([]byte("["), bytes.Join(bytesOf(req.messages[:req.prefix]), []byte(","))...), ']')
		}
	}
	p.creds.mu.Lock()
	// Kept beyond the request: never the request's bytes, whose buffer
	// is reused (bodybuf.Read); the previous copy when they did not change.
	if old := p.creds.m[id]; old != nil && bytes.Equal(old.cred.System, c.cred.System) {
		c.cred.System = old.cred.System
	} else {
		c.cred.System = bytes.Clone(c.cred.System)
	}
	if old := p.creds.m[id]; old != nil && bytes.Equal(old.cred.Tools, c.cred.Tools) {
		c.cred.Tools = old.cred.Tools
	} else {
		c.cred.Tools = bytes.Clone(c.cred.Tools)
	}
	if _, ok := p.creds.m[id]; !ok && len(p.creds.m) >= maxCredentials {
		// Bounded memory: forget some; their sessions' compactions wait
		// for their clients' next requests, as after a restart.
		for k, old := range p.creds.m {
			old.release()
			delete(p.creds.m, k)
			if len(p.creds.m) < maxCredentials*3/4 {
				break
			}
		}
	}
	if old := p.creds.m[id]; old != nil {
		old.release()
	}
	p.creds.m[id] = c
	p.creds.mu.Unlock()
}

// maxCredentials bounds the credentials held (one per proxied session).
const maxCredentials = 4096

// sessionBindings is the engine's SessionBindingsFunc: a proxied session
// (labelled "proxy") is summarized through its own upstream, model and
// client credential, then the extractive fallback — unless proxy.summarizer
// is "bindings", which keeps the operator's configured bindings.
func (p *Proxy) sessionBindings(id string, labels map[string]string) ([]config.Binding, bool, error) {
	if labels[engine.LabelProxy] == "" {
		return nil, false, nil
	}
	p.creds.mu.Lock()
	c := p.creds.m[id]
	p.creds.mu.Unlock()
	if c != nil && !p.isAccepted(c.fp) {
		// Nothing costs before it is earned: no compaction of a client
		// whose credential the upstream has not accepted — neither on the
		// operator's bindings (proxy.summarizer = "bindings") nor on its
		// own (a window override header of its cannot make ctxd work).
		// A compaction the owner asks for over the daemon API, with no
		// client request held, is the owner's to pay.
		return nil, false, errNotAccepted
	}
	if p.cfg.Summarizer == config.ProxySummarizerBindings {
		return nil, false, nil
	}
	if c == nil {
		return nil, false, errNoCredential
	}
	cred := c.cred
	if labels[engine.LabelProxy] == dialectResponses.Name() {
		// A Responses session (Codex): its summary through the Responses
		// API of its own upstream, the API its model is served on.
		return []config.Binding{
			{Name: ClientBinding, Provider: summarizer.ProviderOpenAIResponses, Model: c.model, BaseURL: p.openai.String(), Credential: &cred},
			{Name: summarizer.ProviderExtractive, Provider: summarizer.ProviderExtractive},
		}, true, nil
	}
	if labels[engine.LabelProxy] != dialectAnthropic.Name() {
		// A Chat session: its summary through Chat Completions, the API
		// every OpenAI-compatible upstream serves.
		return []config.Binding{
			{Name: ClientBinding, Provider: summarizer.ProviderOpenAI, Model: c.model, BaseURL: p.openai.String(), Credential: &cred},
			{Name: summarizer.ProviderExtractive, Provider: summarizer.ProviderExtractive},
		}, true, nil
	}
	return []config.Binding{
		{Name: ClientBinding, Provider: summarizer.ProviderAnthropic, Model: c.model, BaseURL: p.upstream.String(), Credential: &cred},
		{Name: summarizer.ProviderExtractive, Provider: summarizer.ProviderExtractive},
	}, true, nil
}

// bytesOf is raws as byte slices.
func bytesOf(raws []json.RawMessage) [][]byte {
	out := make([][]byte, len(raws))
	for i, r := range raws {
		out[i] = r
	}
	return out
}

// headerHasToken reports whether a comma-separated header of h holds
// token, case-insensitively.
func headerHasToken(h http.Header, key, token string) bool {
	for _, v := range h.Values(key) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}
