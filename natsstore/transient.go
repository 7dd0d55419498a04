package natsstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxd/ctxd/checkpoint"
)

// Riding out a stream's leader election (docs/decisions.md "Transient
// JetStream errors and uncertain writes"). While a stream elects a leader
// — a server lost, a graceful restart — JetStream answers "system
// temporarily unavailable" (10008), "cluster can not handle request"
// (10009), "stream is offline" (10118), or nothing at all (no responders,
// or a request that times out). An operation retries those within
// transientBound; then a read or a write known not to have been stored is
// checkpoint.ErrUnavailable (503 with Retry-After), and a write that may
// have been stored is checkpoint.ErrUncertain (504 saying so).

// transientBound is how long an operation retries transient errors.
var transientBound = 10 * time.Second

// tryTimeout bounds one try of an operation that may be retried after a
// time-out (reads, and publishes carrying a message id).
const tryTimeout = 3 * time.Second

// transient reports an error that a leader election or a lost quorum
// answers, after which nothing was done.
func transient(err error) bool {
	if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) {
		return true
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode {
		case 10008, 10009, 10118, 10023:
			return true
		}
	}
	return false
}

// timedOut reports a request that got no answer in time: its outcome is
// unknown.
func timedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
}

// opKind says what a retry of an operation may do.
type opKind int

const (
	// opRead changes nothing: any failure may be retried.
	opRead opKind = iota
	// opWriteIdempotent is a write a retry cannot repeat (a publish with
	// a message id, which JetStream de-duplicates): retried after a time-out
	// too.
	opWriteIdempotent
	// opWriteOnce is a write a retry could repeat or misreport: retried
	// only after an error that says nothing was done; a time-out ends it
	// as uncertain.
	opWriteOnce
)

// ride runs op until it succeeds, fails with an error that is not
// transient, or transient errors have lasted transientBound; op's context
// ends with ctx or, for retryable kinds, after tryTimeout. what names the
// operation in errors ("session \"s\": publish"). The connection being down
// ends it at once (up).
func (st *Store) ride(ctx context.Context, what string, kind opKind, op func(ctx context.Context) error) error {
	start := time.Now()
	wait := 50 * time.Millisecond
	maybeStored := false
	for {
		if err := st.up(); err != nil {
			if maybeStored {
				return fmt.Errorf("%w: storage: nats: %s: the connection was lost after a try that got no answer; it may have been stored: %w", checkpoint.ErrUncertain, what, err)
			}
			return err
		}
		tctx, cancel := ctx, context.CancelFunc(func() {})
		if kind != opWriteOnce {
			tctx, cancel = context.WithTimeout(ctx, tryTimeout)
		}
		err := op(tctx)
		cancel()
		if err == nil {
			return nil
		}
		retry := transient(err)
		if timedOut(err) {
			if kind != opRead {
				maybeStored = true
			}
			retry = kind != opWriteOnce && ctx.Err() == nil
		}
		elapsed := time.Since(start)
		if !retry || elapsed+wait > transientBound || ctx.Err() != nil {
			switch {
			case maybeStored:
				return fmt.Errorf("%w: storage: nats: %s: no acknowledgement within %v, so it may have been stored (%w)", checkpoint.ErrUncertain, what, elapsed.Round(time.Millisecond), err)
			case ctx.Err() != nil:
				return fmt.Errorf("storage: nats: %s: %w", what, ctx.Err())
			case retry || timedOut(err):
				return fmt.Errorf("%w: storage: nats: %s: JetStream did not serve it for %v (%w): a stream is electing a leader or lost its quorum; nothing was stored, try again shortly", checkpoint.ErrUnavailable, what, elapsed.Round(time.Millisecond), err)
			}
			return err
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}
