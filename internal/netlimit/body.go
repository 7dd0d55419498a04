package netlimit

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// BodyTimer bounds how slowly a request body may arrive (nginx's
// client_body_timeout with a minimum rate): the next bytes must come
// within Grace, and after Grace the body must have averaged at least Rate
// bytes per second. It sets the connection's read deadline through
// http.ResponseController, and clears it once the body ends, so that a
// long answer after it is not cut. Read returns an error wrapping
// ErrBodyTimeout when a deadline passed.
type BodyTimer struct {
	rc    io.ReadCloser
	ctl   *http.ResponseController
	start time.Time
	grace time.Duration
	rate  float64 // bytes per second
	n     int64
	done  bool
}

// ErrBodyTimeout is what a BodyTimer's Read wraps when the body was too
// slow.
var ErrBodyTimeout = errors.New("request body too slow")

// NewBodyTimer wraps r's body; w must be the handler's ResponseWriter.
func NewBodyTimer(w http.ResponseWriter, r *http.Request, grace time.Duration, rate uint64) *BodyTimer {
	return &BodyTimer{rc: r.Body, ctl: http.NewResponseController(w), start: time.Now(), grace: grace, rate: float64(max(rate, 1))}
}

// Read reads the body under the deadlines.
func (b *BodyTimer) Read(p []byte) (int, error) {
	if b.done {
		return b.rc.Read(p)
	}
	now := time.Now()
	dl := now.Add(b.grace)
	if byRate := b.start.Add(b.grace + time.Duration(float64(b.n)/b.rate*float64(time.Second))); byRate.Before(dl) {
		dl = byRate
	}
	_ = b.ctl.SetReadDeadline(dl)
	k, err := b.rc.Read(p)
	b.n += int64(k)
	if err != nil {
		b.finish()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return k, fmt.Errorf("%w: %w", ErrBodyTimeout, err)
		}
	}
	return k, err
}

// finish clears the read deadline: the body ended (or failed).
func (b *BodyTimer) finish() {
	if !b.done {
		b.done = true
		_ = b.ctl.SetReadDeadline(time.Time{})
	}
}

// Close closes the body and clears the deadline.
func (b *BodyTimer) Close() error {
	b.finish()
	return b.rc.Close()
}
