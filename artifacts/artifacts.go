// Package artifacts is ctxd's content-addressed store of whole tool results
// and other large content (docs/design.md §5.5, §6, §8): Retain stores content
// once under an id derived from it, Get returns it verified, and
// "artifact://<id>" URIs and reference markers name it in text a model
// reads. It knows nothing about sessions: possession of an id grants read.
package artifacts

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/dgraph-io/badger/v4"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/internal/store"
)

// Errors of this package, wrapped with %w and context. ErrNotFound and
// ErrInvalidID carry their api code (api.ErrorCoder); the others none
// (api.Internal: a failure of the daemon).
var (
	// ErrNotFound: no artifact has this id. This package is the only place
	// where badger's ErrKeyNotFound becomes it.
	ErrNotFound error = api.NewCoded(api.NotFound, "artifact not found").Answer(func(error) *api.Error {
		return &api.Error{Code: api.NotFound, Message: "no artifact has this id"}
	})
	// ErrInvalidID: a string that is not 64 lower-case hex digits, or a
	// URI that is not "artifact://" followed by one.
	ErrInvalidID error = api.NewCoded(api.Invalid, "invalid artifact id").Answer(func(err error) *api.Error {
		return &api.Error{Code: api.Invalid, Field: "id", Message: "id: " + err.Error()}
	})
	// ErrInvalid: bad input to Retain — an unknown format, tool-content-json
	// content that is not JSON — or a bad secret.
	ErrInvalid = errors.New("invalid artifact")
	// ErrTooLarge: content over MaxSize.
	ErrTooLarge = errors.New("artifact too large")
	// ErrCorrupt: stored content does not match its id, or the record is
	// malformed.
	ErrCorrupt = errors.New("artifact corrupt")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("artifact store closed")
)

// MaxSize is the largest artifact, in bytes (64 MiB). A value must fit in
// one badger value-log file (256 MiB, internal/store) and in memory on
// read; tool results beyond this are not something a model reads.
const MaxSize = 64 << 20

// SecretSize is the size of the daemon secret in bytes.
const SecretSize = 32

// SecretFile is the name of the secret's file in the data directory.
const SecretFile = "artifact-secret"

// Format says how an artifact's bytes are to be read (docs/design.md §5.5).
type Format string

// The formats.
const (
	// FormatText is text, typically a tool result's text.
	FormatText Format = "text"
	// FormatToolContentJSON is non-text tool content serialized whole as
	// JSON; Retain checks it is valid JSON.
	FormatToolContentJSON Format = "tool-content-json"
)

// Valid reports whether f is a known format.
func (f Format) Valid() bool { return f == FormatText || f == FormatToolContentJSON }

// Stored format bytes: the first byte of a value.
var formatByte = map[Format]byte{FormatText: 't', FormatToolContentJSON: 'j'}

func byteFormat(b byte) (Format, bool) {
	switch b {
	case 't':
		return FormatText, true
	case 'j':
		return FormatToolContentJSON, true
	}
	return "", false
}

// ID is an artifact id: hex(HMAC-SHA256(daemon secret, content)), 64
// lower-case hex digits (docs/design.md §8 "Artifact ids"). It dedupes equal
// content within a daemon and cannot be computed without the secret. Ids
// never go into metric labels or info-level logs.
type ID string

// URIScheme is the prefix of an artifact URI.
const URIScheme = "artifact://"

// ParseID checks s is a well-formed id. Errors wrap ErrInvalidID.
func ParseID(s string) (ID, error) {
	if len(s) != 2*sha256.Size {
		return "", fmt.Errorf("%w: %d characters, want %d hex digits", ErrInvalidID, len(s), 2*sha256.Size)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return "", fmt.Errorf("%w: character %q at %d is not a lower-case hex digit", ErrInvalidID, c, i)
		}
	}
	return ID(s), nil
}

// ParseURI parses "artifact://<id>". Errors wrap ErrInvalidID.
func ParseURI(uri string) (ID, error) {
	rest, ok := strings.CutPrefix(uri, URIScheme)
	if !ok {
		return "", fmt.Errorf("%w: URI does not start with %q", ErrInvalidID, URIScheme)
	}
	return ParseID(rest)
}

// ParseRef accepts an id or an artifact URI, as a command line does.
// Errors wrap ErrInvalidID.
func ParseRef(s string) (ID, error) {
	if strings.HasPrefix(s, URIScheme) {
		return ParseURI(s)
	}
	return ParseID(s)
}

// URI returns "artifact://<id>".
func (id ID) URI() string { return URIScheme + string(id) }

// String returns the id.
func (id ID) String() string { return string(id) }

var refPattern = regexp.MustCompile(`artifact://([0-9a-f]{64})`)

// FindRefs returns the ids of every "artifact://<id>" in b, in order of
// first appearance, without duplicates.
func FindRefs(b []byte) []ID {
	var ids []ID
	seen := map[string]bool{}
	for _, m := range refPattern.FindAllSubmatch(b, -1) {
		if s := string(m[1]); !seen[s] {
			seen[s] = true
			ids = append(ids, ID(s))
		}
	}
	return ids
}

// Marker returns the reference marker that stands for an artifact in text a
// model reads (docs/design.md §5.5 pruned retry): its size in bytes, its format
// and a read hint with filePath="artifact://<id>".
func Marker(id ID, size int, format Format) string {
	return fmt.Sprintf("[tool result stored as an artifact: %d bytes, format %s; read it with filePath=%q]",
		size, format, id.URI())
}

// Backend is the artifact store as the engine, offload/ and summarizer/ use
// it (docs/design.md §9: behind an interface, so that a fleet can use an object
// store instead). *Store is the embedded badger implementation.
type Backend interface {
	// Retain stores content and returns its id; idempotent.
	Retain(ctx context.Context, content []byte, format Format) (ID, error)
	// Get returns verified content and its format.
	Get(ctx context.Context, id ID) ([]byte, Format, error)
	// Has reports whether id is stored.
	Has(ctx context.Context, id ID) (bool, error)
}

var _ Backend = (*Store)(nil)

// Store is the badger-backed artifact store, keys a/<id>, values a format
// byte then the content. Content is at least ValueThreshold (4 KiB) in most
// cases and then lives in badger's value log. Safe for concurrent use; Close
// it before the database.
type Store struct {
	db     *badger.DB
	secret []byte
	commit *store.Committer
}

// Open returns a Store over db (opened by internal/store) with the daemon
// secret (SecretSize bytes; see LoadSecret, or any fixed bytes in tests).
// Errors wrap ErrInvalid.
func Open(db *badger.DB, secret []byte) (*Store, error) {
	if len(secret) != SecretSize {
		return nil, fmt.Errorf("%w: secret is %d bytes, want %d", ErrInvalid, len(secret), SecretSize)
	}
	return &Store{db: db, secret: bytes.Clone(secret), commit: store.NewCommitter(db)}, nil
}

// Close stops the store's committer. It does not close the database.
func (s *Store) Close() error { return s.commit.Close() }

// IDOf returns the id content has (or would have) in this store.
func (s *Store) IDOf(content []byte) ID {
	m := hmac.New(sha256.New, s.secret)
	m.Write(content)
	return ID(hex.EncodeToString(m.Sum(nil)))
}

func key(id ID) []byte { return append([]byte("a/"), id...) }

// Retain stores content with format and returns its id. It is idempotent:
// retaining the same bytes again stores nothing and returns the same id,
// keeping the format first stored. It returns once the artifact is durable
// (with sync_writes), so an event may refer to the id right away. Errors:
// ErrInvalid (unknown format, tool-content-json that is not JSON),
// ErrTooLarge, ErrClosed, ctx's error, badger's.
func (s *Store) Retain(ctx context.Context, content []byte, format Format) (ID, error) {
	if !format.Valid() {
		return "", fmt.Errorf("%w: unknown format %q (want %q or %q)", ErrInvalid, format, FormatText, FormatToolContentJSON)
	}
	if len(content) > MaxSize {
		return "", fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(content), MaxSize)
	}
	if format == FormatToolContentJSON && !json.Valid(content) {
		return "", fmt.Errorf("%w: %s content is not valid JSON", ErrInvalid, format)
	}
	id := s.IDOf(content)
	ok, err := s.Has(ctx, id)
	if err != nil || ok {
		return id, err
	}
	v := make([]byte, 1+len(content))
	v[0] = formatByte[format]
	copy(v[1:], content)
	if err := s.commit.Commit(ctx, []store.Write{{Key: key(id), Value: v}}); err != nil {
		if errors.Is(err, store.ErrClosed) {
			return "", ErrClosed
		}
		return "", fmt.Errorf("retain artifact (%d bytes): %w", len(content), err)
	}
	return id, nil
}

// Has reports whether an artifact with id is stored (without reading or
// verifying its content). Errors: ErrInvalidID, ctx's, badger's.
func (s *Store) Has(ctx context.Context, id ID) (bool, error) {
	if _, err := ParseID(string(id)); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	err := s.db.View(func(txn *badger.Txn) error {
		_, err := txn.Get(key(id))
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up artifact: %w", err)
	}
	return true, nil
}

// Get returns an artifact's content and format, after checking the content
// against its id. Errors: ErrInvalidID (malformed id), ErrNotFound,
// ErrCorrupt, ctx's, badger's.
func (s *Store) Get(ctx context.Context, id ID) ([]byte, Format, error) {
	if _, err := ParseID(string(id)); err != nil {
		return nil, "", err
	}
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	var v []byte
	err := s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(key(id))
		if err != nil {
			return err
		}
		v, err = item.ValueCopy(nil)
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, "", ErrNotFound
	}
	if err != nil {
		return nil, "", fmt.Errorf("read artifact: %w", err)
	}
	return s.check(id, v)
}

// check decodes a stored value and verifies it against id.
func (s *Store) check(id ID, v []byte) ([]byte, Format, error) {
	if len(v) < 1 {
		return nil, "", fmt.Errorf("%w: empty record", ErrCorrupt)
	}
	f, ok := byteFormat(v[0])
	if !ok {
		return nil, "", fmt.Errorf("%w: unknown format byte %#x", ErrCorrupt, v[0])
	}
	content := v[1:]
	if !hmac.Equal([]byte(s.IDOf(content)), []byte(id)) {
		return nil, "", fmt.Errorf("%w: content (%d bytes) does not match its id", ErrCorrupt, len(content))
	}
	return content, f, nil
}

// Verify reads every stored artifact and checks it against its id, for
// `ctxctl doctor` and the crash tests. It returns how many it checked and
// the first problem (wrapping ErrCorrupt). Errors: also ctx's and badger's.
func (s *Store) Verify(ctx context.Context) (int, error) {
	n := 0
	err := s.db.View(func(txn *badger.Txn) error {
		o := badger.DefaultIteratorOptions
		o.Prefix = []byte("a/")
		o.PrefetchValues = false
		it := txn.NewIterator(o)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if err := ctx.Err(); err != nil {
				return err
			}
			id, err := ParseID(string(it.Item().Key()[2:]))
			if err != nil {
				return fmt.Errorf("%w: key: %w", ErrCorrupt, err)
			}
			err = it.Item().Value(func(v []byte) error {
				_, _, err := s.check(id, v)
				return err
			})
			if err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

// LoadSecret returns the daemon secret kept in dir/SecretFile, creating it
// (SecretSize random bytes, mode 0600, synced) on first use. A secret that
// exists is never replaced — ids depend on it — so a file of the wrong size
// is an error (wrapping ErrInvalid), and so is one readable by others.
// Errors: also the file system's.
func LoadSecret(dir string) ([]byte, error) {
	path := filepath.Join(dir, SecretFile)
	if b, err := readSecret(path); !errors.Is(err, os.ErrNotExist) {
		return b, err
	}
	secret := make([]byte, SecretSize)
	if _, err := rand.Read(secret); err != nil {
		return nil, fmt.Errorf("generate artifact secret: %w", err)
	}
	// Write a temporary file, then link it into place: the secret appears
	// whole or not at all, and if another process won the race its secret
	// is kept and read back.
	tmp, err := os.CreateTemp(dir, SecretFile+".tmp*")
	if err != nil {
		return nil, fmt.Errorf("create artifact secret: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("create artifact secret: %w", err)
	}
	if _, err := tmp.Write(secret); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("create artifact secret: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("create artifact secret: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("create artifact secret: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, os.ErrExist) {
			return readSecret(path)
		}
		return nil, fmt.Errorf("create artifact secret: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		err = d.Sync()
		d.Close()
		if err != nil {
			return nil, fmt.Errorf("create artifact secret: sync %s: %w", dir, err)
		}
	}
	return secret, nil
}

func readSecret(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: artifact secret %s has mode %v; want 0600", ErrInvalid, path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read artifact secret: %w", err)
	}
	if len(b) != SecretSize {
		return nil, fmt.Errorf("%w: artifact secret %s is %d bytes, want %d", ErrInvalid, path, len(b), SecretSize)
	}
	return b, nil
}
