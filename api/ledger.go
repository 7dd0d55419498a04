package api

import (
	"context"
	"net/http"
	"time"
)

// Routes of the savings ledger (docs/design.md §10).
const (
	// RouteLedger returns a session's savings ledger: → LedgerResponse.
	// Errors: NotFound.
	RouteLedger = "GET /v1/sessions/{id}/ledger"
	// RouteSetMode sets a proxied session's own proxy mode: ModeRequest →
	// ModeRequest. Errors: Invalid (field mode), NotFound.
	RouteSetMode = "PUT /v1/sessions/{id}/mode"
	// RouteLedgerTotals sums the ledgers of every session: →
	// LedgerTotalsResponse.
	RouteLedgerTotals = "GET /v1/ledger"
)

// EventLedger: an entry of the session's savings ledger; Data is a
// LedgerEntry.
const EventLedger EventKind = "ledger"

// Proxy modes (ModeRequest.Mode, Session.Mode).
const (
	ModeEnforce = "enforce"
	ModeObserve = "observe"
)

// LedgerUsage is a request's tokens by how the provider bills them.
type LedgerUsage struct {
	Input        uint64 `json:"input"`
	CacheRead    uint64 `json:"cache_read"`
	CacheWrite5m uint64 `json:"cache_write_5m"`
	CacheWrite1h uint64 `json:"cache_write_1h"`
	Output       uint64 `json:"output"`
}

// Kinds of a LedgerEntry besides "request", "summarizer" and "mode".
const (
	// LedgerKindPrepared: a speculative summary's outcome.
	LedgerKindPrepared = "prepared"
	// LedgerKindIdle: an idle compaction timed to the prompt cache.
	LedgerKindIdle = "idle_compaction"
)

// LedgerEntry is one ledger entry. Kind is "request" (a proxied request),
// "summarizer" (one summarizer call), "mode" (the session's mode
// changed to Mode), "prepared" (a speculative summary's outcome) or
// "idle_compaction". For a request: ClientTokens is what the client sent,
// SentTokens what ctxd sent (in observe mode: would have sent); Reported
// the provider's usage of the request sent; Counterfactual the cache
// model's usage of the one not sent (enforce: the client's own; observe:
// ctxd's); Causes ctxd's cache-write tokens by cause ("growth",
// "compaction", "pass", "offload", "client_change", "ttl_expiry",
// "other"); Rewrites ctxd's rewrites since the previous request; Cold a
// request with no earlier one of its session in the cache model (the
// first after a restart, or a new branch's first) that claims nothing; Uncached a request of
// a conversation whose upstream reported no cache use, both sides priced
// as uncached input. Costs are US dollars at the price table; Unpriced
// marks a model without a price.
type LedgerEntry struct {
	Kind           string      `json:"kind"`
	Time           time.Time   `json:"time"`
	Model          string      `json:"model,omitempty"`
	Mode           string      `json:"mode,omitempty"`
	ClientTokens   uint64      `json:"client_tokens,omitempty"`
	SentTokens     uint64      `json:"sent_tokens,omitempty"`
	ContextLimit   uint64      `json:"context_limit,omitempty"`
	Threshold      uint64      `json:"threshold,omitempty"`
	Reported       LedgerUsage `json:"reported"`
	Counterfactual LedgerUsage `json:"counterfactual"`
	Cold           bool        `json:"cold,omitempty"`
	Uncached       bool        `json:"uncached,omitempty"`
	// Cut: the answer's stream ended before its end (the client left, the
	// connection broke); Reported is what it reported so far, which the
	// provider bills.
	Cut bool `json:"cut,omitempty"`
	// Purpose of a summarizer call: "" a compaction's, "prepare" a
	// speculative summary's, "idle" an idle compaction's.
	Purpose string `json:"purpose,omitempty"`
	// Kind "prepared" (a speculative summary, docs/design.md §5.1):
	// Outcome is "ready", "used", "extended" or "unused"; PreparedSeq the
	// prepared event's seq, CoversSeq the message seq it covers up to,
	// PreparedCost the summarizer cost of it and those it extended (US
	// dollars, already in the summarizer entries).
	Outcome      string  `json:"outcome,omitempty"`
	PreparedSeq  uint64  `json:"prepared_seq,omitempty"`
	CoversSeq    uint64  `json:"covers_seq,omitempty"`
	PreparedCost float64 `json:"prepared_cost,omitempty"`
	// Kind "idle_compaction" (timed to the prompt cache): the context
	// before and after, the cache lifetime it beat, and its expected
	// payback in input-token equivalents and US dollars. A request's
	// CacheTTLSeconds is the cache lifetime it asked for (0: the
	// provider's default).
	TokensBefore       uint64             `json:"tokens_before,omitempty"`
	TokensAfter        uint64             `json:"tokens_after,omitempty"`
	CacheTTLSeconds    uint64             `json:"cache_ttl_seconds,omitempty"`
	PaybackTokens      int64              `json:"payback_tokens,omitempty"`
	Payback            float64            `json:"payback,omitempty"`
	Causes             map[string]uint64  `json:"causes,omitempty"`
	CauseCosts         map[string]float64 `json:"cause_costs,omitempty"`
	Rewrites           []string           `json:"rewrites,omitempty"`
	Binding            string             `json:"binding,omitempty"`
	Provider           string             `json:"provider,omitempty"`
	Credential         string             `json:"credential,omitempty"`
	Failed             bool               `json:"failed,omitempty"`
	Cost               float64            `json:"cost"`
	CounterfactualCost float64            `json:"counterfactual_cost,omitempty"`
	Unpriced           bool               `json:"unpriced,omitempty"`
}

// LedgerTotals sums ledger entries, in tokens and US dollars. Enforce
// mode: Saved = WithoutCtxd − Paid − Summarizer, SavedShare = Saved ÷
// WithoutCtxd. Observe mode: ProjectedSaved = Observed − Projected −
// ObserveSummarizer, ProjectedShare = ProjectedSaved ÷ Observed.
type LedgerTotals struct {
	Requests               uint64             `json:"requests"`
	ObservedRequests       uint64             `json:"observed_requests"`
	SummarizerCalls        uint64             `json:"summarizer_calls"`
	ClientTokens           uint64             `json:"client_tokens"`
	SentTokens             uint64             `json:"sent_tokens"`
	TokensSaved            uint64             `json:"tokens_saved"`
	WithoutCtxd            float64            `json:"without_ctxd"`
	Paid                   float64            `json:"paid"`
	Summarizer             float64            `json:"summarizer"`
	Saved                  float64            `json:"saved"`
	SavedShare             float64            `json:"saved_share"`
	Observed               float64            `json:"observed"`
	Projected              float64            `json:"projected"`
	ObserveSummarizer      float64            `json:"observe_summarizer"`
	ProjectedSaved         float64            `json:"projected_saved"`
	ProjectedShare         float64            `json:"projected_share"`
	SummarizerByCredential map[string]float64 `json:"summarizer_by_credential,omitempty"`
	Reported               LedgerUsage        `json:"reported"`
	Counterfactual         LedgerUsage        `json:"counterfactual"`
	CacheWrites            map[string]uint64  `json:"cache_writes,omitempty"`
	CacheWriteCosts        map[string]float64 `json:"cache_write_costs,omitempty"`
	ProjectedCacheWrites   map[string]uint64  `json:"projected_cache_writes,omitempty"`
	Unpriced               uint64             `json:"unpriced,omitempty"`
	Cold                   uint64             `json:"cold,omitempty"`
	Uncached               uint64             `json:"uncached,omitempty"`
	// Speculative summaries by outcome, and the summarizer cost of the
	// unused ones (US dollars, part of Summarizer); idle compactions and
	// the sum of their expected paybacks.
	PreparedMade       uint64    `json:"prepared_made,omitempty"`
	PreparedUsed       uint64    `json:"prepared_used,omitempty"`
	PreparedExtended   uint64    `json:"prepared_extended,omitempty"`
	PreparedUnused     uint64    `json:"prepared_unused,omitempty"`
	PreparedUnusedCost float64   `json:"prepared_unused_cost,omitempty"`
	IdleCompactions    uint64    `json:"idle_compactions,omitempty"`
	IdlePayback        float64   `json:"idle_payback,omitempty"`
	IdlePaybackTokens  int64     `json:"idle_payback_tokens,omitempty"`
	Last               time.Time `json:"last,omitzero"`
}

// LedgerSummary is a session's ledger in brief (Session.Ledger), US dollars
// rounded to a millionth.
type LedgerSummary struct {
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

// LedgerBar is one bar of the ledger's waterfall, US dollars.
type LedgerBar struct {
	Label string  `json:"label"`
	Value float64 `json:"value"`
}

// LedgerResponse is the body of RouteLedger: the entries oldest first, their
// totals, and the waterfall from "without ctxd" to "paid with summarizer"
// (enforce mode).
type LedgerResponse struct {
	Session   string        `json:"session"`
	Mode      string        `json:"mode,omitempty"`
	Entries   []LedgerEntry `json:"entries"`
	Totals    LedgerTotals  `json:"totals"`
	Waterfall []LedgerBar   `json:"waterfall"`
}

// LedgerTotalsResponse is the body of RouteLedgerTotals: the sum of every
// session's ledger (from their listing rows) and how many sessions have one.
type LedgerTotalsResponse struct {
	Sessions int           `json:"sessions"`
	Totals   LedgerSummary `json:"totals"`
}

// ModeRequest is the body of RouteSetMode and of its response: Mode is
// ModeEnforce, ModeObserve, or "" to follow the daemon's [proxy] mode.
type ModeRequest struct {
	Mode string `json:"mode"`
}

// LedgerPath is the path of RouteLedger.
func LedgerPath(id string) string { return SessionPath(id) + "/ledger" }

// LedgerTotalsPath is the path of RouteLedgerTotals.
const LedgerTotalsPath = "/v1/ledger"

// ModePath is the path of RouteSetMode.
func ModePath(id string) string { return SessionPath(id) + "/mode" }

// Ledger returns session id's savings ledger (RouteLedger). Errors:
// NotFound.
func (c *Client) Ledger(ctx context.Context, id string) (*LedgerResponse, error) {
	if err := checkID("session", id); err != nil {
		return nil, err
	}
	var r LedgerResponse
	if err := c.do(ctx, http.MethodGet, LedgerPath(id), nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// SetMode sets session id's proxy mode (RouteSetMode). Errors: Invalid,
// NotFound.
func (c *Client) SetMode(ctx context.Context, id, mode string) error {
	if err := checkID("session", id); err != nil {
		return err
	}
	var r ModeRequest
	return c.do(ctx, http.MethodPut, ModePath(id), ModeRequest{Mode: mode}, &r)
}

// LedgerTotals sums every session's ledger (RouteLedgerTotals).
func (c *Client) LedgerTotals(ctx context.Context) (*LedgerTotalsResponse, error) {
	var r LedgerTotalsResponse
	if err := c.do(ctx, http.MethodGet, LedgerTotalsPath, nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
