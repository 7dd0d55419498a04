package main

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
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

// newLogger writes to w as text (logfmt) or JSON lines at level.
func newLogger(w io.Writer, format string, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
