package server

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/artifacts"
	"github.com/ctxd/ctxd/recall"
)

// search serves RouteSearch (docs/design.md §5.6 "Recall").
func (s *Server) search(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, ok := s.intQuery(w, r, api.QueryLimit, 1, recall.MaxLimit)
	if !ok {
		return
	}
	offset, ok := s.intQuery(w, r, api.QueryOffset, 0, 1<<31-1)
	if !ok {
		return
	}
	res, err := recall.Search(r.Context(), s.eng, s.artifactText, r.PathValue(api.PathValueID), q.Get(api.QuerySearch), limit, offset)
	if err != nil {
		s.writeError(w, r, recallErr(err))
		return
	}
	out := api.SearchResponse{Hits: make([]api.SearchHit, len(res.Hits)), Total: res.Total, Next: res.Next, WorkingDir: res.WorkingDir}
	for i, h := range res.Hits {
		out.Hits[i] = api.SearchHit(h)
	}
	writeJSON(w, http.StatusOK, out)
}

// readMessages serves RouteReadMessages.
func (s *Server) readMessages(w http.ResponseWriter, r *http.Request) {
	var from, to uint64
	for _, p := range []struct {
		key string
		dst *uint64
	}{{api.QueryFrom, &from}, {api.QueryTo, &to}} {
		if v := r.URL.Query().Get(p.key); v != "" {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				s.writeError(w, r, api.Errorf(api.Invalid, p.key, "%s: %q is not a seq (a decimal integer ≥ 0)", p.key, v))
				return
			}
			*p.dst = n
		}
	}
	offset, ok := s.intQuery(w, r, api.QueryOffset, 0, 1<<31-1)
	if !ok {
		return
	}
	maxChars, ok := s.intQuery(w, r, api.QueryMaxChars, 1, recall.MaxReadChars)
	if !ok {
		return
	}
	p, err := recall.Read(r.Context(), s.eng, r.PathValue(api.PathValueID), from, to, offset, maxChars)
	if err != nil {
		s.writeError(w, r, recallErr(err))
		return
	}
	writeJSON(w, http.StatusOK, api.MessagesPage{From: p.From, To: p.To, Offset: p.Offset, Next: p.Next, Text: p.Text, WorkingDir: p.WorkingDir})
}

// intQuery parses query key as a decimal integer in [lo, hi]; absent is 0.
// On a bad value it writes the Invalid error naming key and returns false.
func (s *Server) intQuery(w http.ResponseWriter, r *http.Request, key string, lo, hi int) (int, bool) {
	v := r.URL.Query().Get(key)
	if v == "" {
		return 0, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		s.writeError(w, r, api.Errorf(api.Invalid, key, "%s: %q is not a decimal integer from %d to %d", key, v, lo, hi))
		return 0, false
	}
	return n, true
}

// artifactText is the recall.ArtifactFunc of the daemon's artifact store.
func (s *Server) artifactText(ctx context.Context, uri string) ([]byte, error) {
	if s.artifacts == nil {
		return nil, errors.New("no artifact store")
	}
	id, err := artifacts.ParseRef(uri)
	if err != nil {
		return nil, err
	}
	b, _, err := s.artifacts.Get(ctx, id)
	return b, err
}

// recallErr maps recall.ErrInvalid to api.Invalid naming the field (the
// text before the first colon of the message after "invalid: ").
func recallErr(err error) error {
	if !errors.Is(err, recall.ErrInvalid) {
		return err
	}
	msg := strings.TrimPrefix(err.Error(), recall.ErrInvalid.Error()+": ")
	field, _, _ := strings.Cut(msg, ":")
	return api.Errorf(api.Invalid, field, "%s", msg)
}
