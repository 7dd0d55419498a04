package server

import (
	"encoding/json"
	"net/http"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/ledger"
)

// recode converts a ledger value to its api mirror (same JSON names).
func recode(from, to any) {
	b, _ := json.Marshal(from)
	_ = json.Unmarshal(b, to)
}

func toAPILedgerSummary(s *ledger.Summary) *api.LedgerSummary {
	if s == nil {
		return nil
	}
	out := api.LedgerSummary(*s)
	return &out
}

// ledger serves RouteLedger.
func (s *Server) ledger(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue(api.PathValueID)
	entries, totals, err := s.eng.Ledger(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	mode, err := s.eng.Mode(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := api.LedgerResponse{Session: id, Mode: mode, Entries: make([]api.LedgerEntry, 0, len(entries))}
	recode(entries, &out.Entries)
	recode(totals, &out.Totals)
	recode(totals.Waterfall(), &out.Waterfall)
	writeJSON(w, http.StatusOK, out)
}

// setMode serves RouteSetMode.
func (s *Server) setMode(w http.ResponseWriter, r *http.Request) {
	var req api.ModeRequest
	if err := decode(w, r, &req, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.eng.SetMode(r.Context(), r.PathValue(api.PathValueID), req.Mode); err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, req)
}

// ledgerTotals serves RouteLedgerTotals.
func (s *Server) ledgerTotals(w http.ResponseWriter, r *http.Request) {
	sum, n, err := s.eng.LedgerTotals(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.LedgerTotalsResponse{Sessions: n, Totals: api.LedgerSummary(sum)})
}
