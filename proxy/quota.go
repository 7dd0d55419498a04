package proxy

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/ctxd/ctxd/engine"
)

// errQuota: the client's credential is at one of its [proxy.quotas]; the
// request is refused (403, naming the key).
var errQuota = errors.New("quota")

// quotas is what each client credential keeps stored ([proxy.quotas]),
// by the credential's hash (the proxy.credential label: the first 12 hex
// digits of its keyed fingerprint). Seeded once from the stored sessions'
// labels and listing rows, then kept as sessions are created, grow and
// go.
type quotas struct {
	mu     sync.Mutex
	seeded bool
	by     map[string]*CredentialUsage
	// session maps a proxied session to its credential hash and the bytes
	// counted for it.
	session map[string]sessionUsage
}

type sessionUsage struct {
	cred  string
	bytes uint64
}

// CredentialUsage is what one client credential keeps stored, as status
// shows it.
type CredentialUsage struct {
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

// credHash is the credential hash of fingerprint fp.
func credHash(fp string) string { return fp[:12] }

// seedQuotas reads the stored proxied sessions once. Called with q.mu
// held.
func (p *Proxy) seedQuotas(ctx context.Context) error {
	q := &p.quota
	if q.seeded {
		return nil
	}
	q.by, q.session = map[string]*CredentialUsage{}, map[string]sessionUsage{}
	after := ""
	for {
		page, next, err := p.eng.ListSessionPage(ctx, after, 1000)
		if err != nil {
			return fmt.Errorf("reading the stored sessions for [proxy.quotas]: %w", err)
		}
		for _, in := range page {
			c := in.Labels["proxy.credential"]
			if in.Labels[engine.LabelProxy] == "" || c == "" {
				continue
			}
			p.quotaAddLocked(c, in.ID, in.Tokens*4)
		}
		if next == "" {
			break
		}
		after = next
	}
	q.seeded = true
	return nil
}

func (p *Proxy) quotaAddLocked(cred, id string, n uint64) {
	q := &p.quota
	u := q.by[cred]
	if u == nil {
		u = &CredentialUsage{Credential: cred}
		q.by[cred] = u
	}
	su, ok := q.session[id]
	if !ok {
		u.Sessions++
		su.cred = cred
	}
	su.bytes += n
	u.Bytes += n
	q.session[id] = su
}

// quotaCheck refuses a new session, or grow bytes more, for credential fp
// at its quotas. Errors wrap errQuota and name the key.
func (p *Proxy) quotaCheck(ctx context.Context, fp string) error { return p.quotaGrow(ctx, fp, "", 0) }

// quotaGrow checks that credential fp may add grow bytes to session id
// ("" for a new session).
func (p *Proxy) quotaGrow(ctx context.Context, fp, id string, grow uint64) error {
	qs := p.cfg.Quotas
	if qs.Sessions == 0 && qs.Bytes == 0 {
		return nil
	}
	p.quota.mu.Lock()
	defer p.quota.mu.Unlock()
	if err := p.seedQuotas(ctx); err != nil {
		return err
	}
	u := p.quota.by[credHash(fp)]
	if u == nil {
		return nil
	}
	if id == "" && qs.Sessions > 0 && uint64(u.Sessions) >= qs.Sessions {
		return fmt.Errorf("%w: this credential keeps %d proxied sessions, its limit (proxy.quotas.sessions = %d); delete some (ctxctl) or wait for proxy.quotas.session_expiry_hours", errQuota, u.Sessions, qs.Sessions)
	}
	if qs.Bytes > 0 && u.Bytes+grow > qs.Bytes {
		return fmt.Errorf("%w: this credential's sessions hold %d bytes, and %d more would pass its limit (proxy.quotas.bytes = %d); delete some (ctxctl) or wait for proxy.quotas.session_expiry_hours", errQuota, u.Bytes, grow, qs.Bytes)
	}
	return nil
}

// quotaCount counts session id for credential fp.
func (p *Proxy) quotaCount(fp, id string) { p.quotaAdd(fp, id, 0) }

// quotaAdd counts n more bytes recorded for session id of credential fp.
func (p *Proxy) quotaAdd(fp, id string, n uint64) {
	p.quota.mu.Lock()
	defer p.quota.mu.Unlock()
	if !p.quota.seeded {
		return // counted from the store when first needed
	}
	p.quotaAddLocked(credHash(fp), id, n)
}

// quotaForget uncounts a deleted session.
func (p *Proxy) quotaForget(id string) {
	p.quota.mu.Lock()
	defer p.quota.mu.Unlock()
	su, ok := p.quota.session[id]
	if !ok {
		return
	}
	delete(p.quota.session, id)
	if u := p.quota.by[su.cred]; u != nil {
		u.Sessions--
		u.Bytes -= min(u.Bytes, su.bytes)
		if u.Sessions <= 0 {
			delete(p.quota.by, su.cred)
		}
	}
}

// Usage returns what each client credential keeps stored, most bytes
// first. Errors: reading the stored sessions the first time.
func (p *Proxy) Usage(ctx context.Context) ([]CredentialUsage, error) {
	p.quota.mu.Lock()
	defer p.quota.mu.Unlock()
	if err := p.seedQuotas(ctx); err != nil {
		return nil, err
	}
	out := make([]CredentialUsage, 0, len(p.quota.by))
	for _, u := range p.quota.by {
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

// Expire deletes every proxied session without activity since
// proxy.quotas.session_expiry_hours before now, with its files, and
// returns how many it deleted. The daemon calls it periodically.
func (p *Proxy) Expire(ctx context.Context, now time.Time) (int, error) {
	h := p.cfg.Quotas.SessionExpiryHours
	if h == 0 {
		return 0, nil
	}
	cut := now.Add(-time.Duration(h) * time.Hour)
	var all []engine.Info
	after := ""
	for {
		page, next, err := p.eng.ListSessionPage(ctx, after, 1000)
		if err != nil {
			return 0, err
		}
		for _, in := range page {
			if in.Labels[engine.LabelProxy] != "" {
				all = append(all, engine.Info{ID: in.ID, Updated: in.Updated, Labels: map[string]string{labelInherits: in.Labels[labelInherits]}})
			}
		}
		if next == "" {
			break
		}
		after = next
	}
	old := expirable(all, cut)
	n := 0
	for _, id := range old {
		if err := p.eng.DeleteSessionFiles(ctx, id); err != nil {
			p.log.Warn("expiring a proxied session", "session", id, "err", err)
			continue
		}
		n++
		p.quotaForget(id)
		p.forgetSession(id)
	}
	if n > 0 {
		p.log.Info("proxied sessions expired", "sessions", n, "idle_hours", h)
	}
	return n, nil
}

// forgetSession drops what the proxy holds in memory of a deleted
// session: its credential, and the lanes (reloaded from the store at
// their next request).
func (p *Proxy) forgetSession(id string) {
	p.creds.mu.Lock()
	if c := p.creds.m[id]; c != nil {
		c.release()
		delete(p.creds.m, id)
	}
	p.creds.mu.Unlock()
	p.mu.Lock()
	for k, l := range p.lanes {
		if l.users > 0 {
			continue
		}
		for _, b := range l.branches {
			if b.id == id {
				delete(p.lanes, k)
				break
			}
		}
	}
	p.mu.Unlock()
}

// expirable lists the proxied sessions (all) idle since before cut, but
// for those a session that stays inherited from, directly or through
// another (labelInherits): a fork's inherited offload stubs name its
// parent's files, which go with the parent.
func expirable(all []engine.Info, cut time.Time) []string {
	inherits := map[string]string{}
	for _, in := range all {
		if par := in.Labels[labelInherits]; par != "" {
			inherits[in.ID] = par
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
