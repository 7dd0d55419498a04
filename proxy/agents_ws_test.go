package proxy

import (
	"bufio"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/internal/agenttest"
	"github.com/ctxd/ctxd/internal/fakeprovider"
)

// wsUpstream is a Responses upstream that offers the WebSocket transport,
// as OpenAI's own does: it accepts the upgrade on GET /v1/responses and
// answers each response.create event with a finished answer (a warm-up,
// generate false, with no output). It records when the first event that
// asks for an answer arrived: the agent's first model request.
type wsUpstream struct {
	srv    *httptest.Server
	marker string

	mu       sync.Mutex
	first    time.Time
	upgraded time.Time
	upgrades int
	posts    int
}

func newWSUpstream(t *testing.T, marker string) *wsUpstream {
	u := &wsUpstream{marker: marker}
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *wsUpstream) serve(w http.ResponseWriter, r *http.Request) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		u.mu.Lock()
		u.posts++
		u.mu.Unlock()
		http.Error(w, `{"error":{"message":"use the WebSocket","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	u.mu.Lock()
	u.upgrades++
	if u.upgraded.IsZero() {
		u.upgraded = time.Now()
	}
	u.mu.Unlock()
	sum := sha1.Sum([]byte(r.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	fmt.Fprintf(rw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", base64.StdEncoding.EncodeToString(sum[:]))
	if rw.Flush() != nil {
		return
	}
	for n := 0; ; n++ {
		op, payload, err := readFrame(rw.Reader)
		if err != nil {
			return
		}
		switch op {
		case 0x8: // close
			_ = writeFrame(rw, 0x8, nil)
			return
		case 0x9: // ping
			if writeFrame(rw, 0xA, payload) != nil {
				return
			}
			continue
		case 0x1:
		default:
			continue
		}
		var ev struct {
			Type     string `json:"type"`
			Generate *bool  `json:"generate"`
		}
		_ = json.Unmarshal(payload, &ev)
		if ev.Type != "response.create" {
			continue
		}
		warmup := ev.Generate != nil && !*ev.Generate
		if !warmup {
			u.mu.Lock()
			if u.first.IsZero() {
				u.first = time.Now()
			}
			u.mu.Unlock()
		}
		id := fmt.Sprintf("resp_ws%d", n)
		events := []string{fmt.Sprintf(`{"type":"response.created","response":{"id":%q,"model":"gpt-5.2-codex","status":"in_progress","output":[]}}`, id)}
		if !warmup {
			item := fmt.Sprintf(`{"type":"message","role":"assistant","id":"msg_ws%d","status":"completed","content":[{"type":"output_text","text":%q,"annotations":[]}]}`, n, u.marker)
			events = append(events, `{"type":"response.output_item.added","output_index":0,"item":`+item+`}`,
				`{"type":"response.output_item.done","output_index":0,"item":`+item+`}`)
		}
		events = append(events, fmt.Sprintf(`{"type":"response.completed","response":{"id":%q,"model":"gpt-5.2-codex","status":"completed","output":[],"usage":{"input_tokens":100,"input_tokens_details":{"cached_tokens":0},"output_tokens":5,"total_tokens":105}}}`, id))
		for _, e := range events {
			if writeFrame(rw, 0x1, []byte(e)) != nil {
				return
			}
		}
	}
}

// readFrame reads one client frame (masked, as RFC 6455 requires of a
// client), joining continuation frames.
func readFrame(r *bufio.Reader) (byte, []byte, error) {
	var op byte
	var out []byte
	for {
		var h [2]byte
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return 0, nil, err
		}
		n := uint64(h[1] & 0x7f)
		switch n {
		case 126:
			var b [2]byte
			if _, err := io.ReadFull(r, b[:]); err != nil {
				return 0, nil, err
			}
			n = uint64(binary.BigEndian.Uint16(b[:]))
		case 127:
			var b [8]byte
			if _, err := io.ReadFull(r, b[:]); err != nil {
				return 0, nil, err
			}
			n = binary.BigEndian.Uint64(b[:])
		}
		if n > 64<<20 {
			return 0, nil, fmt.Errorf("frame of %d bytes", n)
		}
		var mask [4]byte
		if h[1]&0x80 != 0 {
			if _, err := io.ReadFull(r, mask[:]); err != nil {
				return 0, nil, err
			}
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(r, p); err != nil {
			return 0, nil, err
		}
		if h[1]&0x80 != 0 {
			for i := range p {
				p[i] ^= mask[i%4]
			}
		}
		if h[0]&0x0f != 0 {
			op = h[0] & 0x0f
		}
		out = append(out, p...)
		if h[0]&0x80 != 0 {
			return op, out, nil
		}
	}
}

// writeFrame writes one unmasked server frame and flushes it.
func writeFrame(w *bufio.ReadWriter, op byte, p []byte) error {
	h := []byte{0x80 | op}
	switch n := len(p); {
	case n < 126:
		h = append(h, byte(n))
	case n < 1<<16:
		h = append(h, 126, byte(n>>8), byte(n))
	default:
		h = append(h, 127)
		h = binary.BigEndian.AppendUint64(h, uint64(n))
	}
	if _, err := w.Write(append(h, p...)); err != nil {
		return err
	}
	return w.Flush()
}

// TestCodexStartsAsFastAsDirect: the time from Codex's start to its first
// model request, direct to an upstream that offers the WebSocket transport
// (Codex answered over it) and through ctxd, which declines the upgrade
// with 426 so that Codex falls back to HTTP (docs/proxy.md "The WebSocket
// transport"). Through ctxd, one upgrade is declined and Codex's HTTP
// request follows it without a retry's back-off; the start-up times of
// both (best of three, interleaved) are logged as the figure.
func TestCodexStartsAsFastAsDirect(t *testing.T) {
	agenttest.Bin(t, agenttest.Codex)
	const marker = "CTXD-DONE-CODEX-DIRECT"
	direct := func() (time.Duration, time.Duration) {
		u := newWSUpstream(t, marker)
		start := time.Now()
		res := agenttest.Run{Agent: agenttest.Codex, BaseURL: u.srv.URL, Prompt: "Say done.", Timeout: 180e9, WebSockets: true}.Exec(t)
		u.mu.Lock()
		defer u.mu.Unlock()
		if res.ExitCode != 0 || !strings.Contains(res.FinalText(), marker) || u.first.IsZero() {
			t.Fatalf("direct over the WebSocket: exit %d, answer %q, %d upgrades, %d HTTP requests\n%s", res.ExitCode, res.FinalText(), u.upgrades, u.posts, tail(res.Stderr))
		}
		if u.posts != 0 {
			t.Errorf("direct: Codex used HTTP %d times though the WebSocket was offered", u.posts)
		}
		return u.first.Sub(start), u.first.Sub(u.upgraded)
	}
	// viaCtxd also gives the gap between the declined upgrade and the first
	// POST as ctxd saw them: the fallback's own cost, whatever Codex's
	// start-up costs on a loaded machine.
	viaCtxd := func() (time.Duration, time.Duration, Stats) {
		p := fakeprovider.Start(t, fakeprovider.Config{Rounds: 0, Marker: marker})
		cfg := testConfig()
		cfg.Proxy.Upstreams.OpenAI.BaseURL = p.URL()
		cfg.Models["gpt-5.2-codex"] = config.Model{ContextLimit: 400000, TokenFactor: 1}
		f := newFixture(t, cfg)
		var mu sync.Mutex
		var upgrade, post time.Time
		h := f.p.Handler()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		hs := &http.Server{ConnContext: f.p.ConnContext, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			switch {
			case r.Header.Get("Upgrade") != "" && upgrade.IsZero():
				upgrade = time.Now()
			case r.Method == "POST" && post.IsZero():
				post = time.Now()
			}
			mu.Unlock()
			h.ServeHTTP(w, r)
		})}
		go func() { _ = hs.Serve(l) }()
		t.Cleanup(func() { _ = hs.Close() })
		start := time.Now()
		res := agenttest.Run{Agent: agenttest.Codex, BaseURL: "http://" + l.Addr().String(), Prompt: "Say done.", Timeout: 180e9, WebSockets: true}.Exec(t)
		if res.ExitCode != 0 || !strings.Contains(res.FinalText(), marker) || len(p.Requests()) == 0 {
			agenttest.Log(t, res, p)
			t.Fatalf("through ctxd: exit %d, answer %q; proxy logs:\n%s", res.ExitCode, res.FinalText(), tail(f.logs.String()))
		}
		mu.Lock()
		defer mu.Unlock()
		if upgrade.IsZero() || post.IsZero() {
			t.Fatalf("through ctxd: upgrade at %v, first POST at %v", upgrade, post)
		}
		return p.Requests()[0].Time.Sub(start), post.Sub(upgrade), f.p.Stats()
	}
	// Interleaved, three of each; the best of each decides, so one slow
	// start of the agent under load does not.
	var ds, vs, dgaps, gaps []time.Duration
	for range 3 {
		d, dgap := direct()
		ds, dgaps = append(ds, d), append(dgaps, dgap)
		v, gap, s := viaCtxd()
		vs, gaps = append(vs, v), append(gaps, gap)
		if s.DeclinedUpgrades != 1 || s.PassedThrough != 0 || s.Managed == 0 {
			t.Errorf("through ctxd: stats %+v: want one upgrade declined, every request managed", s)
		}
	}
	t.Logf("start to first model request (best of three): direct over the WebSocket %v of %v, through ctxd (upgrade declined, HTTP) %v of %v", slices.Min(ds), ds, slices.Min(vs), vs)
	t.Logf("upgrade to first model request: direct %v, through ctxd %v", dgaps, gaps)
	// The fallback's own cost: from the upgrade to the first request.
	// Codex answers a declined upgrade it will retry with back-off (seven
	// upgrades, 6.5-7.3 s: TestCodexUpgradeAnswers' figures); falling back
	// at once takes under a second. Half the back-off separates the two on
	// a machine of any load; the start-up times are figures, logged above
	// and kept in docs/proxy.md, not asserted (the agent's own start-up
	// swings by seconds under load).
	if g := slices.Min(gaps); g > 3*time.Second {
		t.Errorf("from the declined upgrade to the first HTTP request: %s (direct over the WebSocket %v); Codex retried the upgrade", g, dgaps)
	}
}
