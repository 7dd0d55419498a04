package proxy

import (
	"sync"
	"time"
)

// heldCredential is a client's credential, kept in memory only, for the
// summarizer calls of its session (DESIGN.md §10 "who pays for the
// summary"): never stored, never logged.
type heldCredential struct {
	apiKey, authorization, beta, version string
	model                                string
	system, tools                        []byte
	at                                   time.Time
}

// credentials maps a session id to the credential of its latest request.
type credentials struct {
	mu sync.Mutex
	m  map[string]*heldCredential
}

// holdCredential keeps the credential of a session's latest request.
func (p *Proxy) holdCredential(id string, req *request, h interface{ Get(string) string }) {
	c := &heldCredential{
		apiKey:        h.Get("X-Api-Key"),
		authorization: h.Get("Authorization"),
		beta:          h.Get("Anthropic-Beta"),
		version:       h.Get("Anthropic-Version"),
		model:         req.model,
		system:        req.system,
		tools:         req.tools,
		at:            time.Now(),
	}
	p.creds.mu.Lock()
	p.creds.m[id] = c
	p.creds.mu.Unlock()
}
