package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/store"
)

var bg = context.Background()

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// newStore returns a Store over an in-memory badger with its logger off,
// and a clock that ticks one second per reading.
func newStore(t testing.TB) (*Store, *badger.DB) {
	t.Helper()
	db, err := store.OpenInMemory()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	now := t0
	st := Open(db, Options{Now: func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(time.Second)
		return now
	}})
	t.Cleanup(func() {
		st.Close()
		db.Close()
	})
	return st, db
}

// newDiskStore opens a Store on disk in dir with sync_writes on.
func newDiskStore(t testing.TB, dir string) *Store {
	t.Helper()
	db, err := store.Open(dir, store.Options{SyncWrites: true})
	if err != nil {
		t.Fatal(err)
	}
	st := Open(db, Options{})
	t.Cleanup(func() {
		st.Close()
		db.Close()
	})
	return st
}

func create(t testing.TB, st *Store, id string) {
	t.Helper()
	if _, err := st.CreateSession(bg, id, Meta{Model: "claude-test", ContextLimit: 200000}); err != nil {
		t.Fatal(err)
	}
}

func msg(role history.Role, text string) Event {
	m := &history.Message{Role: role, Content: []history.Block{{Type: history.BlockText, Text: text}}}
	if role == history.RoleTool {
		m.ToolCallID, m.ToolName = "call_1", "bash"
	}
	return Event{Kind: KindMessage, Message: m}
}

func all(t testing.TB, st *Store, id string, from uint64) []Event {
	t.Helper()
	var evs []Event
	if err := st.Range(bg, id, from, func(e Event) error { evs = append(evs, e); return nil }); err != nil {
		t.Fatal(err)
	}
	return evs
}

func TestAppendRange(t *testing.T) {
	st, _ := newStore(t)
	create(t, st, "s1")
	create(t, st, "s2")
	given := time.Date(2025, 5, 6, 7, 8, 9, 10, time.FixedZone("X", 3600))
	evs := []Event{
		msg(history.RoleUser, "hello <world> & co"),
		{Kind: KindMessage, Message: &history.Message{Role: history.RoleAssistant, Content: []history.Block{
			{Type: history.BlockThinking, Text: "hmm", Signature: "sig=="},
			{Type: history.BlockToolCall, ID: "call_1", Name: "bash", Input: json.RawMessage(`{"cmd":"ls"}`)},
		}, Usage: &history.Usage{InputTokens: 10, OutputTokens: 5}, Seq: 99}},
		msg(history.RoleTool, "file.go"),
		{Kind: KindUsage, Data: json.RawMessage(`{ "seq" : 2 }`), Time: given},
		{Kind: KindRunStarted},
	}
	first, err := st.Append(bg, "s1", evs)
	if err != nil || first != 1 {
		t.Fatalf("Append = %d, %v; want 1", first, err)
	}
	if evs[1].Message.Seq != 99 {
		t.Error("Append modified the caller's message")
	}
	if first, err := st.Append(bg, "s2", evs[:1]); err != nil || first != 1 {
		t.Fatalf("other session: Append = %d, %v; want 1", first, err)
	}
	if first, err := st.Append(bg, "s1", evs[:2]); err != nil || first != 6 {
		t.Fatalf("second Append = %d, %v; want 6", first, err)
	}
	got := all(t, st, "s1", 0)
	if len(got) != 7 {
		t.Fatalf("got %d events, want 7", len(got))
	}
	for i, e := range got {
		if e.Seq != uint64(i+1) {
			t.Errorf("event %d has seq %d", i, e.Seq)
		}
		if e.Message != nil && e.Message.Seq != e.Seq {
			t.Errorf("event %d: message seq %d", e.Seq, e.Message.Seq)
		}
		if e.Time.Location() != time.UTC || e.Time.IsZero() {
			t.Errorf("event %d: time %v not set in UTC", e.Seq, e.Time)
		}
	}
	if !got[3].Time.Equal(given) {
		t.Errorf("given time %v came back as %v", given, got[3].Time)
	}
	if string(got[3].Data) != `{ "seq" : 2 }` {
		t.Errorf("data not byte for byte: %s", got[3].Data)
	}
	// The message re-encodes to the same bytes as the one appended.
	want := *evs[1].Message
	want.Seq = 2
	wb, _ := history.Encode(want)
	gb, _ := history.Encode(*got[1].Message)
	if string(wb) != string(gb) {
		t.Errorf("message changed:\n got %s\nwant %s", gb, wb)
	}
	if got[0].Message.Content[0].Text != "hello <world> & co" {
		t.Errorf("text changed: %q", got[0].Message.Content[0].Text)
	}
	if tail := all(t, st, "s1", 6); len(tail) != 2 || tail[0].Seq != 6 {
		t.Errorf("Range from 6: %d events", len(tail))
	}
	if last, err := st.LastSeq(bg, "s1"); err != nil || last != 7 {
		t.Errorf("LastSeq = %d, %v", last, err)
	}
	stop := errors.New("stop")
	n := 0
	if err := st.Range(bg, "s1", 1, func(Event) error { n++; return stop }); err != stop || n != 1 {
		t.Errorf("Range did not stop at fn's error: %v after %d", err, n)
	}
}

func TestBadSessionIDs(t *testing.T) {
	st, _ := newStore(t)
	for _, id := range []string{"", "a/b", "..", ".", "sp ace", "é", "a\x00b", strings.Repeat("x", 129), "s/x"} {
		t.Run(fmt.Sprintf("%q", id), func(t *testing.T) {
			if _, err := st.CreateSession(bg, id, Meta{}); !errors.Is(err, ErrInvalid) {
				t.Errorf("CreateSession: %v, want ErrInvalid", err)
			}
			if _, err := st.Append(bg, id, []Event{msg(history.RoleUser, "x")}); !errors.Is(err, ErrInvalid) {
				t.Errorf("Append: %v, want ErrInvalid", err)
			}
			if _, err := st.GetMeta(bg, id); !errors.Is(err, ErrInvalid) {
				t.Errorf("GetMeta: %v, want ErrInvalid", err)
			}
		})
	}
	if err := ValidSessionID(strings.Repeat("x", 128)); err != nil {
		t.Errorf("128-byte id: %v", err)
	}
	if err := ValidSessionID("Ab.9_-z"); err != nil {
		t.Errorf("valid id: %v", err)
	}
	if ids, _ := st.ListSessions(bg); len(ids) != 0 {
		t.Errorf("bad ids stored sessions: %v", ids)
	}
}

func TestUnknownSession(t *testing.T) {
	st, _ := newStore(t)
	create(t, st, "known")
	calls := map[string]func() error{
		"Append":  func() error { _, err := st.Append(bg, "nope", []Event{msg(history.RoleUser, "x")}); return err },
		"GetMeta": func() error { _, err := st.GetMeta(bg, "nope"); return err },
		"PutMeta": func() error { _, err := st.PutMeta(bg, "nope", Meta{}); return err },
		"Range":   func() error { return st.Range(bg, "nope", 1, func(Event) error { return nil }) },
		"LastSeq": func() error { _, err := st.LastSeq(bg, "nope"); return err },
		"Wait":    func() error { _, err := st.Wait(bg, "nope", 0); return err },
		"PutCheckpoint": func() error {
			_, err := st.PutCheckpoint(bg, "nope", Checkpoint{Summary: "s", SnapshotSeq: 1})
			return err
		},
		"Latest":          func() error { _, _, err := st.Latest(bg, "nope"); return err },
		"GetCheckpoint":   func() error { _, err := st.GetCheckpoint(bg, "known", 1); return err },
		"ListCheckpoints": func() error { _, err := st.ListCheckpoints(bg, "nope"); return err },
		"DeleteSession":   func() error { return st.DeleteSession(bg, "nope") },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			err := call()
			if !errors.Is(err, ErrNotFound) {
				t.Fatalf("got %v, want ErrNotFound", err)
			}
			if name != "GetCheckpoint" && !strings.Contains(err.Error(), `"nope"`) {
				t.Errorf("error %q does not name the session", err)
			}
		})
	}
	if ids, _ := st.ListSessions(bg); len(ids) != 1 {
		t.Errorf("sessions = %v, want only known", ids)
	}
	if len(st.sessions) != 1 {
		t.Errorf("%d session states kept in memory, want 1", len(st.sessions))
	}
	if _, err := st.CreateSession(bg, "known", Meta{}); !errors.Is(err, ErrExists) {
		t.Errorf("second CreateSession: %v, want ErrExists", err)
	}
}

func TestBadEvents(t *testing.T) {
	st, _ := newStore(t)
	create(t, st, "s")
	if _, err := st.Append(bg, "s", []Event{msg(history.RoleUser, "one")}); err != nil {
		t.Fatal(err)
	}
	good := msg(history.RoleUser, "fine")
	cases := []struct {
		name string
		evs  []Event
		want string
	}{
		{"no events", nil, "no events"},
		{"no kind", []Event{{Data: json.RawMessage(`{}`)}}, "no kind"},
		{"unknown kind", []Event{{Kind: "explosion"}}, `unknown event kind "explosion"`},
		{"checkpoint kind", []Event{{Kind: KindCheckpoint, Data: json.RawMessage(`{}`)}}, "PutCheckpoint"},
		{"message without message", []Event{{Kind: KindMessage}}, "without a message"},
		{"message on other kind", []Event{{Kind: KindUsage, Message: good.Message}}, "carries a message"},
		{"bad json", []Event{{Kind: KindDiagnostic, Data: json.RawMessage(`{"a":`)}}, "not valid JSON"},
		{"seq set", []Event{{Kind: KindRunStarted, Seq: 7}}, "assigned by the log"},
		{"no role", []Event{{Kind: KindMessage, Message: &history.Message{}}}, "no role"},
		{"bad role", []Event{{Kind: KindMessage, Message: &history.Message{Role: "developer"}}}, `"developer"`},
		{"tool without call id", []Event{{Kind: KindMessage, Message: &history.Message{Role: history.RoleTool}}}, "tool_call_id"},
		{"invalid utf-8", []Event{{Kind: KindMessage, Message: &history.Message{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: "a\xffb"}}}}}, "invalid UTF-8"},
		{"bad json block", []Event{{Kind: KindMessage, Message: &history.Message{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockJSON, JSON: json.RawMessage(`{"a"`)}}}}}, "invalid JSON"},
		{"good then bad", []Event{good, good, {Kind: KindMessage}}, "event 2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := st.Append(bg, "s", c.evs)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want ErrInvalid mentioning %q", err, c.want)
			}
			if len(c.evs) == 0 {
				return
			}
			if _, err := st.PutMeta(bg, "s", Meta{}, c.evs...); !errors.Is(err, ErrInvalid) {
				t.Fatalf("PutMeta: got %v, want ErrInvalid", err)
			}
		})
	}
	if evs := all(t, st, "s", 1); len(evs) != 1 {
		t.Errorf("bad input stored something: %d events", len(evs))
	}
	if m, _ := st.GetMeta(bg, "s"); m.Model != "claude-test" {
		t.Errorf("bad PutMeta changed meta: %+v", m)
	}
	if _, err := st.PutMeta(bg, "s", Meta{Tools: json.RawMessage(`[`)}); !errors.Is(err, ErrInvalid) {
		t.Errorf("meta with bad tools JSON: %v", err)
	}
}

func TestTooLarge(t *testing.T) {
	st := newDiskStore(t, t.TempDir())
	create(t, st, "s")
	// Events under the value threshold count in full: enough of them
	// exceed one transaction.
	ev := Event{Kind: KindDiagnostic, Data: json.RawMessage(`"` + strings.Repeat("x", 3000) + `"`)}
	evs := make([]Event, 1000)
	for i := range evs {
		evs[i] = ev
	}
	if _, err := st.Append(bg, "s", evs); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v, want ErrTooLarge", err)
	}
	if last, _ := st.LastSeq(bg, "s"); last != 0 {
		t.Fatalf("too-large append stored events: last seq %d", last)
	}
	// Large events go to the value log and count a few bytes each.
	big := Event{Kind: KindDiagnostic, Data: json.RawMessage(`"` + strings.Repeat("y", 100000) + `"`)}
	if first, err := st.Append(bg, "s", []Event{big, big, big, big, big, big, big, big, big, big, big, big, big, big, big, big}); err != nil || first != 1 {
		t.Fatalf("16 × 100 KB: %d, %v", first, err)
	}
}

func TestCheckpoints(t *testing.T) {
	st, _ := newStore(t)
	create(t, st, "s")
	if _, ok, err := st.Latest(bg, "s"); ok || err != nil {
		t.Fatalf("Latest of a new session: %v, %v", ok, err)
	}
	for i := range 6 {
		if _, err := st.Append(bg, "s", []Event{msg(history.RoleUser, fmt.Sprint("m", i))}); err != nil {
			t.Fatal(err)
		}
	}
	cp, err := st.PutCheckpoint(bg, "s", Checkpoint{
		Summary: "summary one", SnapshotSeq: 5, FirstRetainedSeq: 4, SummarizedMessages: 3,
		Binding: "extractive", TokensBefore: 1000, TokensAfter: 100, Shape: "keep-tail", Reason: "manual",
	})
	if err != nil {
		t.Fatal(err)
	}
	if cp.Seq != 7 || cp.SummaryBytes != 11 || cp.Time.IsZero() {
		t.Fatalf("checkpoint = %+v", cp)
	}
	if _, err := st.Append(bg, "s", []Event{msg(history.RoleUser, "after")}); err != nil {
		t.Fatal(err)
	}
	cp2, err := st.PutCheckpoint(bg, "s", Checkpoint{Summary: "summary two", SnapshotSeq: 8, Stalled: true, PrunedRetry: true, Binding: "b"})
	if err != nil || cp2.Seq != 9 {
		t.Fatalf("second checkpoint: %+v, %v", cp2, err)
	}
	latest, ok, err := st.Latest(bg, "s")
	if err != nil || !ok || latest != cp2 {
		t.Fatalf("Latest = %+v, %v, %v; want %+v", latest, ok, err, cp2)
	}
	if got, err := st.GetCheckpoint(bg, "s", 7); err != nil || got != cp {
		t.Fatalf("GetCheckpoint(7) = %+v, %v", got, err)
	}
	if _, err := st.GetCheckpoint(bg, "s", 8); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetCheckpoint of a message: %v", err)
	}
	list, err := st.ListCheckpoints(bg, "s")
	if err != nil || len(list) != 2 || list[0] != cp || list[1] != cp2 {
		t.Fatalf("ListCheckpoints = %+v, %v", list, err)
	}
	evs := all(t, st, "s", 7)
	if evs[0].Kind != KindCheckpoint || evs[0].Seq != 7 || !evs[0].Time.Equal(cp.Time) {
		t.Fatalf("checkpoint event = %+v", evs[0])
	}
	var ce CheckpointEvent
	if err := json.Unmarshal(evs[0].Data, &ce); err != nil || ce != cp.event() {
		t.Fatalf("checkpoint event data %s: %v", evs[0].Data, err)
	}
	meta, _ := st.GetMeta(bg, "s")
	if meta.LatestCheckpoint != 9 || meta.Checkpoints != 2 {
		t.Fatalf("meta = %+v", meta)
	}

	// PutMeta keeps the log-owned fields and appends its events.
	first, err := st.PutMeta(bg, "s", Meta{Model: "other", SystemPrompt: "be brief", Checkpoints: 99, Created: t0},
		Event{Kind: KindSessionUpdated, Data: json.RawMessage(`{"system_prompt_digest":"x"}`)})
	if err != nil || first != 10 {
		t.Fatalf("PutMeta = %d, %v", first, err)
	}
	m2, _ := st.GetMeta(bg, "s")
	if m2.Model != "other" || m2.SystemPrompt != "be brief" || m2.Checkpoints != 2 || m2.LatestCheckpoint != 9 ||
		!m2.Created.Equal(meta.Created) || !m2.Updated.After(meta.Updated) {
		t.Fatalf("meta after PutMeta = %+v", m2)
	}
	if first, err := st.PutMeta(bg, "s", m2); err != nil || first != 0 {
		t.Fatalf("PutMeta without events = %d, %v", first, err)
	}

	bad := []struct {
		name string
		cp   Checkpoint
		want string
	}{
		{"empty summary", Checkpoint{SnapshotSeq: 9}, "empty summary"},
		{"bytes mismatch", Checkpoint{Summary: "abc", SummaryBytes: 4, SnapshotSeq: 9}, "summary_bytes"},
		{"no snapshot", Checkpoint{Summary: "abc"}, "no snapshot_seq"},
		{"snapshot past end", Checkpoint{Summary: "abc", SnapshotSeq: 11}, "past the last event"},
		{"retained after snapshot", Checkpoint{Summary: "abc", SnapshotSeq: 9, FirstRetainedSeq: 10}, "first_retained_seq"},
		{"seq set", Checkpoint{Summary: "abc", SnapshotSeq: 9, Seq: 3}, "assigned by the log"},
		{"snapshot goes back", Checkpoint{Summary: "abc", SnapshotSeq: 7}, "precedes the previous"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			_, err := st.PutCheckpoint(bg, "s", c.cp)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want ErrInvalid mentioning %q", err, c.want)
			}
		})
	}
	if l, _ := st.ListCheckpoints(bg, "s"); len(l) != 2 {
		t.Errorf("bad checkpoints stored: %d", len(l))
	}
	if last, _ := st.LastSeq(bg, "s"); last != 10 {
		t.Errorf("bad checkpoints appended events: last %d", last)
	}
}

func TestConcurrentAppends(t *testing.T) {
	st, _ := newStore(t)
	const sessions, writers, each = 4, 16, 25
	for i := range sessions {
		create(t, st, fmt.Sprint("s", i))
	}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprint("s", w%sessions)
			for i := range each {
				d := json.RawMessage(fmt.Sprintf(`{"w":%d,"i":%d}`, w, i))
				if _, err := st.Append(bg, id, []Event{{Kind: KindDiagnostic, Data: d}, {Kind: KindDiagnostic, Data: d}}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for s := range sessions {
		evs := all(t, st, fmt.Sprint("s", s), 1)
		if len(evs) != 2*each*writers/sessions {
			t.Fatalf("session %d: %d events", s, len(evs))
		}
		next := map[int]int{}
		for i, e := range evs {
			var d struct{ W, I int }
			json.Unmarshal(e.Data, &d)
			if e.Seq != uint64(i+1) {
				t.Fatalf("seq %d at %d", e.Seq, i)
			}
			// Each call's two events are adjacent; each writer's calls in order.
			if i%2 == 1 && string(evs[i-1].Data) != string(e.Data) {
				t.Fatalf("one append split at seq %d", e.Seq)
			}
			if i%2 == 0 {
				if d.I != next[d.W] {
					t.Fatalf("writer %d: call %d out of order", d.W, d.I)
				}
				next[d.W]++
			}
		}
	}
}

func TestDeleteSession(t *testing.T) {
	st, db := newStore(t)
	create(t, st, "a")
	create(t, st, "a-b")
	create(t, st, "ab")
	if _, err := st.Append(bg, "a", []Event{msg(history.RoleUser, "x"), msg(history.RoleUser, "y")}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutCheckpoint(bg, "a", Checkpoint{Summary: "s", SnapshotSeq: 2}); err != nil {
		t.Fatal(err)
	}
	if ids, _ := st.ListSessions(bg); strings.Join(ids, ",") != "a,a-b,ab" {
		t.Fatalf("ListSessions = %v", ids)
	}
	if err := st.DeleteSession(bg, "a"); err != nil {
		t.Fatal(err)
	}
	if ids, _ := st.ListSessions(bg); strings.Join(ids, ",") != "a-b,ab" {
		t.Fatalf("after delete: %v", ids)
	}
	if _, err := st.Append(bg, "a", []Event{msg(history.RoleUser, "x")}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("append to deleted: %v", err)
	}
	n := 0
	db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte("s/a/")})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	})
	if n != 0 {
		t.Fatalf("%d keys left after delete", n)
	}

	// A delete a crash interrupted leaves keys without meta: invisible,
	// and cleared when the id is created again.
	db.Update(func(txn *badger.Txn) error {
		return txn.Set(seqKey(eventPrefix("a"), 5), []byte("junk"))
	})
	if ids, _ := st.ListSessions(bg); strings.Join(ids, ",") != "a-b,ab" {
		t.Fatalf("leftovers listed: %v", ids)
	}
	create(t, st, "a")
	if evs := all(t, st, "a", 1); len(evs) != 0 {
		t.Fatalf("recreated session inherited %d events", len(evs))
	}
	if first, err := st.Append(bg, "a", []Event{msg(history.RoleUser, "new")}); err != nil || first != 1 {
		t.Fatalf("append to recreated = %d, %v", first, err)
	}
	if _, ok, _ := st.Latest(bg, "a"); ok {
		t.Fatal("recreated session has a checkpoint")
	}
}

func TestWait(t *testing.T) {
	st, _ := newStore(t)
	create(t, st, "s")
	got := make(chan uint64)
	go func() {
		last, err := st.Wait(bg, "s", 0)
		if err != nil {
			t.Error(err)
		}
		got <- last
	}()
	if _, err := st.Append(bg, "s", []Event{msg(history.RoleUser, "x"), msg(history.RoleUser, "y")}); err != nil {
		t.Fatal(err)
	}
	if last := <-got; last != 2 {
		t.Fatalf("Wait = %d, want 2", last)
	}
	if last, err := st.Wait(bg, "s", 1); err != nil || last != 2 {
		t.Fatalf("Wait for an existing seq = %d, %v", last, err)
	}
	ctx, cancel := context.WithTimeout(bg, 10*time.Millisecond)
	defer cancel()
	if _, err := st.Wait(ctx, "s", 2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait past the end: %v", err)
	}
	errc := make(chan error)
	go func() { _, err := st.Wait(bg, "s", 2); errc <- err }()
	time.Sleep(5 * time.Millisecond) // let it block; the outcome is the same either way
	if err := st.DeleteSession(bg, "s"); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrNotFound) {
		t.Fatalf("Wait on a deleted session: %v", err)
	}
}

func TestReopen(t *testing.T) {
	dir := t.TempDir()
	db, err := store.Open(dir, store.Options{SyncWrites: true})
	if err != nil {
		t.Fatal(err)
	}
	st := Open(db, Options{})
	create(t, st, "s")
	if _, err := st.Append(bg, "s", []Event{msg(history.RoleUser, "a"), msg(history.RoleAssistant, "b")}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutCheckpoint(bg, "s", Checkpoint{Summary: "sum", SnapshotSeq: 2}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if _, err := st.Append(bg, "s", []Event{msg(history.RoleUser, "late")}); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	db.Close()

	db, err = store.Open(dir, store.Options{SyncWrites: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st = Open(db, Options{})
	defer st.Close()
	if first, err := st.Append(bg, "s", []Event{msg(history.RoleUser, "c")}); err != nil || first != 4 {
		t.Fatalf("append after reopen = %d, %v; want 4", first, err)
	}
	if cp, ok, err := st.Latest(bg, "s"); err != nil || !ok || cp.Seq != 3 || cp.Summary != "sum" {
		t.Fatalf("Latest after reopen = %+v, %v, %v", cp, ok, err)
	}
}

// pageIDs lists every session page by page and returns the ids of each
// page, joined by commas, pages separated by "|".
func pageIDs(t *testing.T, st *Store, limit int) string {
	t.Helper()
	var pages []string
	after := ""
	for {
		page, more, err := st.ListPage(bg, after, limit)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, l := range page {
			ids = append(ids, l.ID)
		}
		pages = append(pages, strings.Join(ids, ","))
		if !more {
			return strings.Join(pages, "|")
		}
		after = page[len(page)-1].ID
	}
}

// TestListPage: pages in key order (id + "/"), a stable cursor across
// creations and deletions, each session with its meta, listing row and
// last seq; a row written after a delete is not a session.
func TestListPage(t *testing.T) {
	st, _ := newStore(t)
	for _, id := range []string{"b", "a", "ab", "a-b", "c"} {
		create(t, st, id)
	}
	if got := pageIDs(t, st, 2); got != "a-b,a|ab,b|c" {
		t.Fatalf("pages %q, want a-b,a|ab,b|c", got)
	}
	if got := pageIDs(t, st, 5); got != "a-b,a,ab,b,c" {
		t.Fatalf("one page %q", got)
	}
	if n, err := st.CountSessions(bg); err != nil || n != 5 {
		t.Fatalf("CountSessions = %d, %v", n, err)
	}

	// The cursor survives the deletion of the session it names and new
	// sessions on either side of it.
	page, more, err := st.ListPage(bg, "", 2)
	if err != nil || !more || page[1].ID != "a" {
		t.Fatalf("first page %+v %v %v", page, more, err)
	}
	if err := st.DeleteSession(bg, "a"); err != nil {
		t.Fatal(err)
	}
	create(t, st, "0")
	create(t, st, "aa")
	page, more, err = st.ListPage(bg, "a", 2)
	if err != nil || more != true || len(page) != 2 || page[0].ID != "aa" || page[1].ID != "ab" {
		t.Fatalf("after the deleted cursor: %+v %v %v", page, more, err)
	}

	// Rows and last seqs.
	if _, err := st.Append(bg, "b", []Event{msg(history.RoleUser, "x"), msg(history.RoleUser, "y")}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutRow("b", []byte(`{"messages":2}`)); err != nil {
		t.Fatal(err)
	}
	if err := st.PutRow("c", bytes.Repeat([]byte("x"), MaxRowBytes+1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized row: %v", err)
	}
	if err := st.PutRow("bad/id", nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad id: %v", err)
	}
	// PutRow does not wait; a synchronous write after it commits after it.
	if _, err := st.Append(bg, "c", []Event{msg(history.RoleUser, "z")}); err != nil {
		t.Fatal(err)
	}
	page, _, err = st.ListPage(bg, "ab", 2)
	if err != nil || len(page) != 2 {
		t.Fatalf("page %+v %v", page, err)
	}
	if page[0].ID != "b" || string(page[0].Row) != `{"messages":2}` || page[0].LastSeq != 2 || page[0].Meta.Created.IsZero() {
		t.Errorf("b listed as %+v", page[0])
	}
	if page[1].ID != "c" || page[1].Row != nil || page[1].LastSeq != 1 {
		t.Errorf("c listed as %+v", page[1])
	}

	// A row that lands after its session's delete is a leftover.
	if err := st.DeleteSession(bg, "c"); err != nil {
		t.Fatal(err)
	}
	if err := st.PutRow("c", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Append(bg, "b", []Event{msg(history.RoleUser, "sync")}); err != nil {
		t.Fatal(err)
	}
	if got := pageIDs(t, st, 10); got != "0,a-b,aa,ab,b" {
		t.Fatalf("after deleting c: %q", got)
	}
	create(t, st, "c")
	if page, _, _ := st.ListPage(bg, "b", 1); len(page) != 1 || page[0].Row != nil {
		t.Fatalf("re-created c inherited a row: %+v", page)
	}

	for _, bad := range []struct {
		after string
		limit int
	}{{"", 0}, {"a/b", 1}, {"", -1}} {
		if _, _, err := st.ListPage(bg, bad.after, bad.limit); !errors.Is(err, ErrInvalid) {
			t.Errorf("ListPage(%q, %d): %v, want ErrInvalid", bad.after, bad.limit, err)
		}
	}
}

// TestSessionStatesAreBounded (docs/decisions.md "Memory per stored
// session"): the store keeps at most
// MaxSessionStates session states whatever the number of sessions touched,
// and a session whose state was dropped carries on at the right seq, its
// waiters woken.
func TestSessionStatesAreBounded(t *testing.T) {
	st, _ := newStore(t)
	n := MaxSessionStates + MaxSessionStates/4
	for i := range n {
		id := fmt.Sprintf("s%05d", i)
		create(t, st, id)
		if _, err := st.Append(bg, id, []Event{msg(history.RoleUser, "x")}); err != nil {
			t.Fatal(err)
		}
	}
	st.mu.Lock()
	states := len(st.sessions)
	st.mu.Unlock()
	if states > MaxSessionStates {
		t.Fatalf("%d session states kept for %d sessions (bound %d)", states, n, MaxSessionStates)
	}
	// Every session, its state kept or dropped, appends at seq 2.
	for _, i := range []int{0, 1, n / 2, n - 1} {
		id := fmt.Sprintf("s%05d", i)
		waited := make(chan uint64, 1)
		go func() {
			last, err := st.Wait(bg, id, 1)
			if err != nil {
				t.Error(err)
			}
			waited <- last
		}()
		first, err := st.Append(bg, id, []Event{msg(history.RoleUser, "y")})
		if err != nil || first != 2 {
			t.Fatalf("%s: append at %d, %v; want seq 2", id, first, err)
		}
		if last := <-waited; last != 2 {
			t.Fatalf("%s: waiter saw %d", id, last)
		}
	}
}

// TestCountSessionsKeptByCreateAndDelete: after the first full
// count, CreateSession and DeleteSession keep the count, which always
// equals a fresh scan of the store — also when creates and deletes run
// while the first count scans — and a refused create or delete changes
// nothing.
func TestCountSessionsKeptByCreateAndDelete(t *testing.T) {
	st, db := newStore(t)
	for i := range 50 {
		create(t, st, fmt.Sprintf("s%03d", i))
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 25 {
				id := fmt.Sprintf("w%d-%02d", w, i)
				if _, err := st.CreateSession(bg, id, Meta{Model: "m"}); err != nil {
					t.Error(err)
					return
				}
				if i%3 == 0 {
					if err := st.DeleteSession(bg, id); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	if _, err := st.CountSessions(bg); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	// 50 + 4×25 created, 4×9 deleted.
	const want = 50 + 100 - 36
	if n, err := st.CountSessions(bg); err != nil || n != want {
		t.Fatalf("kept count = %d, %v; want %d", n, err, want)
	}
	if _, err := st.CreateSession(bg, "s000", Meta{Model: "m"}); !errors.Is(err, ErrExists) {
		t.Fatalf("creating an existing session: %v", err)
	}
	if err := st.DeleteSession(bg, "nope"); err == nil {
		t.Fatal("deleting a missing session succeeded")
	}
	if err := st.DeleteSession(bg, "s001"); err != nil {
		t.Fatal(err)
	}
	if n, err := st.CountSessions(bg); err != nil || n != want-1 {
		t.Fatalf("kept count after a refused create and delete = %d, %v; want %d", n, err, want-1)
	}
	fresh := Open(db, Options{})
	defer fresh.Close()
	if n, err := fresh.CountSessions(bg); err != nil || n != want-1 {
		t.Fatalf("a fresh scan counts %d, %v; want %d", n, err, want-1)
	}
}
