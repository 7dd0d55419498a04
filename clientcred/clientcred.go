// Package clientcred holds what the proxy keeps in memory of its clients'
// credentials (docs/design.md §10): each proxied session's latest client
// credential and prompt prefix, which its summarizer calls are made on,
// and the fingerprints of the credentials the upstream accepted, without
// which nothing is compacted for a client (nothing costs before it is
// earned). Nothing here is stored or logged; after a restart a session's
// compaction waits for its client's next request.
package clientcred

import (
	"bytes"
	"errors"
	"net/http"
	"sync"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/wire"
)

// ErrNoCredential: the session's client credential is not held (the
// daemon restarted since its last request).
var ErrNoCredential = errors.New("a proxied session is summarized with its client's credential, held in memory only: the compaction waits for the client's next request")

// ErrNotAccepted: the session's client has not shown a credential the
// upstream accepted.
var ErrNotAccepted = errors.New("a proxied session is compacted only once the upstream accepted its client's credential: the compaction waits until it has")

// Max bounds both the credentials held (one per proxied session) and the
// fingerprints remembered as accepted; past it a quarter is forgotten:
// their sessions' compactions wait for their clients' next requests, as
// after a restart.
const Max = 4096

// Authenticated reports whether an upstream's answer of status shows that
// it accepted the request's credential (Store.Accept): any answer under
// 500 but 401, 403 and 407 (a provider checks the key before it reads the
// request, so a context-length 400 or a 429 is an authenticated client's).
func Authenticated(status int) bool {
	return status < 500 && status != http.StatusUnauthorized && status != http.StatusForbidden && status != http.StatusProxyAuthRequired
}

// Credential is what a summarizer call on the credential of a request
// (h its headers) sends: its x-api-key, Authorization and anthropic-beta
// values, and sp, what of the request the call carries.
func Credential(h http.Header, sp wire.SummaryPrefix) config.Credential {
	return config.Credential{APIKey: h.Get("X-Api-Key"), Authorization: h.Get("Authorization"), Beta: h.Get("Anthropic-Beta"),
		System: sp.System, Tools: sp.Tools, ToolChoice: sp.ToolChoice, Prefix: sp.Prefix}
}

// Held is a client's credential and prompt prefix as its session's
// summarizer calls use them, with the model of its latest request and the
// credential's fingerprint (identity.Fingerprint).
type Held struct {
	Cred  config.Credential
	Model string
	FP    string
}

type held struct {
	Held
	// release releases the credential's hold on the redactor.
	release func()
}

// Store is the held credentials, by session id, and the accepted
// fingerprints. Its zero value is empty and ready; it is safe for
// concurrent use.
type Store struct {
	mu       sync.Mutex
	held     map[string]*held
	accepted map[string]struct{}
}

// Accept remembers that the upstream accepted the credential fp
// (authenticated): its sessions may now be compacted, on the operator's
// bindings too. An empty fp is ignored.
func (s *Store) Accept(fp string) {
	if fp == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.accepted[fp]; ok {
		return
	}
	if s.accepted == nil {
		s.accepted = map[string]struct{}{}
	}
	if len(s.accepted) >= Max {
		for k := range s.accepted {
			delete(s.accepted, k)
			if len(s.accepted) < Max*3/4 {
				break
			}
		}
	}
	s.accepted[fp] = struct{}{}
}

// Accepted reports whether the upstream accepted the credential fp since
// the daemon started.
func (s *Store) Accepted(fp string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.accepted[fp]
	return ok
}

// Hold keeps h as session id's credential in place of the one it held,
// releasing that one; release releases h's hold on the redactor, when h
// is replaced or forgotten. h's System, Tools and ToolChoice may point
// into a request's buffer, which is reused: Hold keeps copies (System and
// Tools: the previous copy when they did not change). Prefix is kept as
// given.
func (s *Store) Hold(id string, h Held, release func()) {
	c := &held{Held: h, release: release}
	c.Cred.ToolChoice = bytes.Clone(h.Cred.ToolChoice)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held == nil {
		s.held = map[string]*held{}
	}
	old := s.held[id]
	if old != nil && bytes.Equal(old.Cred.System, c.Cred.System) {
		c.Cred.System = old.Cred.System
	} else {
		c.Cred.System = bytes.Clone(c.Cred.System)
	}
	if old != nil && bytes.Equal(old.Cred.Tools, c.Cred.Tools) {
		c.Cred.Tools = old.Cred.Tools
	} else {
		c.Cred.Tools = bytes.Clone(c.Cred.Tools)
	}
	if old == nil && len(s.held) >= Max {
		for k, o := range s.held {
			o.release()
			delete(s.held, k)
			if len(s.held) < Max*3/4 {
				break
			}
		}
	}
	if old != nil {
		old.release()
	}
	s.held[id] = c
}

// Forget drops session id's credential (its session was deleted, or
// dropped when the upstream refused its first request).
func (s *Store) Forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.held[id]; c != nil {
		c.release()
		delete(s.held, id)
	}
}

// ForSummary is what session id's summarizer calls are made on: its
// client's credential, held. ok is false when they are not made on it:
// operatorBindings (proxy.summarizer = "bindings") keeps the operator's
// configured bindings. Errors: ErrNotAccepted when the upstream has not
// accepted the held credential — no compaction of such a client, on
// either bindings (a window override header of its cannot make ctxd
// work); a compaction the owner asks for over the daemon API, with no
// credential held, is the owner's to pay. ErrNoCredential when none is
// held and the client's own is needed.
func (s *Store) ForSummary(id string, operatorBindings bool) (h Held, ok bool, err error) {
	s.mu.Lock()
	c := s.held[id]
	s.mu.Unlock()
	if c != nil && !s.Accepted(c.FP) {
		return Held{}, false, ErrNotAccepted
	}
	if operatorBindings {
		return Held{}, false, nil
	}
	if c == nil {
		return Held{}, false, ErrNoCredential
	}
	return c.Held, true, nil
}
