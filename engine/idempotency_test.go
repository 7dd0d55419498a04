package engine

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/history"
)

// TestIdempotentAppend (docs/api.md "Retrying an append"), on the suite's
// backend: an append retried with its idempotency key stores nothing and
// returns what the first stored (same seqs, same messages, Replayed);
// after a restart too (the key is rebuilt from the log); the key with
// other messages is a conflict; a bad key is invalid, naming the header;
// appends without a key are unchanged.
func TestIdempotentAppend(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, testConfig(), dir)
	ctx := context.Background()
	h.create("s", 100000)
	h.append("s", user("hello"), assistant("hi"))
	msgs := []history.Message{user("the retried prompt"), assistant("its answer")}
	first, err := h.e.AppendWith(ctx, "s", msgs, AppendOptions{IdempotencyKey: "k-1"})
	if err != nil || first.Replayed {
		t.Fatalf("first append: %+v %v", first, err)
	}
	again, err := h.e.AppendWith(ctx, "s", msgs, AppendOptions{IdempotencyKey: "k-1"})
	if err != nil || !again.Replayed {
		t.Fatalf("retry: replayed %v, %v", again.Replayed, err)
	}
	same := func(what string, a, b AppendResult) {
		t.Helper()
		if a.FirstSeq != b.FirstSeq || a.LastSeq != b.LastSeq || !reflect.DeepEqual(texts(a.Messages), texts(b.Messages)) || seqs(a.Messages) != seqs(b.Messages) {
			t.Fatalf("%s: seqs %d–%d %s %v, first answer %d–%d %s %v", what, b.FirstSeq, b.LastSeq, seqs(b.Messages), texts(b.Messages), a.FirstSeq, a.LastSeq, seqs(a.Messages), texts(a.Messages))
		}
	}
	same("retry", first, again)
	if n := len(h.events("s", checkpoint.KindMessage)); n != 4 {
		t.Fatalf("%d messages stored, want 4 (the retry stored nothing)", n)
	}

	_, err = h.e.AppendWith(ctx, "s", []history.Message{user("something else")}, AppendOptions{IdempotencyKey: "k-1"})
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("the key with other messages: %v, want a conflict", err)
	}
	_, err = h.e.AppendWith(ctx, "s", msgs, AppendOptions{IdempotencyKey: "bad key"})
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "Idempotency-Key" {
		t.Fatalf("a key with a space: %v, want invalid naming Idempotency-Key", err)
	}
	next, err := h.e.AppendWith(ctx, "s", []history.Message{user("a new prompt")}, AppendOptions{IdempotencyKey: "k-2"})
	if err != nil || next.Replayed || next.FirstSeq != first.LastSeq+1 {
		t.Fatalf("a new key: %+v %v", next, err)
	}

	// After a restart the keys come back from the log.
	h.Close()
	h2 := newHarness(t, testConfig(), dir)
	after, err := h2.e.AppendWith(ctx, "s", msgs, AppendOptions{IdempotencyKey: "k-1"})
	if err != nil || !after.Replayed {
		t.Fatalf("retry after a restart: replayed %v, %v", after.Replayed, err)
	}
	same("retry after a restart", first, after)
	if n := len(h2.events("s", checkpoint.KindMessage)); n != 5 {
		t.Fatalf("%d messages stored, want 5", n)
	}
}

// TestFleetRetriedAppendOnAnotherNode: an append made through one node
// whose answer the client never got (a 504 after the write, a node that
// died) is retried with its key through another node: that node answers
// with the first append, and the log holds the messages once.
func TestFleetRetriedAppendOnAnotherNode(t *testing.T) {
	a, b := runningPair(t)
	ctx := context.Background()
	if _, err := a.e.CreateSession(ctx, CreateParams{ID: "s", Model: "test-model", ContextLimit: 100000}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.e.Session(ctx, "s"); err != nil { // b has it in memory
		t.Fatal(err)
	}
	for i := range 20 {
		key := fmt.Sprintf("turn-%d", i)
		msgs := []history.Message{user(fmt.Sprintf("prompt %d", i)), assistant(fmt.Sprintf("answer %d", i))}
		first, err := a.e.AppendWith(ctx, "s", msgs, AppendOptions{IdempotencyKey: key})
		if err != nil {
			t.Fatal(err)
		}
		retry, err := b.e.AppendWith(ctx, "s", msgs, AppendOptions{IdempotencyKey: key})
		if err != nil || !retry.Replayed || retry.FirstSeq != first.FirstSeq || retry.LastSeq != first.LastSeq {
			t.Fatalf("turn %d: retry on node b: %+v %v; first %d–%d", i, retry, err, first.FirstSeq, first.LastSeq)
		}
	}
	seen := map[string]bool{}
	if err := b.e.Events(ctx, "s", 1, false, func(ev checkpoint.Event) error {
		if ev.Kind == checkpoint.KindMessage {
			txt := ev.Message.Content[0].Text
			if seen[txt] {
				return fmt.Errorf("%q stored twice", txt)
			}
			seen[txt] = true
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 40 {
		t.Fatalf("%d messages stored, want 40", len(seen))
	}
}

func texts(ms []history.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, string(m.Role)+": "+m.Content[0].Text)
	}
	return out
}

func seqs(ms []history.Message) string {
	var out string
	for _, m := range ms {
		out += fmt.Sprintf("%d,", m.Seq)
	}
	return out
}
