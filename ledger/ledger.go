package ledger

import (
	"math"
	"time"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
)

// Usage is one request's tokens by how the provider bills them.
type Usage struct {
	// Input is uncached input; CacheRead input read from the prompt cache;
	// CacheWrite5m and CacheWrite1h input written to it with the 5-minute
	// and the 1-hour lifetime; Output the answer.
	Input        uint64 `json:"input"`
	CacheRead    uint64 `json:"cache_read"`
	CacheWrite5m uint64 `json:"cache_write_5m"`
	CacheWrite1h uint64 `json:"cache_write_1h"`
	Output       uint64 `json:"output"`
}

// FromHistory is a provider's reported usage (nil: none) as Usage: the
// cache writes not reported as 1-hour ones are 5-minute writes.
func FromHistory(u *history.Usage) Usage {
	if u == nil {
		return Usage{}
	}
	h1 := min(u.CacheCreation1hInputTokens, u.CacheCreationInputTokens)
	return Usage{Input: u.InputTokens, CacheRead: u.CacheReadInputTokens,
		CacheWrite5m: u.CacheCreationInputTokens - h1, CacheWrite1h: h1, Output: u.OutputTokens}
}

// History is u as the provider would have reported it (history.Usage).
func (u Usage) History() *history.Usage {
	return &history.Usage{InputTokens: u.Input, CacheReadInputTokens: u.CacheRead, CacheCreationInputTokens: u.CacheWrite(),
		CacheCreation1hInputTokens: u.CacheWrite1h, OutputTokens: u.Output}
}

// CacheWrite is every cache write, both lifetimes, in tokens.
func (u Usage) CacheWrite() uint64 { return u.CacheWrite5m + u.CacheWrite1h }

// Context is the request's size: input, cache read and cache writes.
func (u Usage) Context() uint64 { return u.Input + u.CacheRead + u.CacheWrite() }

// Cost is u at price p, in US dollars.
func (u Usage) Cost(p config.Price) float64 {
	return (float64(u.Input)*p.Input + float64(u.CacheRead)*p.CacheRead +
		float64(u.CacheWrite5m)*p.CacheWrite5m + float64(u.CacheWrite1h)*p.CacheWrite1h +
		float64(u.Output)*p.Output) / 1e6
}

// Add returns u + v, count by count.
func (u Usage) Add(v Usage) Usage {
	return Usage{Input: u.Input + v.Input, CacheRead: u.CacheRead + v.CacheRead,
		CacheWrite5m: u.CacheWrite5m + v.CacheWrite5m, CacheWrite1h: u.CacheWrite1h + v.CacheWrite1h,
		Output: u.Output + v.Output}
}

// Entry kinds.
const (
	// KindRequest is a proxied request answered by the upstream.
	KindRequest = "request"
	// KindSummarizer is one summarizer call of a compaction.
	KindSummarizer = "summarizer"
	// KindMode records a change of the session's proxy mode (Entry.Mode).
	KindMode = "mode"
	// KindPrepared records what became of a speculative summary
	// (Entry.Outcome; docs/design.md §5.1): its summarizer calls are
	// KindSummarizer entries of Purpose PurposePrepare.
	KindPrepared = "prepared"
	// KindIdle records an idle compaction timed to the prompt cache, with
	// its expected payback (Entry.PaybackTokens, Entry.Payback).
	KindIdle = "idle_compaction"
)

// Purposes of a summarizer call (Entry.Purpose); "" is a compaction's.
const (
	PurposePrepare = "prepare"
	PurposeIdle    = "idle"
)

// Outcomes of a speculative summary (Entry.Outcome).
const (
	// OutcomeReady: made (or extended) and waiting for the trigger.
	OutcomeReady = "ready"
	// OutcomeUsed: installed as a checkpoint.
	OutcomeUsed = "used"
	// OutcomeExtended: replaced by its extension, which carries its cost.
	OutcomeExtended = "extended"
	// OutcomeUnused: discarded (a checkpoint made without it); its cost
	// bought nothing.
	OutcomeUnused = "unused"
)

// Modes of a request (config.ProxyModeEnforce, config.ProxyModeObserve).
const (
	ModeEnforce = config.ProxyModeEnforce
	ModeObserve = config.ProxyModeObserve
)

// Causes of a prompt-cache write (Entry.Causes). Growth is the client's
// own: the new part of the conversation, which any request writes. The
// others are writes of a prefix that was cached, or would have been.
const (
	// CauseGrowth: what the client appended since its previous request.
	CauseGrowth = "growth"
	// CauseCompaction: ctxd replaced older history by a summary.
	CauseCompaction = "compaction"
	// CausePass: a context-editing pass elided old tool results.
	CausePass = "pass"
	// CauseOffload: a tool result was replaced by its offload stub.
	CauseOffload = "offload"
	// CauseClientChange: the client changed its own prefix (system prompt,
	// tools, model, or its history: a rewind, its own compaction).
	CauseClientChange = "client_change"
	// CauseTTLExpiry: the cached prefix outlived its lifetime between two
	// requests.
	CauseTTLExpiry = "ttl_expiry"
	// CauseOther: a rewrite of ctxd's prefix with none of the causes above
	// (say, a restart of the daemon that lost its rendering cache).
	CauseOther = "other"
)

// Causes lists every cause, in the order reports show them.
func Causes() []string {
	return []string{CauseGrowth, CauseCompaction, CausePass, CauseOffload, CauseClientChange, CauseTTLExpiry, CauseOther}
}

// Entry is one ledger entry (checkpoint.KindLedger's Data).
type Entry struct {
	// Kind is KindRequest, KindSummarizer, KindMode, KindPrepared or KindIdle.
	Kind string    `json:"kind"`
	Time time.Time `json:"time"`
	// Model is the model the request or summarizer call named.
	Model string `json:"model,omitempty"`
	// Mode is the session's proxy mode for this request, or the new mode
	// of a KindMode entry.
	Mode string `json:"mode,omitempty"`

	// ClientTokens is what the client sent (what it would have sent
	// without ctxd) and SentTokens what went upstream, in tokens: the
	// reported context scaled by the two requests' sizes.
	ClientTokens uint64 `json:"client_tokens,omitempty"`
	SentTokens   uint64 `json:"sent_tokens,omitempty"`
	// ContextLimit and Threshold are the session's window and compaction
	// threshold when the request was sent, in tokens.
	ContextLimit uint64 `json:"context_limit,omitempty"`
	Threshold    uint64 `json:"threshold,omitempty"`
	// Reported is the provider's usage for the request that was sent.
	Reported Usage `json:"reported"`
	// Counterfactual is the usage of the request that was not sent, from
	// the cache model (CacheModel): in enforce mode the client's own
	// request without ctxd, in observe mode ctxd's request.
	Counterfactual Usage `json:"counterfactual"`
	// Cold: the cache model had no earlier request of this session (the
	// first request after a restart, or a new branch's first) while the
	// provider read from its cache; Counterfactual is then Reported, and
	// nothing is claimed.
	Cold bool `json:"cold,omitempty"`
	// Uncached: no request of the conversation so far, this one included,
	// reported a prompt-cache read or write (a cache-less upstream, or
	// prompts under the provider's cacheable minimum). Counterfactual is
	// then the other request's tokens as uncached input, as the provider
	// billed the one that was sent, and no cache write is attributed: the
	// entry claims only the tokens ctxd kept out, at the input price.
	Uncached bool `json:"uncached,omitempty"`
	// Causes splits the cache writes of ctxd's request (Reported in
	// enforce mode, Counterfactual in observe mode) by cause, in tokens;
	// they sum to its cache writes.
	Causes map[string]uint64 `json:"causes,omitempty"`
	// CauseCosts prices Causes, in US dollars (each cause's share of the
	// writes at their lifetime's price).
	CauseCosts map[string]float64 `json:"cause_costs,omitempty"`
	// Rewrites are ctxd's recorded rewrites since the conversation's
	// previous request (CauseCompaction, CausePass, CauseOffload).
	Rewrites []string `json:"rewrites,omitempty"`
	// Cut: the answer's stream ended before its end (the client left, the
	// connection broke); Reported is the usage it reported so far — the
	// input and cache figures of its start — which the provider bills.
	Cut bool `json:"cut,omitempty"`

	// Summarizer calls: the binding and provider, and whose credential
	// paid ("client": the proxied client's own; "daemon": a key of the
	// daemon's configuration; "none": the embedded extractive summarizer).
	Binding    string `json:"binding,omitempty"`
	Provider   string `json:"provider,omitempty"`
	Credential string `json:"credential,omitempty"`
	Failed     bool   `json:"failed,omitempty"`
	// Purpose is what a summarizer call was for: "" a compaction,
	// PurposePrepare a speculative summary, PurposeIdle an idle compaction.
	Purpose string `json:"purpose,omitempty"`

	// KindPrepared: Outcome (Outcome*), the seq of the prepared event,
	// the message seq the summary covers up to, and PreparedCost, the
	// summarizer cost of the summary and the ones it extended, in US
	// dollars (already counted in the summarizer calls' entries).
	Outcome      string  `json:"outcome,omitempty"`
	PreparedSeq  uint64  `json:"prepared_seq,omitempty"`
	CoversSeq    uint64  `json:"covers_seq,omitempty"`
	PreparedCost float64 `json:"prepared_cost,omitempty"`

	// KindIdle: the context before and after the compaction (TokensBefore,
	// TokensAfter), the cache lifetime it beat (CacheTTLSeconds) and its
	// expected payback: the next request's cache write it spares less
	// the summarizer call, in input-token equivalents (PaybackTokens, with
	// reads at 0.1× and writes at 1.25× the input price) and in US dollars
	// at the model's price (Payback; 0 when unpriced).
	TokensBefore    uint64  `json:"tokens_before,omitempty"`
	TokensAfter     uint64  `json:"tokens_after,omitempty"`
	CacheTTLSeconds uint64  `json:"cache_ttl_seconds,omitempty"`
	PaybackTokens   int64   `json:"payback_tokens,omitempty"`
	Payback         float64 `json:"payback,omitempty"`

	// Cost is Reported priced, CounterfactualCost Counterfactual priced,
	// in US dollars (0 when Unpriced).
	Cost               float64 `json:"cost"`
	CounterfactualCost float64 `json:"counterfactual_cost,omitempty"`
	// Unpriced: the model has no price (PriceOf).
	Unpriced bool `json:"unpriced,omitempty"`
}

// Credentials of a summarizer call (Entry.Credential).
const (
	CredentialClient = "client"
	CredentialDaemon = "daemon"
	CredentialNone   = "none"
)

// Price sets Cost and CounterfactualCost from cfg's price of e.Model.
func (e *Entry) Price(cfg config.Config) {
	p, ok := PriceOf(cfg, e.Model)
	e.Unpriced = !ok && e.Kind != KindMode
	e.Cost = e.Reported.Cost(p)
	e.CounterfactualCost = e.Counterfactual.Cost(p)
	w := e.Reported
	if e.Mode == ModeObserve {
		w = e.Counterfactual
	}
	perToken := p.CacheWrite5m / 1e6
	if n := w.CacheWrite(); n > 0 {
		perToken = (float64(w.CacheWrite5m)*p.CacheWrite5m + float64(w.CacheWrite1h)*p.CacheWrite1h) / float64(n) / 1e6
	}
	e.CauseCosts = nil
	for c, n := range e.Causes {
		if e.CauseCosts == nil {
			e.CauseCosts = map[string]float64{}
		}
		e.CauseCosts[c] = float64(n) * perToken
	}
}

// Totals sums a session's entries, or many sessions'. Every saving is net
// and says what it is a share of:
//
//	Saved          = WithoutCtxd − Paid − Summarizer      (enforce mode)
//	ProjectedSaved = Observed − Projected − ObserveSummarizer (observe mode)
//
// with WithoutCtxd and Observed as the denominators of SavedShare and
// ProjectedShare.
type Totals struct {
	// Requests counts enforce-mode requests, Observed observe-mode ones,
	// SummarizerCalls the summarizer calls.
	Requests         uint64 `json:"requests"`
	ObservedRequests uint64 `json:"observed_requests"`
	SummarizerCalls  uint64 `json:"summarizer_calls"`

	// ClientTokens and SentTokens sum the entries' (both modes);
	// TokensSaved is what ctxd kept out of enforce-mode requests.
	ClientTokens uint64 `json:"client_tokens"`
	SentTokens   uint64 `json:"sent_tokens"`
	TokensSaved  uint64 `json:"tokens_saved"`

	// Enforce mode, US dollars: WithoutCtxd is what the client's own
	// requests would have cost (the cache model), Paid what the requests
	// ctxd sent cost (the provider's usage), Summarizer ctxd's summarizer
	// calls for enforce-mode sessions.
	WithoutCtxd float64 `json:"without_ctxd"`
	Paid        float64 `json:"paid"`
	Summarizer  float64 `json:"summarizer"`
	Saved       float64 `json:"saved"`
	// SavedShare is Saved ÷ WithoutCtxd (0 when WithoutCtxd is 0).
	SavedShare float64 `json:"saved_share"`

	// Observe mode, US dollars: Observed is what the client's requests cost
	// (sent as they were), Projected what ctxd's would have cost,
	// ObserveSummarizer the summarizer calls made to build ctxd's context.
	Observed          float64 `json:"observed"`
	Projected         float64 `json:"projected"`
	ObserveSummarizer float64 `json:"observe_summarizer"`
	ProjectedSaved    float64 `json:"projected_saved"`
	// ProjectedShare is ProjectedSaved ÷ Observed.
	ProjectedShare float64 `json:"projected_share"`

	// SummarizerByCredential splits every summarizer cost by who paid.
	SummarizerByCredential map[string]float64 `json:"summarizer_by_credential,omitempty"`
	// Reported and Counterfactual sum the entries' usages (requests only).
	Reported       Usage `json:"reported"`
	Counterfactual Usage `json:"counterfactual"`
	// CacheWrites sums Entry.Causes (ctxd's requests' cache writes by cause).
	CacheWrites map[string]uint64 `json:"cache_writes,omitempty"`
	// CacheWriteCosts prices CacheWrites, in US dollars.
	CacheWriteCosts map[string]float64 `json:"cache_write_costs,omitempty"`
	// ProjectedCacheWrites are the would-be cache writes of ctxd's
	// requests in observe mode, by cause, in tokens.
	ProjectedCacheWrites map[string]uint64 `json:"projected_cache_writes,omitempty"`
	// Unpriced counts entries whose model has no price; Cold the requests
	// whose counterfactual is the reported usage; Uncached the requests
	// of conversations whose upstream reported no cache use (both sides
	// priced as uncached input: Entry.Uncached).
	Unpriced uint64 `json:"unpriced,omitempty"`
	Cold     uint64 `json:"cold,omitempty"`
	Uncached uint64 `json:"uncached,omitempty"`
	// Speculative summaries (docs/design.md §5.1): made (extensions
	// included), installed, extended, discarded unused, and the summarizer
	// cost of the unused ones, in US dollars (part of Summarizer).
	PreparedMade       uint64  `json:"prepared_made,omitempty"`
	PreparedUsed       uint64  `json:"prepared_used,omitempty"`
	PreparedExtended   uint64  `json:"prepared_extended,omitempty"`
	PreparedUnused     uint64  `json:"prepared_unused,omitempty"`
	PreparedUnusedCost float64 `json:"prepared_unused_cost,omitempty"`
	// IdleCompactions counts idle compactions and IdlePayback sums their
	// expected payback, in US dollars (IdlePaybackTokens in input-token
	// equivalents).
	IdleCompactions   uint64  `json:"idle_compactions,omitempty"`
	IdlePayback       float64 `json:"idle_payback,omitempty"`
	IdlePaybackTokens int64   `json:"idle_payback_tokens,omitempty"`
	// Last is the newest entry's time.
	Last time.Time `json:"last,omitzero"`
}

// Add adds one entry. A summarizer call counts against the mode it names.
func (t *Totals) Add(e Entry) {
	if e.Time.After(t.Last) {
		t.Last = e.Time
	}
	if e.Unpriced {
		t.Unpriced++
	}
	switch e.Kind {
	case KindPrepared:
		switch e.Outcome {
		case OutcomeReady:
			t.PreparedMade++
		case OutcomeUsed:
			t.PreparedUsed++
		case OutcomeExtended:
			t.PreparedExtended++
		case OutcomeUnused:
			t.PreparedUnused++
			t.PreparedUnusedCost += e.PreparedCost
		}
	case KindIdle:
		t.IdleCompactions++
		t.IdlePayback += e.Payback
		t.IdlePaybackTokens += e.PaybackTokens
	case KindSummarizer:
		t.SummarizerCalls++
		if e.Mode == ModeObserve {
			t.ObserveSummarizer += e.Cost
		} else {
			t.Summarizer += e.Cost
		}
		if t.SummarizerByCredential == nil {
			t.SummarizerByCredential = map[string]float64{}
		}
		t.SummarizerByCredential[e.Credential] += e.Cost
	case KindRequest:
		t.ClientTokens += e.ClientTokens
		t.SentTokens += e.SentTokens
		t.Reported = t.Reported.Add(e.Reported)
		t.Counterfactual = t.Counterfactual.Add(e.Counterfactual)
		if e.Cold {
			t.Cold++
		}
		if e.Uncached {
			t.Uncached++
		}
		if e.Mode == ModeObserve {
			t.ObservedRequests++
			t.Observed += e.Cost
			t.Projected += e.CounterfactualCost
		} else {
			t.Requests++
			t.WithoutCtxd += e.CounterfactualCost
			t.Paid += e.Cost
			if e.ClientTokens > e.SentTokens {
				t.TokensSaved += e.ClientTokens - e.SentTokens
			}
		}
		if e.Mode != ModeObserve {
			for c, n := range e.Causes {
				if t.CacheWrites == nil {
					t.CacheWrites, t.CacheWriteCosts = map[string]uint64{}, map[string]float64{}
				}
				t.CacheWrites[c] += n
				t.CacheWriteCosts[c] += e.CauseCosts[c]
			}
		} else {
			for c, n := range e.Causes {
				if t.ProjectedCacheWrites == nil {
					t.ProjectedCacheWrites = map[string]uint64{}
				}
				t.ProjectedCacheWrites[c] += n
			}
		}
	}
	t.settle()
}

// Merge adds another Totals (another session's).
func (t *Totals) Merge(o Totals) {
	t.Requests += o.Requests
	t.ObservedRequests += o.ObservedRequests
	t.SummarizerCalls += o.SummarizerCalls
	t.ClientTokens += o.ClientTokens
	t.SentTokens += o.SentTokens
	t.TokensSaved += o.TokensSaved
	t.WithoutCtxd += o.WithoutCtxd
	t.Paid += o.Paid
	t.Summarizer += o.Summarizer
	t.Observed += o.Observed
	t.Projected += o.Projected
	t.ObserveSummarizer += o.ObserveSummarizer
	for k, v := range o.SummarizerByCredential {
		if t.SummarizerByCredential == nil {
			t.SummarizerByCredential = map[string]float64{}
		}
		t.SummarizerByCredential[k] += v
	}
	t.Reported = t.Reported.Add(o.Reported)
	t.Counterfactual = t.Counterfactual.Add(o.Counterfactual)
	for k, v := range o.CacheWrites {
		if t.CacheWrites == nil {
			t.CacheWrites, t.CacheWriteCosts = map[string]uint64{}, map[string]float64{}
		}
		t.CacheWrites[k] += v
		t.CacheWriteCosts[k] += o.CacheWriteCosts[k]
	}
	for k, v := range o.ProjectedCacheWrites {
		if t.ProjectedCacheWrites == nil {
			t.ProjectedCacheWrites = map[string]uint64{}
		}
		t.ProjectedCacheWrites[k] += v
	}
	t.PreparedMade += o.PreparedMade
	t.PreparedUsed += o.PreparedUsed
	t.PreparedExtended += o.PreparedExtended
	t.PreparedUnused += o.PreparedUnused
	t.PreparedUnusedCost += o.PreparedUnusedCost
	t.IdleCompactions += o.IdleCompactions
	t.IdlePayback += o.IdlePayback
	t.IdlePaybackTokens += o.IdlePaybackTokens
	t.Unpriced += o.Unpriced
	t.Cold += o.Cold
	t.Uncached += o.Uncached
	if o.Last.After(t.Last) {
		t.Last = o.Last
	}
	t.settle()
}

func (t *Totals) settle() {
	t.Saved = t.WithoutCtxd - t.Paid - t.Summarizer
	t.SavedShare, t.ProjectedShare = 0, 0
	if t.WithoutCtxd > 0 {
		t.SavedShare = t.Saved / t.WithoutCtxd
	}
	t.ProjectedSaved = t.Observed - t.Projected - t.ObserveSummarizer
	if t.Observed > 0 {
		t.ProjectedShare = t.ProjectedSaved / t.Observed
	}
}

// Sum returns the totals of entries.
func Sum(entries []Entry) Totals {
	var t Totals
	for _, e := range entries {
		t.Add(e)
	}
	return t
}

// Bar is one bar of a waterfall, in US dollars.
type Bar struct {
	Label string  `json:"label"`
	Value float64 `json:"value"`
}

// Waterfall is the bridge of enforce-mode requests from what the client
// would have paid to what it paid: "without ctxd" first; "context removed"
// (what ctxd kept out of the requests, net of everything below: negative
// when it saved); one bar per cause of ctxd's cache writes other than the
// client's growth ("compaction", "pass", "offload", "client_change",
// "ttl_expiry", "other": what those writes cost); "summarizer"; and "paid
// with summarizer" (Paid + Summarizer, apart from Paid, which counts the
// requests only) last. The bars between the first and the last sum to
// the last minus the first.
func (t Totals) Waterfall() []Bar {
	var causes float64
	var causeBars []Bar
	for _, k := range Causes() {
		if k == CauseGrowth {
			continue
		}
		if v, ok := t.CacheWriteCosts[k]; ok {
			causes += v
			causeBars = append(causeBars, Bar{Label: k, Value: v})
		}
	}
	bars := []Bar{{Label: "without ctxd", Value: t.WithoutCtxd}, {Label: "context removed", Value: t.Paid - t.WithoutCtxd - causes}}
	bars = append(bars, causeBars...)
	return append(bars, Bar{Label: "summarizer", Value: t.Summarizer}, Bar{Label: "paid with summarizer", Value: t.Paid + t.Summarizer})
}

// Summary is Totals in brief, for a session's listing row: US dollars
// rounded to a millionth.
type Summary struct {
	Requests          uint64  `json:"requests,omitempty"`
	ObservedRequests  uint64  `json:"observed_requests,omitempty"`
	TokensSaved       uint64  `json:"tokens_saved,omitempty"`
	WithoutCtxd       float64 `json:"without_ctxd"`
	Paid              float64 `json:"paid"`
	Summarizer        float64 `json:"summarizer"`
	Saved             float64 `json:"saved"`
	Observed          float64 `json:"observed,omitempty"`
	Projected         float64 `json:"projected,omitempty"`
	ObserveSummarizer float64 `json:"observe_summarizer,omitempty"`
	ProjectedSaved    float64 `json:"projected_saved,omitempty"`
}

// Summary returns t in brief, nil when t counts nothing.
func (t Totals) Summary() *Summary {
	if t.Requests+t.ObservedRequests+t.SummarizerCalls == 0 {
		return nil
	}
	r := func(v float64) float64 { return math.Round(v*1e6) / 1e6 }
	return &Summary{Requests: t.Requests, ObservedRequests: t.ObservedRequests, TokensSaved: t.TokensSaved,
		WithoutCtxd: r(t.WithoutCtxd), Paid: r(t.Paid), Summarizer: r(t.Summarizer), Saved: r(t.Saved),
		Observed: r(t.Observed), Projected: r(t.Projected), ObserveSummarizer: r(t.ObserveSummarizer), ProjectedSaved: r(t.ProjectedSaved)}
}

// Add adds another session's summary to s.
func (s *Summary) Add(o Summary) {
	s.Requests += o.Requests
	s.ObservedRequests += o.ObservedRequests
	s.TokensSaved += o.TokensSaved
	s.WithoutCtxd += o.WithoutCtxd
	s.Paid += o.Paid
	s.Summarizer += o.Summarizer
	s.Saved += o.Saved
	s.Observed += o.Observed
	s.Projected += o.Projected
	s.ObserveSummarizer += o.ObserveSummarizer
	s.ProjectedSaved += o.ProjectedSaved
}

// RewriteCause is the cache-write cause of a session event of kind k:
// CauseCompaction, CausePass or CauseOffload for ctxd's recorded rewrites,
// "" for any other kind.
func RewriteCause(k checkpoint.Kind) string {
	switch k {
	case checkpoint.KindCheckpoint:
		return CauseCompaction
	case checkpoint.KindContextEdit:
		return CausePass
	case checkpoint.KindOffload:
		return CauseOffload
	}
	return ""
}
