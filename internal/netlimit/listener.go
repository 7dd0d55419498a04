package netlimit

import (
	"io"
	"net"
	"strconv"
	"sync"
	"time"
)

// Listener caps the open connections of a listener (the role of nginx's
// limit_conn and Envoy's max_connections): one more connection is answered
// with Refusal (an HTTP 503 naming the limit) and closed. When IsOwner is
// set, OwnerShare of Max are kept for the connections it reports as the
// owner's: the others may hold at most Max-OwnerShare, so another user
// filling the listener never locks the daemon's own user out. Accepted
// connections count until closed.
type Listener struct {
	net.Listener
	// Max is the most connections open at once (at least 1).
	Max int
	// OwnerShare of Max are kept for the owner's connections (0: none).
	OwnerShare int
	// IsOwner reports whether c is the owner's (a unix socket peer with
	// the daemon's uid); nil means no connection is the owner's.
	IsOwner func(c net.Conn) bool
	// Refusal is the whole HTTP response written to a refused connection.
	Refusal []byte

	mu            sync.Mutex
	open, others  int
	refusing      int
	refused       uint64
	refuseTimeout time.Duration
}

// maxRefusing bounds the refusals under way (each reads what the client
// sent, for at most a second, so that it sees the 503 and not a reset).
const maxRefusing = 64

// Refusal503 is an HTTP/1.1 503 response with body (JSON) and
// Connection: close.
func Refusal503(body []byte) []byte {
	h := "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\nRetry-After: 1\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
	return append([]byte(h), body...)
}

// Accept returns the next connection within the limits; connections over
// them are refused here and never returned.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		owner := l.IsOwner != nil && l.IsOwner(c)
		l.mu.Lock()
		ok := l.open < l.Max
		if ok && !owner && l.IsOwner != nil {
			ok = l.others < l.Max-l.OwnerShare
		}
		if ok {
			l.open++
			if !owner {
				l.others++
			}
		} else {
			l.refused++
		}
		refuse := !ok && l.refusing < maxRefusing
		if refuse {
			l.refusing++
		}
		l.mu.Unlock()
		if ok {
			return &conn{Conn: c, l: l, owner: owner}, nil
		}
		if !refuse {
			_ = c.Close()
			continue
		}
		go l.refuse(c)
	}
}

// refuse answers c with the refusal and closes it, after reading what the
// client sent (up to a second and 64 KiB).
func (l *Listener) refuse(c net.Conn) {
	defer func() {
		l.mu.Lock()
		l.refusing--
		l.mu.Unlock()
	}()
	t := l.refuseTimeout
	if t == 0 {
		t = time.Second
	}
	_ = c.SetDeadline(time.Now().Add(t))
	_, _ = c.Write(l.Refusal)
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_, _ = io.CopyN(io.Discard, c, 64<<10)
	_ = c.Close()
}

// Stats are a Listener's counts.
type Stats struct {
	// Open is the connections open now, Others those not the owner's;
	// Refused the connections refused since start.
	Open, Others int
	Refused      uint64
}

// Stats returns the counts.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{Open: l.open, Others: l.others, Refused: l.refused}
}

type conn struct {
	net.Conn
	l     *Listener
	owner bool
	once  sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.open--
		if !c.owner {
			c.l.others--
		}
		c.l.mu.Unlock()
	})
	return err
}

// Unwrap returns the accepted connection (for peer credentials).
func (c *conn) Unwrap() net.Conn { return c.Conn }
