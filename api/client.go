package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultSocketPath returns the unix socket ctxd listens on when nothing
// else is configured, reading the environment through getenv (os.Getenv in
// production; a map in tests):
//
//  1. $CTXD_SOCKET (EnvSocket), when set and not empty;
//  2. $XDG_RUNTIME_DIR/ctxd.sock, when XDG_RUNTIME_DIR is set (that
//     directory is the user's own, mode 0700);
//  3. /tmp/ctxd-<uid>/ctxd.sock, a directory the daemon creates 0700
//     (docs/design.md §8b).
//
// The daemon and the Client use this same function, so both agree with no
// configuration at all.
func DefaultSocketPath(getenv func(string) string) string {
	if p := getenv(EnvSocket); p != "" {
		return p
	}
	if d := getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "ctxd.sock")
	}
	dir := "ctxd"
	if uid := os.Getuid(); uid >= 0 {
		dir = "ctxd-" + strconv.Itoa(uid)
	}
	return filepath.Join("/tmp", dir, "ctxd.sock")
}

// unixHost is the Host of requests sent over the unix socket. The server
// checks Host only on its TCP listener (docs/design.md §8b).
const unixHost = "ctxd"

// maxErrorBody is the most of an error response body the Client reads.
const maxErrorBody = 1 << 20

// Client talks to ctxd over its unix socket or, with BaseURL, over TCP. The
// zero value is ready to use: it connects to DefaultSocketPath(os.Getenv).
// Set the fields before the first request; a Client is safe for concurrent
// use after that.
//
// Every method takes the caller's context, which bounds the whole request
// (the Client sets no timeout of its own: a compaction with Wait or an
// event stream may rightly take minutes). Every error a method returns is
// an *Error, or wraps one, or is the context's error: ErrorCode(err) gives
// its code. A daemon that cannot be reached is Unavailable with the message
// "is ctxd running? socket: <path>: <cause>" (errors.Is reaches the cause);
// a socket refused by the ownership check or by the kernel (permission
// denied) is Forbidden, saying whose it is.
type Client struct {
	// Socket is the unix socket path. Empty means DefaultSocketPath(os.Getenv),
	// unless BaseURL is set.
	Socket string
	// BaseURL, e.g. "http://127.0.0.1:7411", makes the Client use TCP
	// instead of the socket.
	BaseURL string
	// Token is sent as "Authorization: Bearer <Token>" when set (required
	// by a TCP listener with daemon.auth_token_env, docs/design.md §8b).
	Token string
	// Dial, when set, replaces the dialer: it is called with ("unix",
	// socket path) in socket mode and with the transport's network and
	// address with BaseURL. Ignored when HTTPClient is set.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// HTTPClient, when set, sends every request as is; its transport must
	// reach the daemon (requests go to http://ctxd/… in socket mode). When
	// nil the Client builds one around Dial.
	HTTPClient *http.Client
	// UserAgent replaces the default "ctxd-client/<Version>", e.g.
	// "ctxctl/0.1.0".
	UserAgent string
	// TrustedUIDs are the uids besides the user's own and root whose
	// socket the Client uses (with those of EnvSocketOwner). Before each
	// connection the Client checks that the socket belongs to one of them
	// and that its directory does too and is not writable by others
	// (unless sticky), as ssh checks its agent socket; otherwise the
	// request fails Unavailable naming the owner.
	TrustedUIDs []uint32
	// SkipSocketCheck turns that check off.
	SkipSocketCheck bool
	// Retries is how many times AppendMessages sends an append again after
	// it failed with Unavailable (503: nothing was stored; also a daemon
	// that could not be reached) or Timeout (504: it may have been stored),
	// with the same Idempotency-Key — the request's, or a random one — so
	// that a retry of an append that was stored returns its first answer
	// instead of storing it twice. It waits the daemon's Retry-After, else
	// 1 s, 2 s, 4 s… (at most 10 s), within the caller's context. 0 means
	// no retry.
	Retries int

	once   sync.Once
	hc     *http.Client
	base   string // scheme and host of every request URL
	socket string // resolved socket path, "" with BaseURL
}

func (c *Client) init() {
	c.once.Do(func() {
		if c.BaseURL != "" {
			c.base = strings.TrimRight(c.BaseURL, "/")
		} else {
			c.socket = c.Socket
			if c.socket == "" {
				c.socket = DefaultSocketPath(os.Getenv)
			}
			c.base = "http://" + unixHost
		}
		if c.HTTPClient != nil {
			c.hc = c.HTTPClient
			return
		}
		dial := c.Dial
		if dial == nil {
			var d net.Dialer
			dial = d.DialContext
		}
		tr := &http.Transport{
			Proxy:               nil, // never send local traffic to a proxy
			MaxIdleConns:        100,
			MaxIdleConnsPerHost: 32, // many goroutines of one agent or load generator
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true, // local: compression only costs CPU
		}
		if socket := c.socket; socket != "" {
			// Checked at each dial (the socket may be replaced between
			// two): only with the real dialer, a Dial of the caller's
			// chooses its own socket.
			check := c.Dial == nil && !c.SkipSocketCheck
			trusted := append(trustedOwners(os.Getenv), c.TrustedUIDs...)
			tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
				if check {
					if err := checkSocket(socket, trusted); err != nil {
						return nil, err
					}
				}
				return dial(ctx, "unix", socket)
			}
		} else {
			tr.DialContext = dial
		}
		c.hc = &http.Client{Transport: tr}
	})
}

// SocketPath returns the socket the Client uses, "" when it uses BaseURL.
func (c *Client) SocketPath() string {
	c.init()
	return c.socket
}

// where names the daemon's address in connection errors.
func (c *Client) where() string {
	if c.socket != "" {
		return "socket: " + c.socket
	}
	return "address: " + c.base
}

// request sends one request and returns the response when its status is
// 2xx; otherwise it decodes the error body into an *Error. body, when not
// nil, is encoded as JSON.
func (c *Client) request(ctx context.Context, method, path string, body any, accept string) (*http.Response, error) {
	return c.requestHeader(ctx, method, path, nil, body, accept)
}

// requestHeader is request with extra headers.
func (c *Client) requestHeader(ctx context.Context, method, path string, hdr http.Header, body any, accept string) (*http.Response, error) {
	c.init()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, Errorf(Invalid, "", "ctxd client: encode %s %s request: %w", method, path, err)
		}
		if len(b) > MaxRequestBytes {
			return nil, Errorf(TooLarge, "", "request body is %d bytes, more than the limit of %d", len(b), MaxRequestBytes)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, Errorf(Invalid, "", "ctxd client: %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", ContentTypeJSON)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	ua := c.UserAgent
	if ua == "" {
		ua = "ctxd-client/" + Version
	}
	req.Header.Set("User-Agent", ua)
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			// The caller gave up: not the daemon's fault.
			return nil, fmt.Errorf("ctxd: %s %s: %w", method, path, ctxErr)
		}
		return nil, dialError(c.where(), err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	e := decodeError(resp)
	if s, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After"))); err == nil && s >= 0 {
		e.retryAfter = time.Duration(s) * time.Second
	}
	return nil, e
}

// socketRefusal is checkSocket's refusal of a socket the Client will not
// send to (another user's, in a directory others can write, not a socket).
type socketRefusal struct{ msg string }

func (e *socketRefusal) Error() string { return e.msg }

func socketRefusalf(format string, args ...any) error {
	return &socketRefusal{fmt.Sprintf(format, args...)}
}

// dialError is the *Error of a request that reached no daemon at where
// (Client.where): Forbidden when the socket was refused by the ownership
// check or by the kernel (permission denied: another user's socket or
// directory), else Unavailable, "is ctxd running? <where>: <cause>".
func dialError(where string, err error) *Error {
	if r, ok := errors.AsType[*socketRefusal](err); ok {
		return &Error{Code: Forbidden, Message: r.msg, cause: err}
	}
	if errors.Is(err, fs.ErrPermission) {
		return &Error{Code: Forbidden, Message: where + ": " + dialCause(err) +
			": the socket or its directory belongs to another user; use your own daemon, or ask its user to add your uid to daemon.allowed_uids (then set " + EnvSocketOwner + " to that user's uid)", cause: err}
	}
	return &Error{Code: Unavailable, Message: "is ctxd running? " + where + ": " + dialCause(err), cause: err}
}

// dialCause is the message of a transport error without what the caller
// knows already (the method, the URL, the socket path): e.g. "connect: no
// such file or directory".
func dialCause(err error) string {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		err = ue.Err
	}
	if oe, ok := errors.AsType[*net.OpError](err); ok && oe.Err != nil {
		err = oe.Err
	}
	return err.Error()
}

// decodeError turns a non-2xx response into an *Error: the envelope's when
// the body is one, else the code from the status and the body (or the
// status text) as message.
func decodeError(resp *http.Response) *Error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var env ErrorEnvelope
	if json.Unmarshal(b, &env) == nil && env.Error != nil && (env.Error.Code != "" || env.Error.Message != "") {
		e := env.Error
		if e.Code == "" {
			e.Code = CodeFromStatus(resp.StatusCode)
		}
		if e.Message == "" {
			e.Message = strings.ToLower(http.StatusText(resp.StatusCode))
		}
		return e
	}
	msg := strings.TrimSpace(string(b))
	if len(msg) > 512 {
		msg = msg[:512] + "…"
	}
	if msg == "" {
		msg = strings.ToLower(http.StatusText(resp.StatusCode))
	}
	if msg == "" {
		msg = "http status " + strconv.Itoa(resp.StatusCode)
	}
	return &Error{Code: CodeFromStatus(resp.StatusCode), Message: msg}
}

// do sends a JSON request and decodes a JSON response into out (when not
// nil).
func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	return c.doHeader(ctx, method, path, nil, body, out)
}

// doHeader is do with extra headers.
func (c *Client) doHeader(ctx context.Context, method, path string, hdr http.Header, body, out any) error {
	resp, err := c.requestHeader(ctx, method, path, hdr, body, ContentTypeJSON)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return c.readErr(ctx, method, path, err)
	}
	return nil
}

// raw sends a request and returns the whole response body.
func (c *Client) raw(ctx context.Context, method, path, accept string) ([]byte, error) {
	resp, err := c.request(ctx, method, path, nil, accept)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, c.readErr(ctx, method, path, err)
	}
	return b, nil
}

// readErr reports a failure while reading a response body.
func (c *Client) readErr(ctx context.Context, method, path string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("ctxd: %s %s: %w", method, path, ctxErr)
	}
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	if errors.As(err, &syn) || errors.As(err, &typ) {
		return Errorf(Internal, "", "ctxd: %s %s: decode response: %w", method, path, err)
	}
	return Errorf(Unavailable, "", "ctxd: %s %s: read response (%s): %w", method, path, c.where(), err)
}

// checkID rejects an empty id before it turns into a different path.
func checkID(what, id string) error {
	if id == "" {
		return Errorf(Invalid, "id", "%s id is empty", what)
	}
	return nil
}

// CreateSession creates a session (RouteCreateSession). Errors: Invalid,
// Conflict (the id exists), Unavailable.
func (c *Client) CreateSession(ctx context.Context, req CreateSessionRequest) (*Session, error) {
	var s Session
	if err := c.do(ctx, http.MethodPost, SessionsPath(), req, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// ListSessions lists every session, in the store's key order, paging
// through RouteListSessions with MaxListLimit sessions a request. Use
// ListSessionsPage or Sessions to hold one page at a time.
func (c *Client) ListSessions(ctx context.Context) ([]Session, error) {
	out := []Session{}
	for s, err := range c.Sessions(ctx, MaxListLimit) {
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// ListSessionsPage returns one page of RouteListSessions: at most limit
// sessions (0: the server's default) after the session id after ("" for
// the first page). Errors: Invalid (limit out of range, a malformed after).
func (c *Client) ListSessionsPage(ctx context.Context, after string, limit int) (*ListSessionsResponse, error) {
	var r ListSessionsResponse
	if err := c.do(ctx, http.MethodGet, SessionsPagePath(after, limit), nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Sessions yields every session, fetching pages of limit (0: the server's
// default) as it goes; on an error it yields the error once and stops.
func (c *Client) Sessions(ctx context.Context, limit int) iter.Seq2[Session, error] {
	return func(yield func(Session, error) bool) {
		after := ""
		for {
			page, err := c.ListSessionsPage(ctx, after, limit)
			if err != nil {
				yield(Session{}, err)
				return
			}
			for _, s := range page.Sessions {
				if !yield(s, nil) {
					return
				}
			}
			if page.Next == "" {
				return
			}
			after = page.Next
		}
	}
}

// GetSession describes session id (RouteGetSession). Errors: NotFound.
func (c *Client) GetSession(ctx context.Context, id string) (*Session, error) {
	if err := checkID("session", id); err != nil {
		return nil, err
	}
	var s Session
	if err := c.do(ctx, http.MethodGet, SessionPath(id), nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// PatchSession changes session id (RoutePatchSession) and returns it as
// changed. Errors: Invalid, NotFound.
func (c *Client) PatchSession(ctx context.Context, id string, req PatchSessionRequest) (*Session, error) {
	if err := checkID("session", id); err != nil {
		return nil, err
	}
	var s Session
	if err := c.do(ctx, http.MethodPatch, SessionPath(id), req, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// DeleteSession deletes session id (RouteDeleteSession). Errors: NotFound.
func (c *Client) DeleteSession(ctx context.Context, id string) error {
	if err := checkID("session", id); err != nil {
		return err
	}
	return c.do(ctx, http.MethodDelete, SessionPath(id), nil, nil)
}

// StartRun starts a new run of session id (RouteStartRun, docs/design.md §5.5).
// Errors: NotFound.
func (c *Client) StartRun(ctx context.Context, id string, req RunRequest) (*RunResponse, error) {
	if err := checkID("session", id); err != nil {
		return nil, err
	}
	var r RunResponse
	if err := c.do(ctx, http.MethodPost, RunsPath(id), req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// AppendMessages appends messages to session id (RouteAppendMessages) and
// returns them as stored. When it returns nil they are durable. Errors:
// Invalid (nothing stored; Field names the message and field), NotFound,
// TooLarge.
func (c *Client) AppendMessages(ctx context.Context, id string, req AppendMessagesRequest) (*AppendMessagesResponse, error) {
	if err := checkID("session", id); err != nil {
		return nil, err
	}
	key := req.IdempotencyKey
	if key == "" && c.Retries > 0 {
		key = newIdempotencyKey()
	}
	var hdr http.Header
	if key != "" {
		hdr = http.Header{HeaderIdempotencyKey: {key}}
	}
	for attempt := 0; ; attempt++ {
		var r AppendMessagesResponse
		err := c.doHeader(ctx, http.MethodPost, MessagesPath(id), hdr, req, &r)
		if err == nil {
			return &r, nil
		}
		code := ErrorCode(err)
		if attempt >= c.Retries || key == "" || (code != Unavailable && code != Timeout) || ctx.Err() != nil {
			return nil, err
		}
		wait := min(time.Duration(1<<attempt)*time.Second, maxRetryWait)
		if e, ok := errors.AsType[*Error](err); ok && e.retryAfter > 0 {
			wait = min(e.retryAfter, maxRetryWait)
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, err
		}
	}
}

// maxRetryWait bounds the wait between two tries of an append.
const maxRetryWait = 10 * time.Second

// newIdempotencyKey returns a random key: 128 bits in hex.
func newIdempotencyKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Context returns the assembled context of session id in FormatCanonical
// (RouteContext). It may wait for a pre-send compaction; if that failed,
// the uncompacted context comes back with Diagnostic set. Errors: NotFound.
func (c *Client) Context(ctx context.Context, id string) (*ContextResponse, error) {
	if err := checkID("session", id); err != nil {
		return nil, err
	}
	var r ContextResponse
	if err := c.do(ctx, http.MethodGet, ContextPath(id, FormatCanonical), nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// ContextRaw returns the assembled context of session id in format
// (FormatCanonical, FormatAnthropic, FormatOpenAI; "" is canonical) as the
// exact bytes the daemon sent: for the provider formats, a request body
// ready to send. Errors: Invalid (format), NotFound.
func (c *Client) ContextRaw(ctx context.Context, id, format string) (json.RawMessage, error) {
	if err := checkID("session", id); err != nil {
		return nil, err
	}
	return c.raw(ctx, http.MethodGet, ContextPath(id, format), ContentTypeJSON)
}

// Compact compacts session id now (RouteCompact). With req.Wait it returns
// once the compaction finished (Status CompactDone or CompactNothing);
// otherwise once it is queued (CompactQueued). Errors: Conflict (a tool
// round is open), NotFound, Unavailable (queue full), Upstream (every
// binding failed), Timeout.
func (c *Client) Compact(ctx context.Context, id string, req CompactRequest) (*CompactResponse, error) {
	if err := checkID("session", id); err != nil {
		return nil, err
	}
	var r CompactResponse
	if err := c.do(ctx, http.MethodPost, CompactPath(id), req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Checkpoints lists the checkpoints of session id, oldest first, with their
// summaries (RouteCheckpoints). Errors: NotFound.
func (c *Client) Checkpoints(ctx context.Context, id string) ([]Checkpoint, error) {
	if err := checkID("session", id); err != nil {
		return nil, err
	}
	var r CheckpointsResponse
	if err := c.do(ctx, http.MethodGet, CheckpointsPath(id), nil, &r); err != nil {
		return nil, err
	}
	return r.Checkpoints, nil
}

// Search finds the lines holding q in session id's stored history
// (RouteSearch): at most limit hits (0: the default) after the first
// offset. Errors: Invalid, NotFound.
func (c *Client) Search(ctx context.Context, id, q string, limit, offset int) (*SearchResponse, error) {
	if err := checkID("session", id); err != nil {
		return nil, err
	}
	var r SearchResponse
	if err := c.do(ctx, http.MethodGet, SearchPath(id, q, limit, offset), nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// ReadMessages reads a range of session id's original messages as text
// (RouteReadMessages). Errors: Invalid, NotFound.
func (c *Client) ReadMessages(ctx context.Context, id string, req ReadMessagesRequest) (*MessagesPage, error) {
	if err := checkID("session", id); err != nil {
		return nil, err
	}
	var r MessagesPage
	if err := c.do(ctx, http.MethodGet, ReadMessagesPath(id, req), nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Artifact returns the bytes of an artifact, by id or "artifact://<id>" URI
// (RouteArtifact). Errors: NotFound.
func (c *Client) Artifact(ctx context.Context, id string) ([]byte, error) {
	if err := checkID("artifact", ArtifactID(id)); err != nil {
		return nil, err
	}
	return c.raw(ctx, http.MethodGet, ArtifactPath(id), ContentTypeArtifact)
}

// Status describes the daemon (RouteStatus).
func (c *Client) Status(ctx context.Context) (*Status, error) {
	var s Status
	if err := c.do(ctx, http.MethodGet, StatusPath(), nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Metrics returns the daemon's Prometheus metrics, in the text exposition
// format (RouteMetrics).
func (c *Client) Metrics(ctx context.Context) ([]byte, error) {
	return c.raw(ctx, http.MethodGet, MetricsPath(), "text/plain")
}
