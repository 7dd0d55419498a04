// Package redact removes secrets from text before it reaches a log line,
// an event or an API error (docs/design.md §8b): strings shaped like provider
// keys and bearer tokens, and the exact values of the secrets the daemon
// was configured with (the api_key_env variables' values, the TCP token).
// Provider error texts are its main input: a provider may echo the key it
// was sent ("invalid x-api-key: sk-ant-…"), or only part of it ("…key
// starting with sk-ant-api03-AbC…"), or the key reversed: a configured
// secret is masked wherever PartialLen of its bytes, forwards or
// backwards, appear in a row.
package redact

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
)

// Mask replaces each secret found.
const Mask = "[REDACTED]"

// MinSecretLen is the shortest configured secret Redactor replaces, in
// bytes: a shorter value (a test key "x") would mask ordinary words.
const MinSecretLen = 8

// PartialLen is the shortest run of a configured secret's bytes that is
// masked on its own, in bytes: any substring of the secret (a prefix, a
// suffix, a middle) or of the secret reversed that is at least this long
// is replaced. 12 bytes of a random key are 60 bits and more: never
// ordinary text, and enough to narrow a brute force. A secret shorter than
// PartialLen is masked whole or reversed only.
const PartialLen = 12

// shape is one kind of key-shaped string: re's second group is the
// secret (the first, such as "Bearer ", is kept). loose shapes (a value
// after a word that may be prose) are secrets only when they look like
// one: a digit in them, or 20 characters and more.
type shape struct {
	re    *regexp.Regexp
	loose bool
	// need, when set, is a literal every match contains: a text without it
	// skips the regexp (whose scan is the cost of redaction).
	need string
}

var keyShapes = []shape{
	// Anthropic (sk-ant-api03-…, sk-ant-admin01-…), OpenAI (sk-…,
	// sk-proj-…, sk-svcacct-…), Stripe-like sk_live_…: a prefix and a
	// long token.
	{re: regexp.MustCompile(`()\b(sk-ant-[A-Za-z0-9_\-]{6,}|sk-[A-Za-z0-9_\-]{16,}|sk_(?:live|test)_[A-Za-z0-9]{10,})`)},
	// xAI, Groq, Google, GitHub, GitLab, Hugging Face, Slack, AWS access
	// key ids.
	{re: regexp.MustCompile(`()\b(xai-[A-Za-z0-9]{20,}|gsk_[A-Za-z0-9]{20,}|AIza[0-9A-Za-z_\-]{30,}|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_\-]{20,}|hf_[A-Za-z0-9]{30,}|xox[abpr]-[A-Za-z0-9\-]{10,}|AKIA[0-9A-Z]{16})`)},
	// The same keys reversed (a provider or a tool that echoes a key
	// backwards): a long token ending with the reversed prefix.
	{re: regexp.MustCompile(`()([A-Za-z0-9_\-]{6,}-tna-ks|[A-Za-z0-9_\-]{16,}-ks)\b`), need: "-ks"},
	// Authorization: Bearer <token>, in headers or prose.
	{re: regexp.MustCompile(`(?i)(\bbearer\s+)([A-Za-z0-9._~+/\-]{8,}=*)`), loose: true},
	// A key's value after its header or field name: x-api-key: …,
	// "api_key": "…", api-key=…, authorization=….
	{re: regexp.MustCompile(`(?i)((?:x-api-key|x-goog-api-key|api[_-]?key|access[_-]?token|auth[_-]?token|authorization|password|secret)["']?\s*[:=]\s*["']?)([^\s"',;}{]{6,})`), loose: true},
}

// replace masks the secrets of shape sh in s.
func (sh shape) replace(s string) string {
	if sh.need != "" && !strings.Contains(s, sh.need) {
		return s
	}
	if !sh.loose {
		return sh.re.ReplaceAllString(s, "${1}"+Mask)
	}
	return sh.re.ReplaceAllStringFunc(s, func(m string) string {
		g := sh.re.FindStringSubmatch(m)
		if g == nil || g[2] == Mask || !(len(g[2]) >= 20 || strings.ContainsAny(g[2], "0123456789")) {
			return m
		}
		return g[1] + Mask
	})
}

// Redactor replaces key-shaped strings and a set of known secrets. The
// zero value redacts key shapes only. It is safe for concurrent use;
// SetSecrets may be called while others redact (a configuration reload).
type Redactor struct {
	secrets atomic.Pointer[secretSet]
	// held are the secrets held for a while (Hold), shared with the
	// Redactors With makes.
	held atomic.Pointer[heldSet]
}

// secretSet is the compiled form of the configured secrets.
type secretSet struct {
	// list is the secrets as given (deduplicated, MinSecretLen and more).
	list []string
	// short holds the secrets shorter than PartialLen and their reverses,
	// longest first (a secret containing another is replaced whole).
	short []string
	// grams holds every PartialLen-byte substring of the longer secrets and
	// of their reverses; filter has bit h>>filterShift set for the rolling
	// hash h of each, so most windows of a text are dismissed without a
	// map lookup.
	grams  map[string]struct{}
	filter *[filterWords]uint64
}

const (
	filterBits  = 16
	filterWords = 1 << filterBits / 64
	filterShift = 64 - filterBits
	// hashBase is the rolling hash's multiplier (odd, mixing well).
	hashBase = 0x100000001b3
)

// hashPow is hashBase^(PartialLen-1), to remove a window's first byte.
var hashPow = func() uint64 {
	p := uint64(1)
	for range PartialLen - 1 {
		p *= hashBase
	}
	return p
}()

// windowHash is the rolling hash of a PartialLen-byte window.
func windowHash(w string) uint64 {
	var h uint64
	for i := range len(w) {
		h = h*hashBase + uint64(w[i])
	}
	return h
}

func reverse(s string) string {
	b := []byte(s)
	slices.Reverse(b)
	return string(b)
}

func compile(list []string) *secretSet {
	set := &secretSet{list: list}
	for _, v := range list {
		for _, w := range []string{v, reverse(v)} {
			if len(w) < PartialLen {
				if !slices.Contains(set.short, w) {
					set.short = append(set.short, w)
				}
				continue
			}
			if set.grams == nil {
				set.grams = map[string]struct{}{}
				set.filter = new([filterWords]uint64)
			}
			for i := 0; i+PartialLen <= len(w); i++ {
				g := w[i : i+PartialLen]
				set.grams[g] = struct{}{}
				b := windowHash(g) >> filterShift
				set.filter[b/64] |= 1 << (b % 64)
			}
		}
	}
	slices.SortFunc(set.short, func(a, b string) int { return len(b) - len(a) })
	return set
}

// mask replaces every run of text covered by windows of PartialLen bytes
// found in set.grams with Mask: one Mask for each maximal run.
func (set *secretSet) mask(s string) string {
	if set.grams == nil || len(s) < PartialLen {
		return s
	}
	return maskRuns(s, func(b uint64) bool { return set.filter[b/64]&(1<<(b%64)) != 0 }, func(g string) bool {
		_, ok := set.grams[g]
		return ok
	})
}

// maskRuns replaces every run of s covered by PartialLen-byte windows that
// are secret with Mask: one Mask for each maximal run. maybe says whether
// a window's hash bucket may hold a secret window (most are dismissed
// there), is whether the window is one.
func maskRuns(s string, maybe func(bucket uint64) bool, is func(window string) bool) string {
	if len(s) < PartialLen {
		return s
	}
	var out strings.Builder
	last := 0          // bytes of s written to out
	start, end := 0, 0 // the run being covered, end 0 when none
	var h uint64
	for i := range len(s) {
		if i >= PartialLen {
			h -= uint64(s[i-PartialLen]) * hashPow
		}
		h = h*hashBase + uint64(s[i])
		if i < PartialLen-1 {
			continue
		}
		if !maybe(h >> filterShift) {
			continue
		}
		from := i + 1 - PartialLen
		if !is(s[from : i+1]) {
			continue
		}
		if end > 0 && from <= end {
			end = i + 1
			continue
		}
		if end > 0 {
			out.WriteString(s[last:start])
			out.WriteString(Mask)
			last = end
		}
		start, end = from, i+1
	}
	if end == 0 {
		return s
	}
	out.WriteString(s[last:start])
	out.WriteString(Mask)
	out.WriteString(s[end:])
	return out.String()
}

// New returns a Redactor that also replaces each of secrets (values shorter
// than MinSecretLen are ignored).
func New(secrets ...string) *Redactor {
	r := &Redactor{}
	r.SetSecrets(secrets...)
	return r
}

// SetSecrets replaces the set of known secrets.
func (r *Redactor) SetSecrets(secrets ...string) {
	var s []string
	for _, v := range secrets {
		if len(v) >= MinSecretLen && !slices.Contains(s, v) {
			s = append(s, v)
		}
	}
	r.secrets.Store(compile(s))
}

// With returns a new Redactor that knows r's secrets and extra too (r may
// be nil): for one call that holds a secret of its own, such as the key of
// the binding being called.
func (r *Redactor) With(extra ...string) *Redactor {
	var all []string
	if r != nil {
		if p := r.secrets.Load(); p != nil {
			all = append(all, p.list...)
		}
	}
	n := New(append(all, extra...)...)
	if r != nil {
		n.held.Store(r.heldSet())
	}
	return n
}

// String returns s with every known secret and every key-shaped string
// replaced by Mask: a configured secret also where only PartialLen of its
// bytes in a row appear, forwards or reversed. A nil Redactor redacts key
// shapes only.
func (r *Redactor) String(s string) string {
	if r != nil {
		if p := r.secrets.Load(); p != nil {
			s = p.mask(s)
			for _, v := range p.short {
				s = strings.ReplaceAll(s, v, Mask)
			}
		}
		if h := r.held.Load(); h != nil {
			s = h.mask(s)
		}
	}
	for _, sh := range keyShapes {
		s = sh.replace(s)
	}
	return s
}

// String redacts key-shaped strings in s (no configured secrets).
func String(s string) string { return (*Redactor)(nil).String(s) }

// Error returns err with its text redacted and its chain intact (errors.Is
// and errors.As still see the original errors); nil stays nil, and an
// error whose text holds no secret is returned as is.
func (r *Redactor) Error(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	red := r.String(msg)
	if red == msg {
		return err
	}
	return &redactedError{msg: red, err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// Handler returns an slog.Handler that redacts each record's message and
// attributes (strings, errors, and any value whose text holds a secret)
// with r before passing it to h. Wrap the daemon's handler with it: no log
// line of any level then carries a secret, whoever wrote it.
func Handler(h slog.Handler, r *Redactor) slog.Handler {
	return &handler{h: h, r: r}
}

type handler struct {
	h slog.Handler
	r *Redactor
}

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.h.Enabled(ctx, l) }

func (h *handler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, h.r.String(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.h.Handle(ctx, out)
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(as))
	for i, a := range as {
		red[i] = h.attr(a)
	}
	return &handler{h: h.h.WithAttrs(red), r: h.r}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{h: h.h.WithGroup(name), r: h.r}
}

// attr redacts one attribute, recursing into groups.
func (h *handler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.r.String(v.String()))
	case slog.KindGroup:
		g := v.Group()
		red := make([]any, len(g))
		for i, ga := range g {
			red[i] = h.attr(ga)
		}
		return slog.Group(a.Key, red...)
	case slog.KindAny:
		var text string
		switch x := v.Any().(type) {
		case error:
			text = x.Error()
		case fmt.Stringer:
			text = x.String()
		default:
			text = fmt.Sprint(x)
		}
		if red := h.r.String(text); red != text {
			return slog.String(a.Key, red)
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
