package proxy

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/history"
)

// watchLog is a log that records each write of a session with how many
// requests the upstream had received then, and, while fail is set, fails
// every write as a dead disk would (nothing stored: a crash before it).
type watchLog struct {
	checkpoint.Log
	up   *upstream
	fail atomic.Bool

	mu     sync.Mutex
	writes []logWrite
}

type logWrite struct {
	op, session string
	// upstreamHad is how many requests the upstream had received when
	// the write began.
	upstreamHad int
}

var errDeadDisk = errors.New("the disk is gone")

func (w *watchLog) note(op, session string) error {
	w.up.mu.Lock()
	had := len(w.up.reqs)
	w.up.mu.Unlock()
	w.mu.Lock()
	w.writes = append(w.writes, logWrite{op: op, session: session, upstreamHad: had})
	w.mu.Unlock()
	if w.fail.Load() {
		return errDeadDisk
	}
	return nil
}

// of returns the writes of session id ("": all), in order.
func (w *watchLog) of(id string) []logWrite {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []logWrite
	for _, x := range w.writes {
		if id == "" || x.session == id {
			out = append(out, x)
		}
	}
	return out
}

func (w *watchLog) CreateSession(ctx context.Context, session string, meta checkpoint.Meta) (checkpoint.Meta, error) {
	if err := w.note("CreateSession", session); err != nil {
		return checkpoint.Meta{}, err
	}
	return w.Log.CreateSession(ctx, session, meta)
}

func (w *watchLog) PutMeta(ctx context.Context, session string, meta checkpoint.Meta, events ...checkpoint.Event) (uint64, error) {
	if err := w.note("PutMeta", session); err != nil {
		return 0, err
	}
	return w.Log.PutMeta(ctx, session, meta, events...)
}

func (w *watchLog) Append(ctx context.Context, session string, events []checkpoint.Event) (uint64, error) {
	if err := w.note("Append", session); err != nil {
		return 0, err
	}
	return w.Log.Append(ctx, session, events)
}

func (w *watchLog) AppendAt(ctx context.Context, session string, after uint64, events []checkpoint.Event) (uint64, error) {
	if err := w.note("AppendAt", session); err != nil {
		return 0, err
	}
	return w.Log.AppendAt(ctx, session, after, events)
}

func (w *watchLog) PutCheckpoint(ctx context.Context, session string, cp checkpoint.Checkpoint) (checkpoint.Checkpoint, error) {
	if err := w.note("PutCheckpoint", session); err != nil {
		return checkpoint.Checkpoint{}, err
	}
	return w.Log.PutCheckpoint(ctx, session, cp)
}

func (w *watchLog) PutRow(session string, row []byte) error {
	if err := w.note("PutRow", session); err != nil {
		return err
	}
	return w.Log.PutRow(session, row)
}

func (w *watchLog) DeleteSession(ctx context.Context, session string) error {
	if err := w.note("DeleteSession", session); err != nil {
		return err
	}
	return w.Log.DeleteSession(ctx, session)
}

// watched is a fixture whose engine writes through a watchLog.
func watched(t *testing.T) (*fixture, *watchLog) {
	f := newFixture(t, testConfig())
	w := &watchLog{up: f.up}
	f.wrap = func(l checkpoint.Log) checkpoint.Log { w.Log = l; return w }
	f.restart()
	return f, w
}

// TestFirstRequestStoresNothingBeforeTheUpstream: a conversation's first
// request creates its session in memory only (docs/design.md §10
// "Recorded when accepted"): nothing of it is written — not the session,
// not its listing row — before the upstream has the request. The upstream
// refuses it (401): nothing is ever written. It accepts it: the session is
// stored first, then the request and its answer, which a new engine over
// the same store reads back.
func TestFirstRequestStoresNothingBeforeTheUpstream(t *testing.T) {
	f, w := watched(t)
	ctx := context.Background()
	c := newConversation().user("hello")
	f.up.script(reply{status: 401, body: authError})
	if resp, _ := f.post(c.body(), nil); resp.StatusCode != 401 {
		t.Fatalf("refused: the client got %d", resp.StatusCode)
	}
	if err := f.p.WaitRecords(ctx); err != nil {
		t.Fatal(err)
	}
	f.settle()
	if ws := w.of(""); len(ws) != 0 {
		t.Fatalf("a refused first request wrote %+v", ws)
	}

	f.up.script(textAnswer("hi"))
	resp, got := f.post(c.body(), nil)
	id := resp.Header.Get(HeaderSessionID)
	if resp.StatusCode != 200 || id == "" || !strings.Contains(string(got), "hi") {
		t.Fatalf("accepted: %d %q, session %q", resp.StatusCode, got, id)
	}
	if err := f.p.WaitRecords(ctx); err != nil {
		t.Fatal(err)
	}
	f.settle()
	ws := w.of(id)
	if len(ws) == 0 || ws[0].op != "CreateSession" {
		t.Fatalf("the session's writes %+v: want its creation first", ws)
	}
	for _, x := range ws {
		if x.upstreamHad < 2 {
			t.Fatalf("%s of the session before the upstream had the request (writes %+v)", x.op, ws)
		}
	}
	f.restart()
	a, err := f.eng.Context(ctx, id, engineNoPreSend)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Messages) != 2 || a.Messages[0].Role != history.RoleUser || a.Messages[1].Role != history.RoleAssistant {
		t.Fatalf("stored %d messages, want the request and its answer", len(a.Messages))
	}
}

// TestFirstRequestLostBeforeItsRecordCostsAReRecord: the store takes no
// write at all (the daemon dies before any record of the first request
// lands): the client still has its answer, since nothing durable is on
// its path, and nothing is stored. After a restart, the client's next
// request, which resends the first and its answer, goes to the same
// session, which then holds the whole conversation in order.
func TestFirstRequestLostBeforeItsRecordCostsAReRecord(t *testing.T) {
	f, w := watched(t)
	ctx := context.Background()
	w.fail.Store(true)
	c := newConversation().user("hello")
	f.up.script(textAnswer("answer one"))
	resp, got := f.post(c.body(), nil)
	id := resp.Header.Get(HeaderSessionID)
	if resp.StatusCode != 200 || id == "" || !strings.Contains(string(got), "answer one") {
		t.Fatalf("with the store failing: %d %q, session %q", resp.StatusCode, got, id)
	}
	if err := f.p.WaitRecords(ctx); err != nil {
		t.Fatal(err)
	}
	f.settle()
	if ids, err := f.cps.ListSessions(ctx); err != nil || len(ids) != 0 {
		t.Fatalf("stored sessions %v, %v: want none", ids, err)
	}
	w.fail.Store(false)
	f.restart()

	c.assistant(assistantText("answer one")).user("and now?")
	f.up.script(textAnswer("answer two"))
	resp, got = f.post(c.body(), nil)
	if resp.StatusCode != 200 || !strings.Contains(string(got), "answer two") {
		t.Fatalf("after the restart: %d %q", resp.StatusCode, got)
	}
	if h := resp.Header.Get(HeaderSessionID); h != id {
		t.Fatalf("the resend went to session %q, want %q", h, id)
	}
	if err := f.p.WaitRecords(ctx); err != nil {
		t.Fatal(err)
	}
	f.settle()
	f.restart()
	a, err := f.eng.Context(ctx, id, engineNoPreSend)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, m := range a.Messages {
		for _, b := range m.Content {
			texts = append(texts, string(m.Role)+": "+b.Text)
		}
	}
	want := []string{"user: hello", "assistant: answer one", "user: and now?", "assistant: answer two"}
	if strings.Join(texts, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the session holds\n%q\nwant\n%q", texts, want)
	}
}
