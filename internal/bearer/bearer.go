// Package bearer checks bearer tokens ("Authorization: Bearer <token>",
// RFC 6750) in constant time: the daemon API on TCP (docs/design.md §8b) and any
// other listener of ctxd that authenticates a caller by a shared secret.
package bearer

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// Token returns the token of an Authorization header value "Bearer
// <token>" (the scheme is case-insensitive, RFC 7235 §2.1), and false for
// any other value, an empty token included.
func Token(header string) (string, bool) {
	scheme, tok, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimLeft(tok, " ")
	if tok == "" {
		return "", false
	}
	return tok, true
}

// Equal reports whether got and want are the same secret, in time that
// depends on neither their contents nor got's length: both are hashed
// (SHA-256) and the digests compared with crypto/subtle. An empty want
// matches nothing, so an unset secret never lets a caller in.
func Equal(got, want string) bool {
	if want == "" {
		return false
	}
	g := sha256.Sum256([]byte(got))
	w := sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// Check reports whether r's Authorization header carries want as its
// bearer token. An empty want matches nothing.
func Check(r *http.Request, want string) bool {
	tok, ok := Token(r.Header.Get("Authorization"))
	return ok && Equal(tok, want)
}
