package proxy

import "context"

// An answer's durable record trails its response (docs/design.md §10
// "Recorded when accepted"; docs/decisions.md "The answer's record after
// the response"): the handler returns once the answer's last byte is
// forwarded, which ends the response for the client (on HTTP/1.1 the last
// chunk is written only then), and the record is written after it while the
// conversation's lane stays locked, so the conversation's next request
// waits for it. A crash in between loses only the record, never an answer
// the client lacks: the client's next request resends the answer, which is
// then recorded as new messages.

// trailHook, when set (tests), runs before each trailing record.
var trailHook func()

// trail runs f after the handler returns, counted for WaitRecords.
func (p *Proxy) trail(f func()) {
	p.trailing.Add(1)
	hook := trailHook
	go func() {
		defer p.trailing.Done()
		if hook != nil {
			hook()
		}
		f()
	}()
}

// WaitRecords waits until every answer whose response has ended is
// recorded, or until ctx ends (then it returns ctx's error and the records
// still running go on). Call it after the proxy's listeners stopped
// serving (http.Server.Shutdown) and before the engine closes.
func (p *Proxy) WaitRecords(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		p.trailing.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
