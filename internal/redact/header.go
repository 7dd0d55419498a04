package redact

import (
	"net/http"
	"strings"
)

// CredentialHeaders are the request headers that carry a client's
// credential.
var CredentialHeaders = []string{"X-Api-Key", "Authorization", "Proxy-Authorization", "Api-Key", "X-Goog-Api-Key"}

// HeaderSecrets are the credential values of h: each credential header's value
// and, for "<scheme> <token>", the token alone.
func HeaderSecrets(h http.Header) []string {
	var out []string
	for _, k := range CredentialHeaders {
		for _, v := range h.Values(k) {
			if v = strings.TrimSpace(v); v == "" {
				continue
			}
			out = append(out, v)
			if _, tok, ok := strings.Cut(v, " "); ok && strings.TrimSpace(tok) != "" {
				out = append(out, strings.TrimSpace(tok))
			}
		}
	}
	return out
}

// HoldHeader holds every credential of h (HeaderSecrets) on r; the
// returned func releases them.
func (r *Redactor) HoldHeader(h http.Header) func() {
	vals := HeaderSecrets(h)
	if len(vals) == 0 {
		return func() {}
	}
	rels := make([]func(), len(vals))
	for i, v := range vals {
		rels[i] = r.Hold(v)
	}
	return func() {
		for _, rel := range rels {
			rel()
		}
	}
}
