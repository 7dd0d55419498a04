package main

import (
	"strings"
	"testing"

	"github.com/ctxd/ctxd/config"
)

// TestAuthTokenRefusesWhatNoClientCanSend: a token of spaces (HTTP trims
// them, so no request could ever match) is refused at start, like a short
// one; a good token is taken.
func TestAuthTokenRefusesWhatNoClientCanSend(t *testing.T) {
	cfg := config.Defaults()
	cfg.Daemon.Listen, cfg.Daemon.AuthTokenEnv = "127.0.0.1:17411", "TOK"
	for _, c := range []struct {
		token, wantErr string
	}{
		{strings.Repeat(" ", 20), "white space"},
		{"0123456789abcdef\n", "white space"},
		{"short", "use at least 16"},
		{"0123456789abcdef0123", ""},
	} {
		m := &Main{Getenv: func(string) string { return c.token }}
		got, err := m.authToken(cfg)
		switch {
		case c.wantErr == "" && (err != nil || got != c.token):
			t.Errorf("%q: %q, %v", c.token, got, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr) || strings.Contains(err.Error(), c.token)):
			t.Errorf("%q: err %v, want %q without the token", c.token, err, c.wantErr)
		}
	}
}
