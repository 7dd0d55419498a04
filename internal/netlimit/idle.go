package netlimit

import (
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

// NewIdleBody is body ended when its next bytes do not come within d
// (IdleBody); key names the timeout in the error.
func NewIdleBody(body io.ReadCloser, d time.Duration, key string) *IdleBody {
	return &IdleBody{ReadCloser: body, d: d, key: key}
}

// IdleBody ends an upstream answer whose next bytes do not come within d
// while they are waited for (time the client takes to read is not
// counted): the body is closed, and Read fails naming key (the
// configuration key of the timeout).
type IdleBody struct {
	io.ReadCloser
	d     time.Duration
	key   string
	t     *time.Timer
	fired atomic.Bool
}

func (b *IdleBody) Read(p []byte) (int, error) {
	if b.t == nil {
		b.t = time.AfterFunc(b.d, func() {
			b.fired.Store(true)
			_ = b.ReadCloser.Close()
		})
	} else {
		b.t.Reset(b.d)
	}
	n, err := b.ReadCloser.Read(p)
	b.t.Stop()
	if err != nil && b.fired.Load() {
		err = fmt.Errorf("ctxd proxy: the upstream sent nothing for %s (%s): %w", b.d, b.key, err)
	}
	return n, err
}

func (b *IdleBody) Close() error {
	if b.t != nil {
		b.t.Stop()
	}
	return b.ReadCloser.Close()
}
