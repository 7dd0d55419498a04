package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
)

// SSEError is the SSE event name of a failure the server reports after the
// stream began (the status line was already sent): its data is an
// ErrorEnvelope, and the server closes the stream after it.
const SSEError = "error"

// maxEventBytes bounds one SSE event's data. An event carries at most one
// message, and a message arrived in a request of at most MaxRequestBytes.
const maxEventBytes = MaxRequestBytes + 1<<20

// EventsOptions selects what Client.StreamEvents reads.
type EventsOptions struct {
	// From is the first seq to send (inclusive); 0 means the first event.
	// To resume after a dropped stream, pass the last seq received + 1.
	From uint64
	// Follow keeps the stream open for new events once the log is sent.
	Follow bool
}

// Events streams the events of session id from seq fromSeq (inclusive) and
// then follows new ones, calling fn for each in seq order, until fn
// returns an error (returned as is), ctx ends (its error is returned,
// wrapped), or the stream breaks. A stream the daemon ends (shutdown, the
// session deleted) is an Unavailable error saying where to resume;
// reconnecting is the caller's choice: call Events again with the last seq
// seen + 1. Errors: NotFound.
func (c *Client) Events(ctx context.Context, id string, fromSeq uint64, fn func(Event) error) error {
	return c.StreamEvents(ctx, id, EventsOptions{From: fromSeq, Follow: true}, fn)
}

// StreamEvents reads the events of session id (RouteEvents) as selected by
// opt and calls fn for each, in seq order. Without opt.Follow it returns
// nil once the daemon has sent every event written so far; with it, see
// Events.
//
// The stream is text/event-stream: per event, an "id: <seq>" line, an
// "event: <kind>" line and one or more "data:" lines whose joined text is
// the Event as JSON, then a blank line. Lines starting with ":" are
// comments (the server's heartbeats, EventsHeartbeat) and are ignored, as
// are "retry:" lines. An event named SSEError carries an ErrorEnvelope,
// returned as *Error.
func (c *Client) StreamEvents(ctx context.Context, id string, opt EventsOptions, fn func(Event) error) error {
	if err := checkID("session", id); err != nil {
		return err
	}
	path := EventsPath(id, opt.From, opt.Follow)
	resp, err := c.request(ctx, http.MethodGet, path, nil, ContentTypeEventStream)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	last, err := readEvents(resp.Body, fn)
	if err == nil {
		if !opt.Follow {
			return nil
		}
		next := opt.From
		if last > 0 {
			next = last + 1
		}
		return Errorf(Unavailable, "", "ctxd ended the event stream of session %q; resume from seq %d", id, next)
	}
	if cb, ok := errors.AsType[callbackError](err); ok {
		return cb.err
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("ctxd: events of session %q: %w", id, ctxErr)
	}
	if _, ok := errors.AsType[*Error](err); ok {
		return err
	}
	return Errorf(Unavailable, "", "ctxd: events of session %q (%s): %w", id, c.where(), err)
}

// callbackError carries an error returned by the caller's fn out of
// readEvents, so that it is returned unchanged.
type callbackError struct{ err error }

func (e callbackError) Error() string { return e.err.Error() }
func (e callbackError) Unwrap() error { return e.err }

// readEvents parses a text/event-stream from r and calls fn with each
// event. It returns the last seq delivered, and nil at the end of r, the
// fn's error wrapped in callbackError, an *Error for an SSEError event, or
// the read or decode error.
func readEvents(r io.Reader, fn func(Event) error) (uint64, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var (
		last    uint64
		name    string
		lastID  string
		data    bytes.Buffer
		hasData bool
	)
	dispatch := func() error {
		defer func() { name, hasData = "", false; data.Reset() }()
		if !hasData || len(bytes.TrimSpace(data.Bytes())) == 0 {
			// An event without data is not dispatched (the SSE rules); one
			// with empty data carries nothing to decode.
			return nil
		}
		if name == SSEError {
			var env ErrorEnvelope
			if err := json.Unmarshal(data.Bytes(), &env); err != nil || env.Error == nil {
				return Errorf(Internal, "", "ctxd: event stream error: %s", bytes.TrimSpace(data.Bytes()))
			}
			if env.Error.Code == "" {
				env.Error.Code = Internal
			}
			return env.Error
		}
		var ev Event
		if err := json.Unmarshal(data.Bytes(), &ev); err != nil {
			return fmt.Errorf("decode event (id %q): %w", lastID, err)
		}
		if ev.Kind == "" {
			ev.Kind = EventKind(name)
		}
		if ev.Seq == 0 && lastID != "" {
			ev.Seq, _ = strconv.ParseUint(lastID, 10, 64)
		}
		if err := fn(ev); err != nil {
			return callbackError{err}
		}
		if ev.Seq > last {
			last = ev.Seq
		}
		return nil
	}
	var line []byte
	for {
		chunk, isPrefix, err := br.ReadLine()
		if err != nil {
			if err == io.EOF {
				// A partial event at the end of the stream is discarded, as
				// the SSE rules say.
				return last, nil
			}
			return last, err
		}
		if isPrefix || line != nil {
			line = append(line, chunk...)
			if len(line) > maxEventBytes {
				return last, fmt.Errorf("event stream line longer than %d bytes", maxEventBytes)
			}
			if isPrefix {
				continue
			}
			chunk, line = line, nil
		}
		if len(chunk) == 0 {
			if err := dispatch(); err != nil {
				return last, err
			}
			continue
		}
		if chunk[0] == ':' {
			continue // comment: heartbeat
		}
		field, value, _ := bytes.Cut(chunk, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			name = string(value)
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			data.Write(value)
			hasData = true
			if data.Len() > maxEventBytes {
				return last, fmt.Errorf("event stream event longer than %d bytes", maxEventBytes)
			}
		case "id":
			lastID = string(value)
		}
		// "retry" and unknown fields are ignored.
	}
}
