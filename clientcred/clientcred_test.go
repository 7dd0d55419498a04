package clientcred

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/wire"
)

// A held credential is usable for a session's summary only once the
// upstream accepted it; with the operator's bindings none is needed, but
// an unaccepted one still stops the compaction.
func TestForSummaryWaitsForAcceptance(t *testing.T) {
	var s Store
	if _, ok, err := s.ForSummary("a", false); ok || !errors.Is(err, ErrNoCredential) {
		t.Fatalf("nothing held: ok %v, err %v; want ErrNoCredential", ok, err)
	}
	if _, ok, err := s.ForSummary("a", true); ok || err != nil {
		t.Fatalf("nothing held, operator's bindings: ok %v, err %v; want neither", ok, err)
	}
	s.Hold("a", Held{FP: "fp1", Model: "m", Cred: config.Credential{APIKey: "k"}}, func() {})
	for _, operator := range []bool{false, true} {
		if _, ok, err := s.ForSummary("a", operator); ok || !errors.Is(err, ErrNotAccepted) {
			t.Fatalf("not accepted (operator's bindings %v): ok %v, err %v; want ErrNotAccepted", operator, ok, err)
		}
	}
	s.Accept("fp1")
	h, ok, err := s.ForSummary("a", false)
	if !ok || err != nil || h.Cred.APIKey != "k" || h.Model != "m" {
		t.Fatalf("accepted: %+v, ok %v, err %v", h.Model, ok, err)
	}
	if _, ok, err := s.ForSummary("a", true); ok || err != nil {
		t.Fatalf("accepted, operator's bindings: ok %v, err %v; want neither", ok, err)
	}
}

// Hold keeps its own copies of what may point into a request's reused
// buffer, and releases the redactor's hold of what it replaces or forgets.
func TestHoldCopiesAndReleases(t *testing.T) {
	var s Store
	s.Accept("fp")
	buf := []byte(`"sys"[1]{"type":"auto"}`)
	released := 0
	s.Hold("a", Held{FP: "fp", Cred: config.Credential{System: buf[:5], Tools: buf[5:8], ToolChoice: buf[8:]}}, func() { released++ })
	copy(buf, "xxxxxxxxxxxxxxxxxxxxxxx")
	h, _, _ := s.ForSummary("a", false)
	if string(h.Cred.System) != `"sys"` || string(h.Cred.Tools) != `[1]` || string(h.Cred.ToolChoice) != `{"type":"auto"}` {
		t.Fatalf("held bytes changed with the request's buffer: %s %s %s", h.Cred.System, h.Cred.Tools, h.Cred.ToolChoice)
	}
	s.Hold("a", Held{FP: "fp", Cred: config.Credential{System: []byte(`"sys"`)}}, func() { released += 10 })
	if released != 1 {
		t.Fatalf("released %d after a replacement, want 1", released)
	}
	h2, _, _ := s.ForSummary("a", false)
	if &h2.Cred.System[0] != &h.Cred.System[0] {
		t.Fatal("an unchanged system prompt was copied again")
	}
	s.Forget("a")
	if released != 11 {
		t.Fatalf("released %d after Forget, want 11", released)
	}
}

// The held credentials and the accepted fingerprints stay under Max.
func TestBounded(t *testing.T) {
	var s Store
	released := 0
	for i := 0; i < 2*Max; i++ {
		id := fmt.Sprint(i)
		s.Accept(id)
		s.Hold(id, Held{FP: id}, func() { released++ })
	}
	if len(s.held) > Max || len(s.accepted) > Max {
		t.Fatalf("held %d, accepted %d: over %d", len(s.held), len(s.accepted), Max)
	}
	if released != 2*Max-len(s.held) {
		t.Fatalf("released %d of %d forgotten", released, 2*Max-len(s.held))
	}
	if !s.Accepted(fmt.Sprint(2*Max - 1)) {
		t.Fatal("the latest fingerprint was forgotten")
	}
}

// A request's credential for its summarizer calls is its credential
// headers and the prefix its dialect says a summary carries.
func TestCredentialOfARequest(t *testing.T) {
	h := http.Header{"X-Api-Key": {"k"}, "Authorization": {"Bearer t"}, "Anthropic-Beta": {"b1,b2"}}
	c := Credential(h, wire.SummaryPrefix{System: []byte(`"sys"`), Tools: []byte(`[]`)})
	if c.APIKey != "k" || c.Authorization != "Bearer t" || c.Beta != "b1,b2" || string(c.System) != `"sys"` || string(c.Tools) != `[]` || c.ToolChoice != nil || c.Prefix != nil {
		t.Fatalf("APIKey %q, Authorization %q, Beta %q, System %s, Tools %s, ToolChoice %s, Prefix %s", c.APIKey, c.Authorization, c.Beta, c.System, c.Tools, c.ToolChoice, c.Prefix)
	}
}

// Any answer under 500 but the authentication refusals shows the
// upstream took the credential.
func TestAuthenticated(t *testing.T) {
	for status, want := range map[int]bool{200: true, 400: true, 413: true, 429: true, 401: false, 403: false, 407: false, 500: false, 529: false} {
		if got := Authenticated(status); got != want {
			t.Errorf("Authenticated(%d) = %v", status, got)
		}
	}
}
