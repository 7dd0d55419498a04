package server

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/artifacts"
	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/contextedit"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/summarizer"
	"github.com/ctxd/ctxd/trigger"
	"github.com/ctxd/ctxd/wire/anthropic"
	"github.com/ctxd/ctxd/workers"
)

// AnthropicContextManagementBeta is the "anthropic-beta" value that
// Anthropic's Messages API requires for the context_management parameter
// (context_editing mode "server", docs/design.md §6). It is sent to the agent in
// api.HeaderAnthropicBeta.
const AnthropicContextManagementBeta = "context-management-2025-06-27"

// HeaderDiagnostic carries ContextResponse.Diagnostic's message on the
// provider formats of GET …/context, whose bodies have no place for it
// (api.HeaderDiagnostic).
const HeaderDiagnostic = api.HeaderDiagnostic

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) {
	var req api.CreateSessionRequest
	if err := decode(w, r, &req, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.checkSpace(); err != nil {
		s.writeError(w, r, err)
		return
	}
	if _, empty := req.Labels[""]; empty {
		s.writeError(w, r, api.Errorf(api.Invalid, "labels", "labels: an empty key; every label needs a name (\"team\": \"payments\")"))
		return
	}
	if err := engine.ReservedForProxy(req.ID, req.Labels); err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.Model == "" && req.ContextLimit == 0 {
		s.writeError(w, r, api.Errorf(api.Invalid, "model", "model: required unless context_limit is given (a model id, e.g. \"claude-sonnet-4-5\")"))
		return
	}
	info, err := s.eng.CreateSession(r.Context(), toCreateParams(req))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, toAPISession(info))
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) {
	// One page (?limit=N&after=ID): sessions not in memory are described
	// from their listing rows, so no request loads or lists every session.
	q := r.URL.Query()
	limit := 0
	if v := q.Get(api.QueryLimit); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > api.MaxListLimit {
			s.writeError(w, r, api.Errorf(api.Invalid, api.QueryLimit, "limit: %q is not a page size (a decimal integer from 1 to %d)", v, api.MaxListLimit))
			return
		}
		limit = n
	}
	infos, next, err := s.eng.ListSessionPage(r.Context(), q.Get(api.QueryAfter), limit)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := api.ListSessionsResponse{Sessions: make([]api.Session, 0, len(infos)), Next: next}
	for _, info := range infos {
		out.Sessions = append(out.Sessions, toAPISession(info))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) {
	info, err := s.eng.Session(r.Context(), r.PathValue(api.PathValueID))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toAPISession(info))
}

func (s *Server) patchSession(w http.ResponseWriter, r *http.Request) {
	var req api.PatchSessionRequest
	if err := decode(w, r, &req, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	id := r.PathValue(api.PathValueID)
	patch := toPatch(req)
	if field := engine.ProxyOwnedField(patch); field != "" {
		// A proxied session's prompt, tools and model are its client's
		// (docs/design.md §10, docs/decisions.md).
		if err := s.eng.RefuseProxyOwned(r.Context(), id, field); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	info, err := s.eng.UpdateSession(r.Context(), id, patch)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toAPISession(info))
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request) {
	if err := s.eng.DeleteSession(r.Context(), r.PathValue(api.PathValueID)); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) startRun(w http.ResponseWriter, r *http.Request) {
	var req api.RunRequest
	if err := decode(w, r, &req, true); err != nil {
		s.writeError(w, r, err)
		return
	}
	seq, err := s.eng.StartRun(r.Context(), r.PathValue(api.PathValueID))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.RunResponse{Seq: seq})
}

func (s *Server) appendMessages(w http.ResponseWriter, r *http.Request) {
	var req api.AppendMessagesRequest
	if err := decode(w, r, &req, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	if len(req.Messages) == 0 {
		s.writeError(w, r, api.Errorf(api.Invalid, "messages", "messages: at least one message is required"))
		return
	}
	for i, m := range req.Messages {
		// Anthropic refuses an empty message anywhere but last ("all
		// messages must have non-empty content except for the optional
		// final assistant message"), so the formats could not render it
		// alike (docs/decisions.md). Imports of agents that record an
		// aborted response as one (pi) keep them out of the log.
		if m.Role == api.RoleAssistant && len(m.Content) == 0 {
			field := fmt.Sprintf("messages[%d].content", i)
			s.writeError(w, r, api.Errorf(api.Invalid, field, "%s: an assistant message needs at least one block; providers refuse an empty one once a message follows it (an aborted response): leave the message out", field))
			return
		}
		// The position is ctxd's to assign (docs/api.md, docs/decisions.md):
		// a seq sent by the client was silently dropped before, which let a
		// client believe it had placed a message where it had not.
		if m.Seq != 0 {
			field := fmt.Sprintf("messages[%d].seq", i)
			s.writeError(w, r, api.Errorf(api.Invalid, field, "%s: ctxd assigns seq; leave it out of an appended message (the answer carries the seq given)", field))
			return
		}
	}
	id := r.PathValue(api.PathValueID)
	// A proxied session's history is its client's (docs/design.md §10,
	// docs/decisions.md).
	if err := s.eng.RefuseProxyOwned(r.Context(), id, "messages"); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.checkSpace(); err != nil {
		s.writeError(w, r, err)
		return
	}
	// An idempotent append (docs/api.md "Retrying an append"): the key
	// is checked by the engine, which names the header in its errors.
	key := r.Header.Get(api.HeaderIdempotencyKey)
	if _, sent := r.Header[http.CanonicalHeaderKey(api.HeaderIdempotencyKey)]; sent && key == "" {
		s.writeError(w, r, api.Errorf(api.Invalid, api.HeaderIdempotencyKey, "%s: empty; send 1 to %d printable ASCII characters, or leave the header out", api.HeaderIdempotencyKey, checkpoint.MaxIdempotencyKey))
		return
	}
	res, err := s.eng.AppendWith(r.Context(), id, toHistoryMessages(req.Messages), engine.AppendOptions{IdempotencyKey: key})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if res.Replayed {
		w.Header().Set(api.HeaderIdempotentReplayed, "true")
	}
	out := api.AppendMessagesResponse{
		Replayed:         res.Replayed,
		Messages:         toAPIMessages(res.Messages),
		CompactionQueued: res.CompactionQueued,
		FirstSeq:         res.FirstSeq,
		LastSeq:          res.LastSeq,
	}
	for _, ev := range res.Events {
		out.Events = append(out.Events, toAPIEvent(ev))
	}
	// The messages are durable: what follows only describes them, and a
	// failure of it must not read as a failed append.
	out.Tokens = api.Tokens{Value: res.Tokens, Source: res.TokensSource}
	out.Threshold = res.Threshold
	writeJSON(w, http.StatusOK, out)
}

// context serves GET …/context. It is the pre-send check (docs/design.md §5.1)
// unless presend=false.
func (s *Server) context(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	format := q.Get(api.QueryFormat)
	switch format {
	case "":
		format = api.FormatCanonical
	case api.FormatCanonical, api.FormatAnthropic, api.FormatOpenAI:
	default:
		s.writeError(w, r, api.Errorf(api.Invalid, api.QueryFormat, "format: %q is not one of %s, %s, %s", format, api.FormatCanonical, api.FormatAnthropic, api.FormatOpenAI))
		return
	}
	presend, err := boolParam(q, api.QueryPreSend, true)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	a, err := s.eng.Context(r.Context(), r.PathValue(api.PathValueID), engine.ContextOptions{NoPreSend: !presend})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if a.Diagnostic != "" && format != api.FormatCanonical {
		w.Header().Set(HeaderDiagnostic, api.HeaderValue(a.Diagnostic))
	}
	switch format {
	case api.FormatAnthropic:
		// The Messages request anthropic.Render builds (system, tools,
		// messages; model and max_tokens are the agent's), plus the
		// provider's context editing in mode "server".
		body := anthropic.EditedRequest{Request: anthropic.Render(a.System, a.Tools, a.Messages)}
		if a.ContextEditMode == "server" {
			body.ContextManagement = contextedit.ServerEdit(a.ContextEditing)
			if body.ContextManagement != nil {
				w.Header().Set(api.HeaderAnthropicBeta, AnthropicContextManagementBeta)
			}
		}
		writeJSON(w, http.StatusOK, body)
	case api.FormatOpenAI:
		writeJSON(w, http.StatusOK, summarizer.RenderOpenAI(a.System, a.Tools, a.Messages))
	default:
		writeJSON(w, http.StatusOK, toContextResponse(a))
	}
}

func (s *Server) compact(w http.ResponseWriter, r *http.Request) {
	var req api.CompactRequest
	if err := decode(w, r, &req, true); err != nil {
		s.writeError(w, r, err)
		return
	}
	var sig trigger.Signal
	switch req.Reason {
	case "", api.ReasonManual:
		sig = trigger.Manual
	case api.ReasonOverflow:
		sig = trigger.Overflow
	default:
		s.writeError(w, r, api.Errorf(api.Invalid, "reason", "reason: %q is not %q or %q", req.Reason, api.ReasonManual, api.ReasonOverflow))
		return
	}
	if err := s.checkSpace(); err != nil {
		s.writeError(w, r, err)
		return
	}
	res, err := s.eng.Compact(r.Context(), r.PathValue(api.PathValueID), sig, req.Wait)
	switch {
	case errors.Is(err, engine.ErrNothingToCompact):
		writeJSON(w, http.StatusOK, api.CompactResponse{Status: api.CompactNothing, Reason: engine.NothingToCompactReason(err)})
	case err != nil:
		s.writeError(w, r, err)
	case !req.Wait:
		writeJSON(w, http.StatusAccepted, api.CompactResponse{Status: api.CompactQueued})
	case res.Checkpoint == nil:
		writeJSON(w, http.StatusOK, api.CompactResponse{Status: api.CompactNothing})
	default:
		cp := toAPICheckpoint(*res.Checkpoint)
		writeJSON(w, http.StatusOK, api.CompactResponse{Status: api.CompactDone, Checkpoint: &cp})
	}
}

func (s *Server) checkpoints(w http.ResponseWriter, r *http.Request) {
	cps, err := s.eng.Checkpoints(r.Context(), r.PathValue(api.PathValueID))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := api.CheckpointsResponse{Checkpoints: make([]api.Checkpoint, len(cps))}
	for i, cp := range cps {
		out.Checkpoints[i] = toAPICheckpoint(cp)
	}
	writeJSON(w, http.StatusOK, out)
}

// artifact serves an artifact's bytes. Possession of the id grants read
// (docs/design.md §7); the id is never logged above debug.
func (s *Server) artifact(w http.ResponseWriter, r *http.Request) {
	id, err := artifacts.ParseRef(r.PathValue(api.PathValueID))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if s.artifacts == nil {
		s.writeError(w, r, api.Errorf(api.NotFound, "", "no artifact has this id"))
		return
	}
	b, _, err := s.artifacts.Get(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", api.ContentTypeArtifact)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	var storage *api.StorageStatus
	if s.storage != nil {
		storage = s.storage()
	}
	n, err := s.eng.CountSessions(r.Context())
	if err != nil {
		if storage == nil || !errors.Is(err, checkpoint.ErrUnavailable) {
			s.writeError(w, r, err)
			return
		}
		// The storage is unreachable: the status says so (and what it is)
		// rather than failing, so ctxctl status and doctor can show it.
		n = -1
	}
	st := s.poolStats()
	now := s.now()
	var proxy *api.ProxyStatus
	if s.proxy != nil {
		proxy = s.proxy()
	}
	writeJSON(w, http.StatusOK, api.Status{
		Proxy:         proxy,
		Version:       s.version,
		Started:       s.started,
		UptimeSeconds: now.Sub(s.started).Seconds(),
		Sessions:      n,
		Windows:       s.eng.WindowSources(),
		Queue:         api.Queue{Depth: st.Queued, Capacity: s.pool.Capacity},
		Workers:       api.Workers{Size: s.pool.Size, Busy: st.Running},
		Disk:          s.diskStatus(),
		Storage:       storage,
	})
}

// checkSpace refuses a write up front when the data directory's file
// system is below its reserve (store.ErrNoSpace → insufficient_storage),
// before any work (an offload, a summarizer call) is done for nothing. The
// store checks every write again with its real size.
func (s *Server) checkSpace() error {
	for _, g := range s.spaces {
		if g.Name == DiskData {
			return g.Space.Check(0)
		}
	}
	return nil
}

// diskStatus reads the free space of every guarded directory.
func (s *Server) diskStatus() []api.Disk {
	var out []api.Disk
	for _, g := range s.spaces {
		d := api.Disk{Name: g.Name, Dir: g.Space.Dir(), ReserveBytes: g.Space.Reserve()}
		free, low, err := g.Space.State()
		if err != nil {
			d.Error = err.Error()
		}
		d.FreeBytes, d.Low = free, low
		out = append(out, d)
	}
	return out
}

// Names of GuardedDir.
const (
	DiskData    = "data"
	DiskOffload = "offload"
)

func (s *Server) poolStats() workers.Stats {
	if s.pool.Stats == nil {
		return workers.Stats{}
	}
	return s.pool.Stats()
}

// boolParam reads an optional boolean query parameter ("true"/"false",
// "1"/"0"); a bad value is invalid naming it.
func boolParam(q map[string][]string, name string, def bool) (bool, error) {
	vs, ok := q[name]
	if !ok || len(vs) == 0 || vs[0] == "" {
		return def, nil
	}
	v, err := strconv.ParseBool(vs[0])
	if err != nil {
		return def, api.Errorf(api.Invalid, name, "%s: %q is not true or false", name, vs[0])
	}
	return v, nil
}
