package ledger

import (
	"bytes"
	"crypto/sha256"
	"math"
	"time"

	"github.com/ctxd/ctxd/wire"
)

// Request is a request as the prompt cache sees it: its elements in the
// order the provider caches them (tools, system, then each message for
// Anthropic), each element's JSON with its cache markers removed (the wire
// packages' CacheElements), the index of the last element carrying a cache
// marker (-1: none; a provider that caches automatically, as OpenAI does,
// gives the last element), and whether the markers ask for the 1-hour
// lifetime.
type Request struct {
	Model      string
	Elements   [][]byte
	LastMarker int
	LongTTL    bool
}

// Bytes is the request's size: its elements' bytes.
func (r Request) Bytes() int {
	n := 0
	for _, e := range r.Elements {
		n += len(e)
	}
	return n
}

// Bill is what a CacheModel expects the provider to bill for a request, in
// bytes of element JSON.
type Bill struct {
	// Read is the prefix found in the cache, Write what is written to it
	// (up to the last marker), Input the rest.
	Read, Write, Input int
	// Expired is the part of Write that had been cached but outlived its
	// lifetime; Changed the part of Write that the conversation's previous
	// request had in its prefix and this one changed.
	Expired, Changed int
	// Fresh: the model had seen no request before this one.
	Fresh bool
}

// Cache lifetimes.
const (
	shortTTL = 5 * time.Minute
	longTTL  = time.Hour
	// forget is how long an expired entry is kept to tell expiry apart
	// from a change.
	forget = 24 * time.Hour
)

// CacheModel models a provider's prompt cache for one stream of requests
// (the client's, or ctxd's): a request reads the longest prefix of
// elements an earlier request wrote that is still alive, writes the rest
// up to its last marker, and refreshes what it read. It is the model the
// ledger's counterfactuals rest on; the provider's reported usage is the
// truth for the requests that were sent. The zero value is ready; not safe
// for concurrent use.
type CacheModel struct {
	entries map[[32]byte]time.Time // chain digest → expiry
	prev    [][32]byte             // the previous request's chain
	seen    bool
}

// Bill bills r at now and records what it writes.
func (c *CacheModel) Bill(r Request, now time.Time) Bill {
	if c.entries == nil {
		c.entries = map[[32]byte]time.Time{}
	}
	ttl := shortTTL
	if r.LongTTL {
		ttl = longTTL
	}
	chain := make([][32]byte, len(r.Elements))
	var h [32]byte
	seed := sha256.Sum256([]byte(r.Model))
	h = seed
	for i, e := range r.Elements {
		d := sha256.New()
		d.Write(h[:])
		d.Write(e)
		copy(h[:], d.Sum(nil))
		chain[i] = h
	}
	live, known := 0, 0
	for live < len(chain) {
		exp, ok := c.entries[chain[live]]
		if !ok || now.After(exp) {
			break
		}
		live++
	}
	known = live
	for known < len(chain) {
		if _, ok := c.entries[chain[known]]; !ok {
			break
		}
		known++
	}
	same := 0
	for same < len(chain) && same < len(c.prev) && chain[same] == c.prev[same] {
		same++
	}
	b := Bill{Fresh: !c.seen}
	for i, e := range r.Elements {
		n := len(e)
		switch {
		case i < live:
			b.Read += n
		case i <= r.LastMarker:
			b.Write += n
			if i < known {
				b.Expired += n
			} else if i < len(c.prev) && i >= same {
				b.Changed += n
			}
		default:
			b.Input += n
		}
	}
	for i := 0; i < live || i <= r.LastMarker && i < len(chain); i++ {
		c.entries[chain[i]] = now.Add(ttl)
	}
	for k, exp := range c.entries {
		if now.Sub(exp) > forget {
			delete(c.entries, k)
		}
	}
	c.prev, c.seen = chain, true
	return b
}

// Conversation is the ledger's state of one proxied conversation: the
// cache model of the client's requests and of ctxd's. The zero value is
// ready; not safe for concurrent use.
type Conversation struct {
	client, ctxd CacheModel
	// clientRate is tokens per byte of the client's own requests, as
	// reported the last time ctxd sent them unchanged (0: never): ctxd's
	// rewritten context (summaries, stubs) has another ratio, and scaling
	// the client's bytes by it would misstate what the client would have
	// paid (docs/decisions.md "The savings ledger and observe mode").
	clientRate float64
	// cacheSeen: a request of this conversation reported a prompt-cache
	// read or write. Until one does, the upstream is treated as
	// cache-less (Entry.Uncached).
	cacheSeen bool
	// Seq is the session's last seq at the conversation's previous entry
	// (0: none yet), after which its rewrites are looked for
	// (engine.Engine.RecordRequest).
	Seq uint64
}

// RequestOf is a request body as the prompt cache sees it (v, its
// dialect's wire.CacheView), for model.
func RequestOf(model string, v wire.CacheView) Request {
	return Request{Model: model, Elements: v.Elements, LastMarker: v.LastMarker, LongTTL: v.LongTTL}
}

// Observation is one proxied request for Conversation.Entry.
type Observation struct {
	Time  time.Time
	Model string
	// Mode is ModeEnforce (Ctxd was sent) or ModeObserve (Client was
	// sent, Ctxd is what ctxd would have sent).
	Mode string
	// Client is the client's request; Ctxd ctxd's (the same elements when
	// ctxd changed nothing).
	Client, Ctxd Request
	// Reported is the provider's usage for the request that was sent.
	Reported Usage
	// Rewrites are ctxd's recorded rewrites since the previous request
	// (CauseCompaction, CausePass, CauseOffload).
	Rewrites []string
	// ContextLimit and Threshold are the session's, in tokens.
	ContextLimit, Threshold uint64
	// CacheTTLSeconds is the cache lifetime ctxd's request asks for, in
	// seconds (Entry.CacheTTLSeconds); Cut marks an answer whose stream
	// ended early, Reported then the usage it reported so far (Entry.Cut).
	CacheTTLSeconds uint64
	Cut             bool
}

// Entry bills both requests on their cache models and returns the ledger
// entry (unpriced: call Entry.Price). Tokens are bytes scaled by the
// reported context of the request that was sent over its bytes.
func (c *Conversation) Entry(o Observation) Entry {
	cb := c.client.Bill(o.Client, o.Time)
	xb := c.ctxd.Bill(o.Ctxd, o.Time)
	sent, alt := o.Ctxd, o.Client
	altBill := cb
	if o.Mode == ModeObserve {
		sent, alt, altBill = o.Client, o.Ctxd, xb
	}
	rate := 0.0
	if n := sent.Bytes(); n > 0 {
		rate = float64(o.Reported.Context()) / float64(n)
	}
	tok := func(bytes int) uint64 { return uint64(math.Round(float64(bytes) * rate)) }
	// The client's bytes at the client's own rate: the reported one when
	// the client's request was sent (observe) or sent unchanged, else
	// the last such.
	if rate > 0 && (o.Mode == ModeObserve || sameElements(o.Client, o.Ctxd)) {
		c.clientRate = rate
	}
	clientTok := tok
	if r := c.clientRate; r > 0 {
		clientTok = func(bytes int) uint64 { return uint64(math.Round(float64(bytes) * r)) }
	}
	altTok := clientTok
	if o.Mode == ModeObserve {
		altTok = tok
	}
	e := Entry{Kind: KindRequest, Time: o.Time, Model: o.Model, Mode: o.Mode, Reported: o.Reported,
		ClientTokens: clientTok(o.Client.Bytes()), SentTokens: tok(o.Ctxd.Bytes()),
		ContextLimit: o.ContextLimit, Threshold: o.Threshold, Rewrites: o.Rewrites,
		CacheTTLSeconds: o.CacheTTLSeconds, Cut: o.Cut}
	if o.Mode != ModeObserve {
		e.SentTokens = o.Reported.Context()
	} else {
		e.ClientTokens = o.Reported.Context()
	}
	cf := Usage{}.withBill(altBill, alt.LongTTL, altTok)
	cf.Output = o.Reported.Output
	if altBill.Fresh && o.Reported.CacheRead > 0 {
		// After a restart the model knows nothing of what the provider
		// holds: claim nothing for this request.
		cf, e.Cold = o.Reported, true
	}
	if o.Reported.CacheRead+o.Reported.CacheWrite() > 0 {
		c.cacheSeen = true
	}
	if !c.cacheSeen {
		// No request of this conversation, this one included, reported a
		// cache read or write: a cache-less upstream (or prompts under the
		// provider's cacheable minimum). The provider billed the request
		// that was sent as uncached input, and would have billed the other
		// one the same way: pricing it with cache reads the upstream never
		// makes would claim savings (or costs) nobody can know.
		cf, e.Uncached = Usage{Input: altTok(alt.Bytes()), Output: o.Reported.Output}, true
	}
	if sameElements(o.Client, o.Ctxd) && cb == xb {
		// ctxd sent the client's request, and both cache models hold the
		// same: without ctxd the provider would have billed exactly what
		// it reported. Scaling bytes by the average rate would claim a
		// saving (or a cost) out of tokenizer unevenness.
		cf = o.Reported
	}
	e.Counterfactual = cf

	// Causes of ctxd's cache writes.
	ctxdWrites := o.Reported.CacheWrite()
	if o.Mode == ModeObserve {
		ctxdWrites = cf.CacheWrite()
	}
	clientGrowth := clientTok(max(cb.Write-cb.Expired-cb.Changed, 0))
	causes := map[string]uint64{}
	left := ctxdWrites
	take := func(cause string, n uint64) {
		n = min(n, left)
		if n > 0 {
			causes[cause] += n
			left -= n
		}
	}
	take(CauseGrowth, clientGrowth)
	take(CauseTTLExpiry, tok(xb.Expired))
	take(CauseClientChange, clientTok(cb.Changed))
	cause := CauseOther
	for _, k := range []string{CauseCompaction, CausePass, CauseOffload} {
		if contains(o.Rewrites, k) {
			cause = k
			break
		}
	}
	take(cause, left)
	if len(causes) > 0 {
		e.Causes = causes
	}
	return e
}

// withBill is a Bill as Usage in tokens.
func (Usage) withBill(b Bill, long bool, tok func(int) uint64) Usage {
	u := Usage{Input: tok(b.Input), CacheRead: tok(b.Read)}
	if long {
		u.CacheWrite1h = tok(b.Write)
	} else {
		u.CacheWrite5m = tok(b.Write)
	}
	return u
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// sameElements says whether a and b are the same request, element by
// element.
func sameElements(a, b Request) bool {
	if len(a.Elements) != len(b.Elements) {
		return false
	}
	for i := range a.Elements {
		if !bytes.Equal(a.Elements[i], b.Elements[i]) {
			return false
		}
	}
	return true
}
