package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

func TestLoggerWarningLevel(t *testing.T) {
	var buf bytes.Buffer
	l := NewLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	l.Debugf("debug %d\n", 1)
	l.Infof("info %d\n", 2)
	l.Warningf("warn %d\n", 3)
	l.Errorf("error %d\n", 4)
	out := buf.String()
	for _, want := range []string{"level=WARN msg=\"warn 3\" component=badger", "level=ERROR msg=\"error 4\" component=badger"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "debug") || strings.Contains(out, "info") {
		t.Errorf("debug or info line passed on:\n%s", out)
	}
}

func TestOpenProfile(t *testing.T) {
	db, err := Open(t.TempDir(), Options{SyncWrites: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	o := db.Opts()
	if !o.SyncWrites || o.MemTableSize != MemTableSize || o.NumMemtables != NumMemtables ||
		o.BlockCacheSize != BlockCacheSize || o.IndexCacheSize != IndexCacheSize ||
		o.ValueThreshold != ValueThreshold || o.NumCompactors != NumCompactors {
		t.Errorf("options not the small-memory profile: %+v", o)
	}
}

func TestCommitterGroupsConcurrentWriters(t *testing.T) {
	db, err := Open(t.TempDir(), Options{SyncWrites: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c := NewCommitter(db)
	const writers, each = 32, 20
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				k := fmt.Appendf(nil, "k/%02d/", w)
				k = binary.BigEndian.AppendUint64(k, uint64(i))
				// Two writes per call: both land or neither.
				if err := c.Commit(context.Background(), []Write{{Key: k, Value: []byte("v")}, {Key: append(k, 'x'), Value: bytes.Repeat([]byte("x"), 5000)}}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := c.Stats()
	if st.Calls != writers*each {
		t.Errorf("calls = %d, want %d", st.Calls, writers*each)
	}
	if st.Groups >= st.Calls {
		t.Errorf("no group commit: %d calls in %d transactions", st.Calls, st.Groups)
	}
	t.Logf("%d calls in %d transactions (%.1f per sync)", st.Calls, st.Groups, float64(st.Calls)/float64(st.Groups))
	n := 0
	err = db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte("k/")})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	})
	if err != nil || n != 2*writers*each {
		t.Errorf("stored %d keys (%v), want %d", n, err, 2*writers*each)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Commit(context.Background(), []Write{{Key: []byte("late"), Value: []byte("v")}}); !errors.Is(err, ErrClosed) {
		t.Errorf("commit after close: %v, want ErrClosed", err)
	}
}

func TestCommitterTooLarge(t *testing.T) {
	db, err := OpenInMemory()
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c := NewCommitter(db)
	defer c.Close()
	var ws []Write
	for i := 0; c.Estimate(ws) <= c.MaxSize(); i++ {
		ws = append(ws, Write{Key: fmt.Appendf(nil, "big/%06d", i), Value: make([]byte, 3000)})
	}
	if err := c.Commit(context.Background(), ws); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("commit of %d bytes: %v, want ErrTooLarge", c.Estimate(ws), err)
	}
	// Just under the limit is accepted by badger too: the estimate is
	// conservative.
	ws = ws[:len(ws)-2]
	if err := c.Commit(context.Background(), ws); err != nil {
		t.Fatalf("commit of %d bytes (limit %d): %v", c.Estimate(ws), c.MaxSize(), err)
	}
}

func TestCommitterCanceledContext(t *testing.T) {
	db, err := OpenInMemory()
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c := NewCommitter(db)
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Commit(ctx, []Write{{Key: []byte("k"), Value: []byte("v")}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	err = db.View(func(txn *badger.Txn) error { _, err := txn.Get([]byte("k")); return err })
	if !errors.Is(err, badger.ErrKeyNotFound) {
		t.Fatalf("canceled commit stored its write: %v", err)
	}
}
