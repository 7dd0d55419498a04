package natsstore

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
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxd/ctxd/artifacts"
)

// secretKey is the artifact secret's key in the meta bucket.
const secretKey = "artifact-secret"

// secretAttempts bounds Secret's read-or-create rounds (about 2.5 s of
// pauses in all).
const secretAttempts = 23

// Secret returns the fleet's artifact secret (docs/design.md §8: ids are
// HMAC-SHA256(secret, content)), creating it on first use: every node
// shares it, so an id names the same content on any node. It is created
// with the bucket's create-if-absent, so two nodes starting together agree
// on one. Errors: JetStream's; artifacts.ErrInvalid for a stored secret of
// the wrong size.
func (st *Store) Secret(ctx context.Context) ([]byte, error) {
	// A Create refused because the key exists can be followed, for a
	// moment, by a Get that does not see it yet (the bucket's replicas and
	// its read path settling while two nodes start together): read again
	// after a short pause rather than fail the node's start.
	for attempt := range secretAttempts {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(time.Duration(attempt) * 10 * time.Millisecond):
			}
		}
		e, err := st.meta.Get(ctx, secretKey)
		if err == nil {
			if len(e.Value()) != artifacts.SecretSize {
				return nil, fmt.Errorf("%w: artifact secret in %s is %d bytes, want %d", artifacts.ErrInvalid, st.meta.Bucket(), len(e.Value()), artifacts.SecretSize)
			}
			return e.Value(), nil
		}
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, fmt.Errorf("read artifact secret: %w", err)
		}
		secret := make([]byte, artifacts.SecretSize)
		if _, err := rand.Read(secret); err != nil {
			return nil, fmt.Errorf("generate artifact secret: %w", err)
		}
		if _, err := st.meta.Create(ctx, secretKey, secret); err == nil {
			return secret, nil
		} else if !errors.Is(err, jetstream.ErrKeyExists) && !wrongLast(err) {
			return nil, fmt.Errorf("create artifact secret: %w", err)
		}
		// Another node created it first: read theirs.
	}
	return nil, errors.New("artifact secret: created and deleted concurrently")
}

// Artifacts is artifacts.Backend on the JetStream object store (docs/design.md
// §9): an object per artifact, named by its keyed id, its format in the
// object's metadata. Content is verified against its id on read.
type Artifacts struct {
	st     *Store
	secret []byte
}

var _ artifacts.Backend = (*Artifacts)(nil)

// Artifacts returns the artifact store keyed with secret (see Secret).
// Errors wrap artifacts.ErrInvalid (a secret of the wrong size).
func (st *Store) Artifacts(secret []byte) (*Artifacts, error) {
	if len(secret) != artifacts.SecretSize {
		return nil, fmt.Errorf("%w: secret is %d bytes, want %d", artifacts.ErrInvalid, len(secret), artifacts.SecretSize)
	}
	return &Artifacts{st: st, secret: bytes.Clone(secret)}, nil
}

// IDOf returns the id content has (or would have).
func (a *Artifacts) IDOf(content []byte) artifacts.ID {
	m := hmac.New(sha256.New, a.secret)
	m.Write(content)
	return artifacts.ID(hex.EncodeToString(m.Sum(nil)))
}

// Retain implements artifacts.Backend: idempotent, it returns once the
// object store acknowledged every chunk. Errors: artifacts.ErrInvalid,
// artifacts.ErrTooLarge, ctx's, JetStream's.
func (a *Artifacts) Retain(ctx context.Context, content []byte, format artifacts.Format) (artifacts.ID, error) {
	if err := a.st.up(); err != nil {
		return "", err
	}
	if !format.Valid() {
		return "", fmt.Errorf("%w: unknown format %q (want %q or %q)", artifacts.ErrInvalid, format, artifacts.FormatText, artifacts.FormatToolContentJSON)
	}
	if len(content) > artifacts.MaxSize {
		return "", fmt.Errorf("%w: %d bytes, limit %d", artifacts.ErrTooLarge, len(content), artifacts.MaxSize)
	}
	if format == artifacts.FormatToolContentJSON && !json.Valid(content) {
		return "", fmt.Errorf("%w: %s content is not valid JSON", artifacts.ErrInvalid, format)
	}
	id := a.IDOf(content)
	if ok, err := a.Has(ctx, id); err != nil || ok {
		return id, err
	}
	meta := jetstream.ObjectMeta{Name: string(id), Metadata: map[string]string{"format": string(format)}}
	if _, err := a.st.objects.Put(ctx, meta, bytes.NewReader(content)); err != nil {
		return "", fmt.Errorf("retain artifact (%d bytes): %w", len(content), err)
	}
	return id, nil
}

// Has implements artifacts.Backend. Errors: artifacts.ErrInvalidID,
// JetStream's.
func (a *Artifacts) Has(ctx context.Context, id artifacts.ID) (bool, error) {
	if err := a.st.up(); err != nil {
		return false, err
	}
	if _, err := artifacts.ParseID(string(id)); err != nil {
		return false, err
	}
	info, err := a.st.objects.GetInfo(ctx, string(id))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up artifact: %w", err)
	}
	return !info.Deleted, nil
}

// Get implements artifacts.Backend: it sees every artifact whose Retain
// returned, through any node (Store.readObject: checked against, and if
// need be read from, the stream's leader). Errors: artifacts.ErrInvalidID, artifacts.ErrNotFound,
// artifacts.ErrCorrupt (size, SHA-256 digest or keyed id do not match),
// ctx's, JetStream's.
func (a *Artifacts) Get(ctx context.Context, id artifacts.ID) ([]byte, artifacts.Format, error) {
	if err := a.st.up(); err != nil {
		return nil, "", err
	}
	if _, err := artifacts.ParseID(string(id)); err != nil {
		return nil, "", err
	}
	// Not the object store's Get: that reads the chunks through a consumer
	// on any replica, which may end before the last ones on a replica that
	// lags (leader.go).
	info, content, err := a.st.readObject(ctx, string(id))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, "", artifacts.ErrNotFound
	}
	if err != nil {
		return nil, "", fmt.Errorf("read artifact: %w", err)
	}
	f := artifacts.Format(info.Metadata["format"])
	if !f.Valid() {
		return nil, "", fmt.Errorf("%w: unknown format %q", artifacts.ErrCorrupt, f)
	}
	if !hmac.Equal([]byte(a.IDOf(content)), []byte(id)) {
		return nil, "", fmt.Errorf("%w: content (%d bytes) does not match its id", artifacts.ErrCorrupt, len(content))
	}
	return content, f, nil
}
