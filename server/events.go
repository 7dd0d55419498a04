package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/checkpoint"
)

// errShutdown ends a followed stream when the daemon shuts down.
var errShutdown = errors.New("ctxd is shutting down")

// events serves GET …/events as server-sent events (api.Client.StreamEvents
// documents the framing): "id: <seq>", "event: <kind>", "data: <Event
// JSON>" and a blank line per event; ": ping" every heartbeat; a failure
// after the stream began is an "error" event carrying the envelope, and the
// stream ends. ?from=N is inclusive; without it, Last-Event-ID: N resumes at
// N+1, so a reconnecting client misses nothing.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue(api.PathValueID)
	q := r.URL.Query()
	fromV, lastV := q.Get(api.QueryFrom), r.Header.Get(api.HeaderLastEventID)
	var from uint64
	if fromV != "" {
		n, err := strconv.ParseUint(fromV, 10, 64)
		if err != nil {
			s.writeError(w, r, api.Errorf(api.Invalid, api.QueryFrom, "from: %q is not a seq (a decimal integer ≥ 0)", fromV))
			return
		}
		from = n
	} else if lastV != "" {
		n, err := strconv.ParseUint(lastV, 10, 64)
		if err != nil {
			s.writeError(w, r, api.Errorf(api.Invalid, api.HeaderLastEventID, "Last-Event-ID: %q is not a seq", lastV))
			return
		}
		from = n + 1 // may wrap to 0: checked against the log below
	}
	follow, err := boolParam(q, api.QueryFollow, false)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// Existence and range are checked before the 200 goes out: after it, a
	// not_found could only be an error event.
	newest, err := s.eng.LastSeq(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// A resume point past the log is a client's mistake (another session's
	// id, a corrupted header), never "from the start": a Last-Event-ID of
	// 2^64−1 used to wrap to 0 and replay the whole log. ?from
	// may name the next seq (last+1) to wait for it; Last-Event-ID must be
	// an event that was sent.
	switch {
	case fromV != "" && from > newest+1:
		s.writeError(w, r, api.Errorf(api.Invalid, api.QueryFrom, "from: %d is past the session's log: its newest seq is %d (from may be at most %d)", from, newest, newest+1))
		return
	case fromV == "" && lastV != "" && (from == 0 || from-1 > newest):
		s.writeError(w, r, api.Errorf(api.Invalid, api.HeaderLastEventID, "Last-Event-ID: %s is past the session's log: its newest seq is %d", lastV, newest))
		return
	}

	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	stop := context.AfterFunc(s.streams, func() { cancel(errShutdown) })
	defer stop()

	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", api.ContentTypeEventStream)
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	var (
		mu   sync.Mutex
		last uint64
		buf  bytes.Buffer
	)
	write := func(b []byte) error {
		mu.Lock()
		defer mu.Unlock()
		if _, err := w.Write(b); err != nil {
			return err
		}
		return rc.Flush()
	}
	if err := write([]byte(": stream of session events\n\n")); err != nil {
		return
	}

	var wg sync.WaitGroup
	hbCtx, hbStop := context.WithCancel(ctx)
	wg.Go(func() {
		t := time.NewTicker(s.heartbeat)
		defer t.Stop()
		for {
			select {
			case <-hbCtx.Done():
				return
			case <-t.C:
				if write([]byte(": ping\n\n")) != nil {
					cancel(nil)
					return
				}
			}
		}
	})
	defer func() { hbStop(); wg.Wait() }()

	err = s.eng.Events(ctx, id, from, follow, func(ev checkpoint.Event) error {
		data, err := json.Marshal(toAPIEvent(ev))
		if err != nil {
			return err
		}
		buf.Reset()
		buf.WriteString("id: ")
		buf.WriteString(strconv.FormatUint(ev.Seq, 10))
		buf.WriteString("\nevent: ")
		buf.WriteString(string(ev.Kind))
		buf.WriteString("\ndata: ")
		buf.Write(data) // compact JSON holds no newline
		buf.WriteString("\n\n")
		if err := write(buf.Bytes()); err != nil {
			return err
		}
		last = ev.Seq
		return nil
	})
	if err == nil || r.Context().Err() != nil {
		return // done, or the client went away
	}
	next := max(from, 1)
	if last > 0 {
		next = last + 1
	}
	var ae *api.Error
	if errors.Is(context.Cause(ctx), errShutdown) {
		ae = api.Errorf(api.Unavailable, "", "ctxd is shutting down; resume from seq %d", next)
	} else {
		var internal bool
		ae, internal = ToAPIError(err)
		if internal {
			s.log.Error("event stream failed", attrSession, id, attrErr, err)
		}
	}
	red := *ae
	red.Message = s.red.String(ae.Message)
	data, _ := json.Marshal(api.ErrorEnvelope{Error: &red})
	_ = write([]byte("event: " + api.SSEError + "\ndata: " + string(data) + "\n\n"))
}
