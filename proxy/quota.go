package proxy

import (
	"context"
	"time"

	"github.com/ctxd/ctxd/quota"
)

// CredentialUsage is what one client credential keeps stored, as status
// shows it (quota.Usage).
type CredentialUsage = quota.Usage

// Usage returns what each client credential keeps stored, most bytes
// first. Errors: reading the stored sessions the first time.
func (p *Proxy) Usage(ctx context.Context) ([]CredentialUsage, error) { return p.quota.Usage(ctx) }

// Expire deletes every proxied session without activity since
// proxy.quotas.session_expiry_hours before now, with its files, and
// returns how many it deleted. The daemon calls it periodically.
func (p *Proxy) Expire(ctx context.Context, now time.Time) (int, error) {
	h := p.cfg.Quotas.SessionExpiryHours
	if h == 0 {
		return 0, nil
	}
	ids, err := p.eng.ExpirableProxied(ctx, now.Add(-time.Duration(h)*time.Hour))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		if err := p.eng.DeleteSessionFiles(ctx, id); err != nil {
			p.log.Warn("expiring a proxied session", "session", id, "err", err)
			continue
		}
		n++
		p.quota.Forget(id)
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
	p.creds.Forget(id)
	p.mu.Lock()
	for _, l := range p.lanes {
		if l.users > 0 {
			continue
		}
		for _, b := range l.branches {
			if b.id == id {
				p.dropLaneLocked(l)
				break
			}
		}
	}
	p.mu.Unlock()
}
