package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/config"
)

// serverShapeReport describes compaction.shape "server" for a
// configuration (docs/design.md §10): which models use the provider's
// compaction and which fall back to the summarizer bindings. Fields are
// only ever added.
type serverShapeReport struct {
	// Rule says where the provider compacts and where ctxd falls back.
	Rule string `json:"rule"`
	// Models have server_compaction; FallbackModels do not.
	Models         []string `json:"models"`
	FallbackModels []string `json:"fallback_models"`
}

// serverShapeOf is the report for cfg, nil when its shape is not "server".
func serverShapeOf(cfg config.Config) *serverShapeReport {
	if cfg.Compaction.Shape != config.ShapeServer {
		return nil
	}
	on, off := cfg.ServerShapeModels()
	return &serverShapeReport{Rule: config.ServerShapeRule, Models: nonNilStrings(on), FallbackModels: nonNilStrings(off)}
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// warning is the one-line warning ctxctl check prints for shape server.
func (r *serverShapeReport) warning() string {
	return fmt.Sprintf(`warning: compaction.shape is "server": %s; with server_compaction: %s; falling back: %s`,
		r.Rule, listOrNone(r.Models), listOrNone(r.FallbackModels))
}

func listOrNone(ids []string) string {
	if len(ids) == 0 {
		return "none"
	}
	return strings.Join(ids, ", ")
}

// writeServerShape prints the report for people (ctxctl doctor).
func writeServerShape(w io.Writer, r *serverShapeReport) {
	if r == nil {
		return
	}
	fmt.Fprintf(w, "shape server: %s\n", r.Rule)
	fmt.Fprintf(w, "  models with server_compaction: %s\n", listOrNone(r.Models))
	fmt.Fprintf(w, "  models that fall back to the summarizer: %s\n", listOrNone(r.FallbackModels))
}

// serverShapeLine is a session's shape-server state, "" when its shape is
// not "server" or the daemon does not report it.
func serverShapeLine(s *api.Session) string {
	if s.ServerShapeWhy == "" {
		return ""
	}
	state := "FALLS BACK to the summarizer"
	if s.ServerShapeActive {
		state = "the provider compacts"
	}
	return state + " — " + s.ServerShapeWhy
}
