package api

import (
	"net/url"
	"strconv"
	"strings"
)

// Routes of docs/design.md §7, as net/http.ServeMux patterns ("METHOD /path",
// with {id} as the one wildcard). The server registers exactly these; the
// Client builds its paths with the *Path functions below. Statuses on
// success are 200 OK unless noted.
const (
	// RouteCreateSession creates a session: CreateSessionRequest →
	// Session, 201 Created. Errors: Invalid (bad field, unknown model
	// without context_limit, bad config overlay), Conflict (the id exists).
	RouteCreateSession = "POST /v1/sessions"
	// RouteListSessions lists sessions a page at a time: at most QueryLimit
	// (default 100, at most 1000) after the session QueryAfter, in the
	// store's key order; → ListSessionsResponse, whose Next is the
	// QueryAfter of the following page. Errors: Invalid (limit, after).
	RouteListSessions = "GET /v1/sessions"
	// RouteGetSession describes one session: → Session. Errors: NotFound.
	RouteGetSession = "GET /v1/sessions/{id}"
	// RoutePatchSession changes the system prompt, tools, pinned context or
	// model: PatchSessionRequest → Session. A change of system prompt or
	// tool set is a recorded rewrite (docs/design.md §4). Errors: Invalid,
	// NotFound.
	RoutePatchSession = "PATCH /v1/sessions/{id}"
	// RouteDeleteSession deletes a session with its events and
	// checkpoints; artifacts stay (they are shared by content). 204 No
	// Content. Errors: NotFound.
	RouteDeleteSession = "DELETE /v1/sessions/{id}"
	// RouteStartRun starts a new run (docs/design.md §5.5): RunRequest →
	// RunResponse. Errors: NotFound.
	RouteStartRun = "POST /v1/sessions/{id}/runs"
	// RouteAppendMessages appends messages: AppendMessagesRequest →
	// AppendMessagesResponse, with the messages as stored (seq assigned,
	// offload stubs applied). Acknowledged only once durable (docs/design.md
	// §8). Errors: Invalid (nothing stored), NotFound, TooLarge.
	RouteAppendMessages = "POST /v1/sessions/{id}/messages"
	// RouteContext returns the assembled context (docs/design.md §4). Query
	// QueryFormat: FormatCanonical (default) → ContextResponse;
	// FormatAnthropic or FormatOpenAI → the provider's request JSON
	// (system, tools, messages), ready to send. May wait for a pre-send
	// compaction (docs/design.md §5.1). Errors: Invalid (format), NotFound.
	RouteContext = "GET /v1/sessions/{id}/context"
	// RouteCompact compacts now: CompactRequest → CompactResponse, 200 OK
	// when done (or nothing to do), 202 Accepted when queued. Errors:
	// Conflict ("Not compacting now: a tool call is still waiting on its
	// result."), NotFound, Unavailable (queue full), Upstream (every
	// summarizer binding failed, with wait), Timeout.
	RouteCompact = "POST /v1/sessions/{id}/compact"
	// RouteCheckpoints lists a session's checkpoints, oldest first: →
	// CheckpointsResponse. Errors: NotFound.
	RouteCheckpoints = "GET /v1/sessions/{id}/checkpoints"
	// RouteEvents streams the session's event log as server-sent events
	// (ContentTypeEventStream), from query QueryFrom; with QueryFollow=true
	// it then waits for new events until the client goes away. See
	// Client.StreamEvents for the framing. Errors: NotFound.
	RouteEvents = "GET /v1/sessions/{id}/events"
	// RouteSearch searches a session's stored history (docs/design.md
	// §5.6 "Recall"): the lines holding query QuerySearch in its original
	// messages, its checkpoints' summaries and the whole text of its
	// offloaded results, at most QueryLimit (default 20, at most 100) after
	// QueryOffset; → SearchResponse. Errors: Invalid (q, limit, offset),
	// NotFound.
	RouteSearch = "GET /v1/sessions/{id}/search"
	// RouteReadMessages reads a range of a session's original messages,
	// compacted or not, as text (the recall file's format): seq QueryFrom
	// to QueryTo (0 or absent: the newest), QueryMaxChars characters
	// (default 20000, at most 200000) from character QueryOffset; →
	// MessagesPage. Errors: Invalid, NotFound.
	RouteReadMessages = "GET /v1/sessions/{id}/messages"
	// RouteArtifact returns an artifact's bytes (ContentTypeArtifact).
	// Possession of the id grants read (docs/design.md §7, §8). Errors:
	// NotFound.
	RouteArtifact = "GET /v1/artifacts/{id}"
	// RouteStatus describes the daemon: → Status.
	RouteStatus = "GET /v1/status"
	// RouteMetrics serves Prometheus metrics in the text exposition format.
	RouteMetrics = "GET /metrics"
)

// Routes returns every route constant above, in the order of docs/design.md §7.
// The slice is new on each call.
func Routes() []string {
	return []string{
		RouteCreateSession, RouteListSessions, RouteGetSession,
		RoutePatchSession, RouteDeleteSession, RouteStartRun,
		RouteAppendMessages, RouteContext, RouteCompact, RouteCheckpoints,
		RouteEvents, RouteSearch, RouteReadMessages, RouteArtifact,
		RouteStatus, RouteMetrics, RouteLedger, RouteSetMode, RouteLedgerTotals,
		RouteDashboardLink,
	}
}

// PathValueID is the name of the wildcard in the route patterns: a server
// reads it with (*http.Request).PathValue(PathValueID).
const PathValueID = "id"

// Query parameters.
const (
	// QueryFormat selects the rendering of RouteContext: one of
	// FormatCanonical, FormatAnthropic, FormatOpenAI.
	QueryFormat = "format"
	// QueryFrom is the first event seq RouteEvents sends (inclusive,
	// decimal; 0 or absent means from the first event).
	QueryFrom = "from"
	// QueryFollow, "true" or "false" (default), makes RouteEvents keep the
	// stream open and send new events as they are written.
	QueryFollow = "follow"
	// QueryLimit is the most sessions one RouteListSessions page holds
	// (decimal, 1 to MaxListLimit; absent means DefaultListLimit).
	QueryLimit = "limit"
	// QueryAfter is the cursor of RouteListSessions: the id of the last
	// session of the previous page (its Next); absent for the first page.
	QueryAfter = "after"
	// QuerySearch is the text RouteSearch looks for (case-insensitive; a
	// line holding every word of it matches too).
	QuerySearch = "q"
	// QueryOffset skips that many hits of RouteSearch, or characters of
	// RouteReadMessages (decimal ≥ 0): the Next of the previous page.
	QueryOffset = "offset"
	// QueryTo is the last message seq RouteReadMessages renders
	// (inclusive; 0 or absent: the newest).
	QueryTo = "to"
	// QueryMaxChars is the most characters one RouteReadMessages page
	// holds.
	QueryMaxChars = "max_chars"
)

// Listing page sizes of RouteListSessions.
const (
	// DefaultListLimit is the page size when QueryLimit is absent.
	DefaultListLimit = 100
	// MaxListLimit is the largest QueryLimit.
	MaxListLimit = 1000
)

// Context formats of RouteContext (docs/design.md §4).
const (
	// FormatCanonical is ctxd's own shape: a ContextResponse.
	FormatCanonical = "canonical"
	// FormatAnthropic is an Anthropic Messages request body (model,
	// max_tokens left to the agent; system, tools, messages set; with
	// context_editing mode "server", its context_management parameters).
	FormatAnthropic = "anthropic"
	// FormatOpenAI is an OpenAI Chat Completions request body (messages
	// including the system message, tools).
	FormatOpenAI = "openai"
)

// SessionsPath is the path of RouteCreateSession and RouteListSessions.
func SessionsPath() string { return "/v1/sessions" }

// SessionsPagePath is the path and query of one RouteListSessions page:
// limit 0 leaves QueryLimit out (the server's default), after "" leaves
// QueryAfter out (the first page).
func SessionsPagePath(after string, limit int) string {
	q := url.Values{}
	if limit > 0 {
		q.Set(QueryLimit, strconv.Itoa(limit))
	}
	if after != "" {
		q.Set(QueryAfter, after)
	}
	if len(q) == 0 {
		return SessionsPath()
	}
	return SessionsPath() + "?" + q.Encode()
}

// SessionPath is the path of RouteGetSession, RoutePatchSession and
// RouteDeleteSession for session id (path-escaped).
func SessionPath(id string) string { return "/v1/sessions/" + url.PathEscape(id) }

// RunsPath is the path of RouteStartRun.
func RunsPath(id string) string { return SessionPath(id) + "/runs" }

// MessagesPath is the path of RouteAppendMessages.
func MessagesPath(id string) string { return SessionPath(id) + "/messages" }

// ContextPath is the path and query of RouteContext; an empty format
// leaves the server's default (FormatCanonical).
func ContextPath(id, format string) string {
	p := SessionPath(id) + "/context"
	if format != "" {
		p += "?" + QueryFormat + "=" + url.QueryEscape(format)
	}
	return p
}

// CompactPath is the path of RouteCompact.
func CompactPath(id string) string { return SessionPath(id) + "/compact" }

// CheckpointsPath is the path of RouteCheckpoints.
func CheckpointsPath(id string) string { return SessionPath(id) + "/checkpoints" }

// EventsPath is the path and query of RouteEvents: events from seq from
// (inclusive), following new events when follow is true.
func EventsPath(id string, from uint64, follow bool) string {
	q := url.Values{}
	if from > 0 {
		q.Set(QueryFrom, strconv.FormatUint(from, 10))
	}
	if follow {
		q.Set(QueryFollow, "true")
	}
	p := SessionPath(id) + "/events"
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	return p
}

// SearchPath is the path and query of RouteSearch: query q, at most
// limit hits (0: the default) after the first offset.
func SearchPath(id, q string, limit, offset int) string {
	v := url.Values{}
	v.Set(QuerySearch, q)
	if limit > 0 {
		v.Set(QueryLimit, strconv.Itoa(limit))
	}
	if offset > 0 {
		v.Set(QueryOffset, strconv.Itoa(offset))
	}
	return SessionPath(id) + "/search?" + v.Encode()
}

// ReadMessagesPath is the path and query of RouteReadMessages.
func ReadMessagesPath(id string, r ReadMessagesRequest) string {
	v := url.Values{}
	if r.From > 0 {
		v.Set(QueryFrom, strconv.FormatUint(r.From, 10))
	}
	if r.To > 0 {
		v.Set(QueryTo, strconv.FormatUint(r.To, 10))
	}
	if r.Offset > 0 {
		v.Set(QueryOffset, strconv.Itoa(r.Offset))
	}
	if r.MaxChars > 0 {
		v.Set(QueryMaxChars, strconv.Itoa(r.MaxChars))
	}
	p := MessagesPath(id)
	if len(v) > 0 {
		p += "?" + v.Encode()
	}
	return p
}

// ArtifactPath is the path of RouteArtifact for an artifact id or an
// "artifact://<id>" URI.
func ArtifactPath(id string) string {
	return "/v1/artifacts/" + url.PathEscape(ArtifactID(id))
}

// ArtifactID returns the id of an artifact reference: s without a leading
// ArtifactScheme, otherwise s unchanged.
func ArtifactID(s string) string { return strings.TrimPrefix(s, ArtifactScheme) }

// StatusPath is the path of RouteStatus.
func StatusPath() string { return "/v1/status" }

// MetricsPath is the path of RouteMetrics.
func MetricsPath() string { return "/metrics" }
