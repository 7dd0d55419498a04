package artifacts

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/ctxd/ctxd/internal/store"
)

var bg = context.Background()

var testSecret = bytes.Repeat([]byte{7}, SecretSize)

func newStore(t testing.TB, secret []byte) (*Store, *badger.DB) {
	t.Helper()
	db, err := store.OpenInMemory()
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(db, secret)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		db.Close()
	})
	return s, db
}

func TestRetainGet(t *testing.T) {
	s, _ := newStore(t, testSecret)
	big := bytes.Repeat([]byte("0123456789"), 100_000)
	cases := []struct {
		name    string
		content []byte
		format  Format
	}{
		{"text", []byte("hello\nworld\n"), FormatText},
		{"empty", []byte{}, FormatText},
		{"binary text", []byte{0xff, 0, 0xfe}, FormatText},
		{"json", []byte(`[{"type":"image","data":"AAA="}]`), FormatToolContentJSON},
		{"1 MB", big, FormatText},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id, err := s.Retain(bg, c.content, c.format)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ParseID(string(id)); err != nil {
				t.Fatalf("Retain returned a malformed id: %v", err)
			}
			again, err := s.Retain(bg, bytes.Clone(c.content), c.format)
			if err != nil || again != id {
				t.Fatalf("second Retain = %s, %v; want the same id", again, err)
			}
			if ok, err := s.Has(bg, id); !ok || err != nil {
				t.Fatalf("Has = %v, %v", ok, err)
			}
			got, f, err := s.Get(bg, id)
			if err != nil || !bytes.Equal(got, c.content) || f != c.format {
				t.Fatalf("Get = %d bytes, %q, %v", len(got), f, err)
			}
		})
	}
	// The first format stored is kept.
	id, _ := s.Retain(bg, []byte(`{"a":1}`), FormatText)
	if id2, err := s.Retain(bg, []byte(`{"a":1}`), FormatToolContentJSON); err != nil || id2 != id {
		t.Fatalf("retain in another format: %s, %v", id2, err)
	}
	if _, f, _ := s.Get(bg, id); f != FormatText {
		t.Fatalf("format = %q, want the first one stored", f)
	}
	if n, err := s.Verify(bg); err != nil || n != len(cases)+1 {
		t.Fatalf("Verify = %d, %v", n, err)
	}
}

func TestIDDependsOnSecret(t *testing.T) {
	a, _ := newStore(t, testSecret)
	b, _ := newStore(t, bytes.Repeat([]byte{8}, SecretSize))
	c := []byte("git status")
	if a.IDOf(c) == b.IDOf(c) {
		t.Fatal("two secrets gave the same id")
	}
	id, _ := a.Retain(bg, c, FormatText)
	if _, _, err := b.Get(bg, id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get from the other store: %v, want ErrNotFound", err)
	}
	for _, bad := range [][]byte{nil, make([]byte, 31), make([]byte, 33)} {
		if _, err := Open(nil, bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("Open with a %d-byte secret: %v", len(bad), err)
		}
	}
}

func TestBadInput(t *testing.T) {
	s, db := newStore(t, testSecret)
	if _, err := s.Retain(bg, []byte("x"), "binary"); !errors.Is(err, ErrInvalid) {
		t.Errorf("unknown format: %v", err)
	}
	if _, err := s.Retain(bg, []byte("{not json"), FormatToolContentJSON); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad JSON: %v", err)
	}
	if _, err := s.Retain(bg, make([]byte, MaxSize+1), FormatText); !errors.Is(err, ErrTooLarge) {
		t.Errorf("too large: %v", err)
	}
	if n, _ := s.Verify(bg); n != 0 {
		t.Errorf("bad input stored %d artifacts", n)
	}
	valid := strings.Repeat("ab", 32)
	for _, id := range []string{"", "abc", strings.ToUpper(valid), valid + "0", valid[:63] + "g", "../" + valid[3:]} {
		if _, err := ParseID(id); !errors.Is(err, ErrInvalidID) {
			t.Errorf("ParseID(%q) = %v, want ErrInvalidID", id, err)
		}
		if _, _, err := s.Get(bg, ID(id)); !errors.Is(err, ErrInvalidID) {
			t.Errorf("Get(%q) = %v, want ErrInvalidID", id, err)
		}
		if _, err := s.Has(bg, ID(id)); !errors.Is(err, ErrInvalidID) {
			t.Errorf("Has(%q) = %v, want ErrInvalidID", id, err)
		}
	}
	for _, uri := range []string{valid, "artifact:/" + valid, "artifacts://" + valid, "file://" + valid, "artifact://", "artifact://" + valid + "/x", "ARTIFACT://" + valid} {
		if _, err := ParseURI(uri); !errors.Is(err, ErrInvalidID) {
			t.Errorf("ParseURI(%q) = %v, want ErrInvalidID", uri, err)
		}
	}
	id, err := ParseURI("artifact://" + valid)
	if err != nil || id.URI() != "artifact://"+valid || id.String() != valid {
		t.Errorf("ParseURI round trip: %q, %v", id, err)
	}
	for _, ref := range []string{valid, "artifact://" + valid} {
		if id, err := ParseRef(ref); err != nil || string(id) != valid {
			t.Errorf("ParseRef(%q) = %q, %v", ref, id, err)
		}
	}
	if _, _, err := s.Get(bg, ID(valid)); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get of an absent id: %v, want ErrNotFound", err)
	}
	if ok, err := s.Has(bg, ID(valid)); ok || err != nil {
		t.Errorf("Has of an absent id: %v, %v", ok, err)
	}
	if n, _ := s.Verify(bg); n != 0 {
		t.Errorf("bad input stored %d artifacts", n)
	}
	_ = db
}

func TestCorruptionDetected(t *testing.T) {
	s, db := newStore(t, testSecret)
	id, err := s.Retain(bg, []byte("original content"), FormatText)
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string][]byte{
		"changed content": []byte("toriginal c0ntent"),
		"bad format byte": []byte("xoriginal content"),
		"empty":           {},
	} {
		t.Run(name, func(t *testing.T) {
			if err := db.Update(func(txn *badger.Txn) error { return txn.Set(key(id), v) }); err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.Get(bg, id); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Get = %v, want ErrCorrupt", err)
			}
			if _, err := s.Verify(bg); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Verify = %v, want ErrCorrupt", err)
			}
		})
	}
}

func TestRefsAndMarker(t *testing.T) {
	a := ID(strings.Repeat("a", 64))
	b := ID(strings.Repeat("0", 64))
	m := Marker(a, 1234, FormatToolContentJSON)
	want := `[tool result stored as an artifact: 1234 bytes, format tool-content-json; read it with filePath="artifact://` + string(a) + `"]`
	if m != want {
		t.Errorf("Marker = %s", m)
	}
	text := []byte(m + " and artifact://" + string(b) + ", again " + a.URI() + " not artifact://abc")
	got := FindRefs(text)
	if len(got) != 2 || got[0] != a || got[1] != b {
		t.Errorf("FindRefs = %v", got)
	}
}

func TestLoadSecret(t *testing.T) {
	dir := t.TempDir()
	s1, err := LoadSecret(dir)
	if err != nil || len(s1) != SecretSize {
		t.Fatalf("LoadSecret = %d bytes, %v", len(s1), err)
	}
	path := filepath.Join(dir, SecretFile)
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secret file mode %v, %v", fi.Mode(), err)
	}
	s2, err := LoadSecret(dir)
	if err != nil || !bytes.Equal(s1, s2) {
		t.Fatalf("second LoadSecret did not reuse the secret: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("temporary files left: %v", ents)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadSecret(dir); !errors.Is(err, ErrInvalid) {
		t.Errorf("world-readable secret: %v, want ErrInvalid", err)
	}
	if err := os.WriteFile(path, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, 0o600)
	if _, err := LoadSecret(dir); !errors.Is(err, ErrInvalid) {
		t.Errorf("short secret: %v, want ErrInvalid", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "short" {
		t.Error("LoadSecret replaced an existing secret")
	}
	if _, err := LoadSecret(filepath.Join(dir, "missing")); err == nil {
		t.Error("LoadSecret in a missing directory succeeded")
	}
}

func TestOnDiskValueLog(t *testing.T) {
	dir := t.TempDir()
	secret, err := LoadSecret(dir)
	if err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(filepath.Join(dir, "db"), store.Options{SyncWrites: true})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(db, secret)
	if err != nil {
		t.Fatal(err)
	}
	content := bytes.Repeat([]byte("log line\n"), 10_000)
	id, err := s.Retain(bg, content, FormatText)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	db.Close()

	secret2, _ := LoadSecret(dir)
	db, err = store.Open(filepath.Join(dir, "db"), store.Options{SyncWrites: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, _ = Open(db, secret2)
	defer s.Close()
	got, _, err := s.Get(bg, id)
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("after reopen: %d bytes, %v", len(got), err)
	}
	if again, _ := s.Retain(bg, content, FormatText); again != id {
		t.Fatal("same content, same secret, different id after reopen")
	}
}
