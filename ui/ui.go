// Package ui is ctxd's read-only dashboard (docs/design.md §10 "Proof a
// user can see"): a page of sessions (agent, model, window, state,
// savings, last activity; paged on the server) and a page per session
// (context size per request against the window and threshold, cache reads
// and writes per request, the ledger's waterfall, compactions and their
// summaries, diagnostics), from assets embedded in the binary. It reads the
// engine and writes nothing. The proxy serves it at /ui on its loopback
// listener.
package ui

import (
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"strconv"
	"strings"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/ledger"
)

//go:embed assets
var assets embed.FS

// Prefix is the path the dashboard is served under.
const Prefix = "/ui"

// Handler serves the dashboard: GET /ui/ (the page), /ui/assets/…, and
// its JSON: /ui/api/sessions?after=ID&limit=N (a page of sessions, at most
// engine.MaxListLimit), /ui/api/totals (every session's ledger summed) and
// /ui/api/sessions/{id} (a session with its ledger, checkpoints and
// diagnostics). Only GET and HEAD.
func Handler(eng *engine.Engine) http.Handler {
	sub, _ := fs.Sub(assets, "assets")
	files := http.StripPrefix(Prefix+"/assets/", http.FileServer(http.FS(sub)))
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+Prefix+"/{$}", func(w http.ResponseWriter, r *http.Request) {
		b, _ := assets.ReadFile("assets/index.html")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:")
		w.Header().Set("Referrer-Policy", "no-referrer")
		_, _ = w.Write(b)
	})
	mux.Handle("GET "+Prefix+"/assets/", files)
	mux.HandleFunc("GET "+Prefix+"/api/sessions", func(w http.ResponseWriter, r *http.Request) {
		limit := 100
		if v := r.URL.Query().Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > engine.MaxListLimit {
				http.Error(w, "limit: a page size from 1 to "+strconv.Itoa(engine.MaxListLimit), http.StatusBadRequest)
				return
			}
			limit = n
		}
		page, next, err := eng.ListSessionPage(r.Context(), r.URL.Query().Get("after"), limit)
		if err != nil {
			writeErr(w, err)
			return
		}
		rows := make([]row, 0, len(page))
		for _, in := range page {
			rows = append(rows, rowOf(in))
		}
		writeJSON(w, map[string]any{"sessions": rows, "next": next})
	})
	mux.HandleFunc("GET "+Prefix+"/api/totals", func(w http.ResponseWriter, r *http.Request) {
		sum, n, err := eng.LedgerTotals(r.Context())
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, map[string]any{"sessions": n, "totals": sum})
	})
	mux.HandleFunc("GET "+Prefix+"/api/sessions/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		info, err := eng.Session(r.Context(), id)
		if err != nil {
			writeErr(w, err)
			return
		}
		entries, totals, err := eng.Ledger(r.Context(), id)
		if err != nil {
			writeErr(w, err)
			return
		}
		cps, err := eng.Checkpoints(r.Context(), id)
		if err != nil {
			writeErr(w, err)
			return
		}
		var diags []json.RawMessage
		_ = eng.Events(r.Context(), id, 1, false, func(ev checkpoint.Event) error {
			if ev.Kind == checkpoint.KindDiagnostic || ev.Kind == checkpoint.KindCompactionFailed {
				diags = append(diags, ev.Data)
			}
			return nil
		})
		writeJSON(w, map[string]any{"session": rowOf(info), "entries": entries, "totals": totals,
			"waterfall": totals.Waterfall(), "checkpoints": cps, "diagnostics": diags})
	})
	return mux
}

// row is one session as the list shows it.
type row struct {
	ID           string          `json:"id"`
	Agent        string          `json:"agent"`
	Model        string          `json:"model"`
	ContextLimit uint64          `json:"context_limit"`
	Threshold    uint64          `json:"threshold"`
	Tokens       uint64          `json:"tokens"`
	State        string          `json:"state"`
	Mode         string          `json:"mode,omitempty"`
	Ledger       *ledger.Summary `json:"ledger,omitempty"`
	Updated      string          `json:"updated"`
}

func rowOf(in engine.Info) row {
	agent := in.Labels["proxy"]
	if agent == "" {
		agent = "api"
	}
	state := in.Compaction
	if in.CircuitOpen {
		state = "circuit open"
	}
	return row{ID: in.ID, Agent: agent, Model: in.Model, ContextLimit: in.ContextLimit, Threshold: in.Threshold, Tokens: in.Tokens,
		State: state, Mode: in.Mode, Ledger: in.Ledger, Updated: in.Updated.UTC().Format("2006-01-02 15:04:05")}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, engine.ErrNotFound):
		status = http.StatusNotFound
	case errors.Is(err, engine.ErrInvalid):
		status = http.StatusBadRequest
	}
	http.Error(w, strings.SplitN(err.Error(), "\n", 2)[0], status)
}
