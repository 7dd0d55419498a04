package main

import (
	"fmt"
	"io"
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
	attrPID           = "pid"
	attrProblem       = "problem"
	attrReason        = "reason"
	attrSocket        = "socket"
	attrTokenRequired = "token_required"
	attrVersion       = "version"
	attrWorkers       = "workers"
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
// line passed through red (DESIGN.md §8b: no secret in a log line, whoever
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
