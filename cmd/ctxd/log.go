package main

import (
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/internal/redact"
)

// Log attribute keys (STYLE.md: litestream's constants). No key carries a
// secret: tokens and API keys are never logged, artifact ids only at debug.
const (
	attrActivated     = "socket_activated"
	attrAllowedUIDs   = "allowed_uids"
	attrBindings      = "bindings"
	attrCount         = "count"
	attrDataDir       = "data_dir"
	attrDir           = "dir"
	attrErr           = "err"
	attrKey           = "key"
	attrListen        = "listen"
	attrListener      = "listener"
	attrOrigin        = "origin"
	attrPID           = "pid"
	attrProblem       = "problem"
	attrReason        = "reason"
	attrSocket        = "socket"
	attrTokenRequired = "token_required"
	attrVersion       = "version"
	attrWorkers       = "workers"
	attrBackend       = "backend"
)

// parseLevel reads --log-level.
func parseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "", "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("--log-level: %q is not debug, info, warn or error", s)
}

// newLogger writes to w as text (logfmt) or JSON lines at level, every
// line passed through red (docs/design.md §8b: no secret in a log line, whoever
// wrote it).
func newLogger(w io.Writer, format string, level slog.Level, red *redact.Redactor) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if format == "json" {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(redact.Handler(h, red))
}

// secretsOf lists the secrets of cfg the daemon holds in its environment:
// each binding's key (the value of its api_key_env) and the TCP bearer
// token (the value of daemon.auth_token_env).
func secretsOf(cfg config.Config, getenv func(string) string) []string {
	var out []string
	for _, b := range cfg.Summarizer.Bindings {
		if b.APIKeyEnv != "" {
			out = append(out, getenv(b.APIKeyEnv))
		}
	}
	if cfg.Daemon.AuthTokenEnv != "" {
		out = append(out, getenv(cfg.Daemon.AuthTokenEnv))
	}
	return out
}

// httpErrorLog is the ErrorLog of the daemon's http.Server on the listener
// named name: net/http's own complaints — a panic in a handler, an accept
// error such as too many open files, a superfluous WriteHeader — as warn
// records of l (so through the redactor), never as bare lines on stderr.
func httpErrorLog(l *slog.Logger, name string) *log.Logger {
	return slog.NewLogLogger(l.With(attrOrigin, "net/http", attrListener, name).Handler(), slog.LevelWarn)
}

// captureStdLog sends what the standard library prints through its default
// logger (log.Printf) to l as warn records, until the returned func
// restores the previous output. net/http's Transport writes there, not to
// any ErrorLog: "Unsolicited response received on idle HTTP channel
// starting with …" when an upstream sends bytes on an idle connection
// (bytes that may echo a credential, hence the redactor), as do its HTTP/2
// and cookie code. Every line the daemon prints is then one structured,
// redacted record.
func captureStdLog(l *slog.Logger) (restore func() error) {
	prevOut, prevFlags, prevPrefix := log.Writer(), log.Flags(), log.Prefix()
	log.SetFlags(0)
	log.SetPrefix("")
	log.SetOutput(slog.NewLogLogger(l.With(attrOrigin, "go log").Handler(), slog.LevelWarn).Writer())
	return func() error {
		log.SetOutput(prevOut)
		log.SetFlags(prevFlags)
		log.SetPrefix(prevPrefix)
		return nil
	}
}
