// Package quota keeps what each client credential of the proxy keeps
// stored, against its [proxy.quotas] (docs/design.md §10, docs/config.md):
// how many proxied sessions and how many message bytes, by the
// credential's hash; and which proxied sessions an expiry deletes. It
// holds counts only, never a credential.
package quota

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
)

// ErrQuota: the client's credential is at one of its [proxy.quotas]; the
// request is refused (403, naming the key).
var ErrQuota = errors.New("quota")

// Usage is what one client credential keeps stored, as status shows it.
type Usage struct {
	// Credential is the credential's hash: the first 12 hex digits of its
	// keyed fingerprint (the proxied sessions' proxy.credential label).
	// Never the credential.
	Credential string `json:"credential"`
	// Sessions is its proxied sessions; Bytes the message bytes they
	// recorded (sessions stored before this run count their estimated
	// tokens times 4).
	Sessions int    `json:"sessions"`
	Bytes    uint64 `json:"bytes"`
}

// Stored is a stored proxied session as the table is seeded with: its
// id, its credential's hash and the bytes it counts.
type Stored struct {
	ID, Credential string
	Bytes          uint64
}

// Bytes is what messages count against a credential's bytes: their
// blocks' text, tool inputs and signatures.
func Bytes(msgs []history.Message) uint64 {
	var n uint64
	for _, m := range msgs {
		for _, b := range m.Content {
			n += uint64(len(b.Text) + len(b.Input) + len(b.Signature))
		}
	}
	return n
}

// Table is what each client credential keeps stored, by the credential's
// hash. Seeded once (from the stored sessions, on first use), then kept
// as sessions are created, grow and go. Safe for concurrent use.
type Table struct {
	// stored lists the stored proxied sessions, for the seed.
	stored func(context.Context) ([]Stored, error)

	mu     sync.Mutex
	seeded bool
	by     map[string]*Usage
	// session maps a proxied session to its credential hash and the bytes
	// counted for it.
	session map[string]sessionUsage
}

type sessionUsage struct {
	cred  string
	bytes uint64
}

// New returns a Table seeded, when first needed, from stored.
func New(stored func(context.Context) ([]Stored, error)) *Table {
	return &Table{stored: stored}
}

// CredHash is the credential hash of fingerprint fp (at least 12
// characters): its first 12.
func CredHash(fp string) string { return fp[:12] }

// seed reads the stored proxied sessions once. Called with t.mu held.
func (t *Table) seed(ctx context.Context) error {
	if t.seeded {
		return nil
	}
	t.by, t.session = map[string]*Usage{}, map[string]sessionUsage{}
	all, err := t.stored(ctx)
	if err != nil {
		return fmt.Errorf("reading the stored sessions for [proxy.quotas]: %w", err)
	}
	for _, s := range all {
		t.addLocked(s.Credential, s.ID, s.Bytes)
	}
	t.seeded = true
	return nil
}

func (t *Table) addLocked(cred, id string, n uint64) {
	u := t.by[cred]
	if u == nil {
		u = &Usage{Credential: cred}
		t.by[cred] = u
	}
	su, ok := t.session[id]
	if !ok {
		u.Sessions++
		su.cred = cred
	}
	su.bytes += n
	u.Bytes += n
	t.session[id] = su
}

// Check refuses a new session for credential fp at its quotas q. Errors
// wrap ErrQuota and name the key; or reading the stored sessions.
func (t *Table) Check(ctx context.Context, q config.ProxyQuotas, fp string) error {
	return t.Grow(ctx, q, fp, "", 0)
}

// Grow checks that credential fp may add grow bytes to session id ("" for
// a new session, which is also checked against the session quota) under
// its quotas q. Errors wrap ErrQuota and name the key; or reading the
// stored sessions.
func (t *Table) Grow(ctx context.Context, q config.ProxyQuotas, fp, id string, grow uint64) error {
	if q.Sessions == 0 && q.Bytes == 0 {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.seed(ctx); err != nil {
		return err
	}
	u := t.by[CredHash(fp)]
	if u == nil {
		return nil
	}
	if id == "" && q.Sessions > 0 && uint64(u.Sessions) >= q.Sessions {
		return fmt.Errorf("%w: this credential keeps %d proxied sessions, its limit (proxy.quotas.sessions = %d); delete some (ctxctl) or wait for proxy.quotas.session_expiry_hours", ErrQuota, u.Sessions, q.Sessions)
	}
	if q.Bytes > 0 && u.Bytes+grow > q.Bytes {
		return fmt.Errorf("%w: this credential's sessions hold %d bytes, and %d more would pass its limit (proxy.quotas.bytes = %d); delete some (ctxctl) or wait for proxy.quotas.session_expiry_hours", ErrQuota, u.Bytes, grow, q.Bytes)
	}
	return nil
}

// Count counts session id for credential fp.
func (t *Table) Count(fp, id string) { t.Add(fp, id, 0) }

// Add counts n more bytes recorded for session id of credential fp.
func (t *Table) Add(fp, id string, n uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.seeded {
		return // counted from the store when first needed
	}
	t.addLocked(CredHash(fp), id, n)
}

// Forget uncounts a deleted session.
func (t *Table) Forget(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	su, ok := t.session[id]
	if !ok {
		return
	}
	delete(t.session, id)
	if u := t.by[su.cred]; u != nil {
		u.Sessions--
		u.Bytes -= min(u.Bytes, su.bytes)
		if u.Sessions <= 0 {
			delete(t.by, su.cred)
		}
	}
}

// Usage returns what each client credential keeps stored, most bytes
// first. Errors: reading the stored sessions the first time.
func (t *Table) Usage(ctx context.Context) ([]Usage, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.seed(ctx); err != nil {
		return nil, err
	}
	out := make([]Usage, 0, len(t.by))
	for _, u := range t.by {
		out = append(out, *u)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Bytes != out[j].Bytes {
			return out[i].Bytes > out[j].Bytes
		}
		return out[i].Credential < out[j].Credential
	})
	return out, nil
}

// Activity is a stored proxied session as an expiry reads it: its id,
// the session it inherited offloaded files from ("" when none) and its
// last activity.
type Activity struct {
	ID, Inherits string
	Updated      time.Time
}

// Expirable lists the proxied sessions (all) idle since before cut, but
// for those a session that stays inherits from, directly or through
// another: a fork's inherited offload stubs name its parent's files,
// which go with the parent.
func Expirable(all []Activity, cut time.Time) []string {
	inherits := map[string]string{}
	for _, in := range all {
		if in.Inherits != "" {
			inherits[in.ID] = in.Inherits
		}
	}
	needed := map[string]bool{}
	for _, in := range all {
		if in.Updated.Before(cut) {
			continue
		}
		for par := inherits[in.ID]; par != "" && !needed[par]; par = inherits[par] {
			needed[par] = true
		}
	}
	var old []string
	for _, in := range all {
		if in.Updated.Before(cut) && !needed[in.ID] {
			old = append(old, in.ID)
		}
	}
	return old
}
