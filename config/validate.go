package config

import (
	"fmt"
	"maps"
	"math"
	"net"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// problemAt builds a problem about key (a full key path) in the table that
// Sources calls table, located at the key if its layer authored it, else at
// the nearest authored parent; missing keys get no position.
// MaxWorkers and MaxQueue bound [workers] size and queue: the pool
// allocates its queue up front and each running compaction holds a whole
// history, so a typo must fail `ctxctl check` rather than the daemon.
const (
	MaxWorkers = 256
	MaxQueue   = 65536
	// MaxPricePerMTok bounds a [models."<id>".price] figure, in US dollars
	// per million tokens (the dearest list price is under 200).
	MaxPricePerMTok = 10000
	// MinTokenFactor and MaxTokenFactor bound a model's token_factor
	// (provider tokens per o200k_base token): the calibrator refuses a
	// factor outside them, so a session of such a model could not start.
	MinTokenFactor = 0.25
	MaxTokenFactor = 4.0
)

func (s *state) problemAt(table, key string, missing bool, format string, args ...any) Problem {
	p := Problem{File: s.cfg.Sources[table], Key: key, Message: fmt.Sprintf(format, args...)}
	d := s.docs[table]
	if d == nil {
		return p
	}
	p.File = d.file
	if missing {
		return p
	}
	for k := key; k != ""; k = parentPath(k) {
		if at, ok := d.pos[k]; ok {
			p.Line, p.Col = at.line, at.col
			break
		}
	}
	return p
}

// parentPath drops the last segment of a key path built by childPath or
// indexPath. Quoted segments may contain dots, so it scans from the end
// respecting quotes.
func parentPath(path string) string {
	if strings.HasSuffix(path, "]") {
		if i := strings.LastIndexByte(path, '['); i >= 0 {
			return path[:i]
		}
	}
	inQuote := false
	for i := len(path) - 1; i >= 0; i-- {
		switch path[i] {
		case '"':
			if i == 0 || path[i-1] != '\\' {
				inQuote = !inQuote
			}
		case '.':
			if !inQuote {
				return path[:i]
			}
		}
	}
	return ""
}

func (s *state) errorf(table, key string, format string, args ...any) {
	if s.suppressed(table, key) {
		return
	}
	s.problems = append(s.problems, s.problemAt(table, key, false, format, args...))
}

// suppressed reports whether a rule's problem about key would only follow
// from a value already reported as undecodable (its default stands in):
// the key itself, or a key inside it, had a type error. Every other rule of
// the table is still checked, so all independent problems show at once.
func (s *state) suppressed(table, key string) bool {
	d := s.docs[table]
	if d == nil {
		return false
	}
	for _, k := range d.bad {
		if k == key || strings.HasPrefix(key, k+".") || strings.HasPrefix(key, k+"[") {
			return true
		}
	}
	return false
}

func (s *state) missing(table, key string, format string, args ...any) {
	s.problems = append(s.problems, s.problemAt(table, key, true, format, args...))
}

func (s *state) warnf(table, key string, format string, args ...any) {
	s.warnings = append(s.warnings, s.problemAt(table, key, false, format, args...))
}

// authored reports whether the layer that set table authored key.
func (s *state) authored(table, key string) bool {
	d := s.docs[table]
	if d == nil {
		return false
	}
	_, ok := d.pos[key]
	return ok
}

// unreliable reports whether table came from a document that could not be
// parsed at all (a syntax error): its rules are not checked. A table with a
// bad value is checked, its problems about that value suppressed.
func (s *state) unreliable(table string) bool {
	d := s.docs[table]
	return d != nil && d.broken
}

// validate checks every rule of docs/design.md §3 on the layered configuration.
func (s *state) validate() {
	c := &s.cfg
	check := func(table string, f func()) {
		if !s.unreliable(table) {
			f()
		}
	}
	check(TableContextCompaction, s.validateContextCompaction)
	check(TableCompaction, func() {
		switch c.Compaction.Shape {
		case ShapeAuto, ShapeKeepTail, ShapeSimple, ShapeServer:
		default:
			s.errorf(TableCompaction, "compaction.shape", "must be one of \"auto\", \"keep-tail\", \"simple\", \"server\" (got %q)", c.Compaction.Shape)
		}
		switch c.Compaction.Fallback {
		case FallbackExtractive, FallbackNone:
		default:
			s.errorf(TableCompaction, "compaction.fallback", "must be \"extractive\" (the embedded summarizer as a last binding) or \"none\" (got %q)", c.Compaction.Fallback)
		}
		if b := c.Compaction.ExtractiveSummaryBytes; b < MinExtractiveSummaryBytes || b > MaxMaxSummaryBytes {
			s.errorf(TableCompaction, "compaction.extractive_summary_bytes", "must be in %d..=%d bytes (got %d)", MinExtractiveSummaryBytes, MaxMaxSummaryBytes, b)
		}
		if b := c.Compaction.Binding; b != "" && !s.unreliable(TableSummarizer) {
			names := []string{ProviderExtractive} // the default binding
			if len(c.Summarizer.Bindings) > 0 {
				names = names[:0]
				for _, sb := range c.Summarizer.Bindings {
					names = append(names, sb.Name)
				}
			}
			if !slices.Contains(names, b) {
				s.errorf(TableCompaction, "compaction.binding", "no summarizer binding is named %q: choose one of %q (summarizer.bindings in the daemon's files)", b, names)
			}
		}
	})
	check(TableOffload, func() {
		o := c.Offload
		// Written so that it cannot overflow: head + tail < max.
		if o.KeepHead >= o.MaxChars || o.KeepTail >= o.MaxChars-o.KeepHead {
			key := "offload.keep_head"
			if !s.authored(TableOffload, key) && s.authored(TableOffload, "offload.keep_tail") {
				key = "offload.keep_tail"
			}
			s.errorf(TableOffload, key, "keep_head + keep_tail (%d + %d) must be less than max_chars (%d): the stub would be as long as the result", o.KeepHead, o.KeepTail, o.MaxChars)
		}
	})
	check(TableContextEditing, func() {
		switch c.ContextEditing.Mode {
		case EditModeLocal, EditModeServer, EditModeAuto:
		default:
			s.errorf(TableContextEditing, "context_editing.mode", "must be one of \"local\", \"server\", \"auto\" (got %q)", c.ContextEditing.Mode)
		}
	})
	check(TableSummarizer, s.validateBindings)
	for _, id := range slices.Sorted(maps.Keys(c.Models)) {
		m := c.Models[id]
		table := modelSourceKey(id)
		if s.unreliable(table) {
			continue
		}
		if m.ContextLimit == 0 {
			key := keyPath("models", id, "context_limit")
			if s.authored(table, key) {
				s.errorf(table, key, "must be > 0 (the model's context window in tokens)")
			} else {
				s.missing(table, key, "missing required key: set the model's context window in tokens, e.g. context_limit = 200000")
			}
		} else if m.ContextLimit < MinContextLimit || m.ContextLimit > MaxContextLimit {
			s.errorf(table, keyPath("models", id, "context_limit"), "%d tokens is outside %d..=%d (the model's context window in tokens)", m.ContextLimit, MinContextLimit, MaxContextLimit)
		}
		if strings.TrimSpace(id) == "" {
			s.errorf(table, keyPath("models", id), "a model id must not be empty (the model name requests carry, e.g. [models.\"claude-sonnet-4-5\"])")
		} else if strings.TrimSpace(id) != id {
			s.errorf(table, keyPath("models", id), "a model id must not begin or end with white space: no request's model would match it (did you mean [models.%q]?)", strings.TrimSpace(id))
		}
		if !(m.TokenFactor >= MinTokenFactor && m.TokenFactor <= MaxTokenFactor) {
			s.errorf(table, keyPath("models", id, "token_factor"), "must be a number from %g to %g (provider tokens per o200k_base token, e.g. 1.0)", MinTokenFactor, MaxTokenFactor)
		}
		if pr := m.Price; pr != nil {
			for _, f := range []struct {
				key string
				v   float64
			}{{"input", pr.Input}, {"cache_write_5m", pr.CacheWrite5m}, {"cache_write_1h", pr.CacheWrite1h}, {"cache_read", pr.CacheRead}, {"output", pr.Output}} {
				if !(f.v >= 0) || math.IsInf(f.v, 0) || f.v > MaxPricePerMTok {
					s.errorf(table, keyPath("models", id, "price", f.key), "must be a number from 0 to %d (US dollars per million tokens, e.g. 3.0)", MaxPricePerMTok)
				}
			}
		}
	}
	check(TableDaemon, s.validateDaemon)
	check(TableStorage, s.validateStorage)
	check(TableProxy, s.validateProxy)
	check(TableWorkers, func() {
		if c.Workers.Size < 1 {
			s.errorf(TableWorkers, "workers.size", "must be at least 1 (concurrent compactions)")
		}
		if c.Workers.Size > MaxWorkers {
			s.errorf(TableWorkers, "workers.size", "must be at most %d (concurrent compactions; each holds a summarizer request in memory)", MaxWorkers)
		}
		if c.Workers.Queue > MaxQueue {
			s.errorf(TableWorkers, "workers.queue", "must be at most %d (compactions waiting for a worker; the queue is allocated up front)", MaxQueue)
		}
		if c.Workers.Queue < 1 {
			s.errorf(TableWorkers, "workers.queue", "must be at least 1 (compactions waiting for a worker)")
		}
	})
}

func (s *state) validateContextCompaction() {
	cc := s.cfg.ContextCompaction
	const tk = "context_compaction.trigger"
	t := cc.Trigger
	switch {
	case t.Percent != 0 && t.BufferTokens != 0:
		s.errorf(TableContextCompaction, tk, "set exactly one of percent or buffer_tokens, e.g. trigger = { percent = 70 }")
	case t.Percent > 99:
		s.errorf(TableContextCompaction, tk+".percent", "must be in 1..=99 (got %d)", t.Percent)
	case t.Percent == 0 && t.BufferTokens == 0:
		switch {
		case s.authored(TableContextCompaction, tk+".percent"):
			s.errorf(TableContextCompaction, tk+".percent", "must be in 1..=99 (got 0)")
		case s.authored(TableContextCompaction, tk+".buffer_tokens"):
			s.errorf(TableContextCompaction, tk+".buffer_tokens", "must be > 0 (tokens left free below the context limit)")
		default:
			s.errorf(TableContextCompaction, tk, "set exactly one of percent or buffer_tokens, e.g. trigger = { percent = 70 }")
		}
	}
	if cc.MaxSummaryBytes < 1 || cc.MaxSummaryBytes > MaxMaxSummaryBytes {
		s.errorf(TableContextCompaction, "context_compaction.max_summary_bytes", "must be in 1..=%d bytes (got %d)", MaxMaxSummaryBytes, cc.MaxSummaryBytes)
	}
	switch p := cc.PreparePercent; {
	case p > PrepareOff:
		s.errorf(TableContextCompaction, "context_compaction.prepare_percent", "must be 0 (derived from the trigger), 1..=99 (per cent of the window, below the trigger) or %d (off), got %d", PrepareOff, p)
	case p > 0 && p < PrepareOff && t.Percent > 0 && p >= t.Percent:
		s.errorf(TableContextCompaction, "context_compaction.prepare_percent", "must be below the trigger's percent (%d), got %d: the summary is prepared before the trigger fires", t.Percent, p)
	}
	if p, n := cc.PreparePercent, t.BufferTokens; p > 0 && p < PrepareOff && n > 0 && t.Percent == 0 {
		// A buffer trigger's threshold is per model: the mark can only be
		// checked against the windows the configuration names (a mark at
		// or above a threshold prepares nothing before the trigger).
		var hit []string
		for _, id := range slices.Sorted(maps.Keys(s.cfg.Models)) {
			if l := s.cfg.Models[id].ContextLimit; l > n && cc.PrepareMark(l, l-n) >= l-n {
				hit = append(hit, fmt.Sprintf("%s (threshold %d)", id, l-n))
			}
		}
		switch {
		case len(hit) > 0:
			s.warnf(TableContextCompaction, "context_compaction.prepare_percent", "%d %% of the window is at or above the threshold of %d model(s): %s; their summary is not prepared before the trigger fires", p, len(hit), strings.Join(hit, ", "))
		case p >= 95:
			s.warnf(TableContextCompaction, "context_compaction.prepare_percent", "%d %% with a buffer_tokens trigger: a model whose window minus %d tokens is below %d %% of it prepares nothing before the trigger fires", p, n, p)
		}
	}
	switch cc.Idle {
	case IdleAuto, IdleOn, IdleOff:
	default:
		s.errorf(TableContextCompaction, "context_compaction.idle", "must be %q, %q or %q, got %q", IdleAuto, IdleOn, IdleOff, cc.Idle)
	}
	if n := t.BufferTokens; n > 0 && t.Percent == 0 {
		// A buffer at or above a model's window leaves it a threshold of 0:
		// no compaction can get under it, so automatic compaction never runs
		// for that model (docs/design.md §5.2 futility).
		var hit []string
		for _, id := range slices.Sorted(maps.Keys(s.cfg.Models)) {
			if l := s.cfg.Models[id].ContextLimit; l > 0 && n >= l {
				hit = append(hit, fmt.Sprintf("%s (%d)", id, l))
			}
		}
		if len(hit) > 0 {
			key := tk + ".buffer_tokens"
			if !s.authored(TableContextCompaction, key) && s.authored(TableContextCompaction, "context_compaction.buffer_tokens") {
				key = "context_compaction.buffer_tokens"
			}
			s.warnf(TableContextCompaction, key, "%d tokens is at or above the context window of %d model(s): %s; their threshold is 0 and automatic compaction never runs for them (a session on such a model needs a larger context_limit)", n, len(hit), strings.Join(hit, ", "))
		}
	}
}

func (s *state) validateBindings() {
	seen := map[string]string{}
	for i, b := range s.cfg.Summarizer.Bindings {
		at := indexPath("summarizer.bindings", i)
		key := func(k string) string { return childPath(at, k) }
		switch {
		case b.Name == "" && !s.authored(TableSummarizer, key("name")):
			s.missing(TableSummarizer, key("name"), "missing required key: give the binding a name, e.g. name = \"primary\"")
		case b.Name == "":
			s.errorf(TableSummarizer, key("name"), "must not be empty")
		case seen[b.Name] != "":
			s.errorf(TableSummarizer, key("name"), "duplicate binding name %q (also %s): names must be unique", b.Name, seen[b.Name])
		default:
			seen[b.Name] = at
		}
		switch b.Provider {
		case ProviderAnthropic, ProviderOpenAI, ProviderOpenAIResponses:
			if b.Model == "" {
				s.missingOrEmpty(key("model"), fmt.Sprintf("provider %q needs a model, e.g. model = %q", b.Provider, exampleModel(b.Provider)))
			}
		case ProviderExtractive:
			for _, kv := range [][2]string{{"model", b.Model}, {"base_url", b.BaseURL}, {"api_key_env", b.APIKeyEnv}} {
				if kv[1] != "" {
					s.warnf(TableSummarizer, key(kv[0]), "has no effect on the extractive provider")
				}
			}
		case "":
			s.missingOrEmpty(key("provider"), "set provider to \"anthropic\", \"openai\", \"openai-responses\" or \"extractive\"")
		default:
			s.errorf(TableSummarizer, key("provider"), "must be one of \"anthropic\", \"openai\", \"openai-responses\", \"extractive\" (got %q)", b.Provider)
		}
		if b.APIKeyEnv != "" {
			if msg := checkEnvName(b.APIKeyEnv, "ANTHROPIC_API_KEY"); msg != "" {
				s.errorf(TableSummarizer, key("api_key_env"), "%s", msg)
			}
		}
		if b.BaseURL != "" {
			if msg := checkBaseURL(b.BaseURL, "https://api.anthropic.com"); msg != "" {
				s.errorf(TableSummarizer, key("base_url"), "%s", msg)
			}
		}
	}
}

// checkBaseURL says what is wrong with a provider's base_url ("" when
// nothing): it must be an absolute http or https URL (example shows one)
// without user info, query or fragment. User info (user:pass@) is a
// credential: credentials come from api_key_env, and a URL is shown by
// status and doctor and may reach a log. A query or fragment cannot
// survive ctxd appending the API's path (/v1/messages) to the URL
// (docs/decisions.md). The message never repeats the URL, which may hold
// a password.
func checkBaseURL(raw, example string) string {
	u, err := url.Parse(raw)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Sprintf("must be an absolute http or https URL, e.g. %q", example)
	case u.User != nil:
		return "must not carry user info (user:password@): put the credential in the variable api_key_env names"
	case u.RawQuery != "" || u.ForceQuery:
		return "must not have a query (?…): ctxd appends the API's path to base_url, which a query would break"
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return "must not have a fragment (#…): ctxd appends the API's path to base_url, which a fragment would break"
	}
	return ""
}

// missingOrEmpty reports a required binding key that is absent or "".
func (s *state) missingOrEmpty(key, fix string) {
	if s.authored(TableSummarizer, key) {
		s.errorf(TableSummarizer, key, "must not be empty: %s", fix)
		return
	}
	s.missing(TableSummarizer, key, "missing required key: %s", fix)
}

func exampleModel(provider string) string {
	if provider == ProviderOpenAI || provider == ProviderOpenAIResponses {
		return "gpt-4.1-mini"
	}
	return "claude-haiku-4-5"
}

// checkEnvName returns "" when v is an environment variable name
// ([A-Z_][A-Z0-9_]*), else a message that never repeats v: a value that
// looks like a secret must not reach logs.
func checkEnvName(v, example string) string {
	if looksLikeSecret(v) {
		return fmt.Sprintf("looks like a secret, not a variable name: put the key in an environment variable and write that variable's NAME here, e.g. %q (and rotate the key if this file was shared)", example)
	}
	for i, r := range v {
		if !(r >= 'A' && r <= 'Z' || r == '_' || i > 0 && r >= '0' && r <= '9') {
			return fmt.Sprintf("must be the name of an environment variable ([A-Z_][A-Z0-9_]*), e.g. %q", example)
		}
	}
	return ""
}

// looksLikeSecret reports whether v looks like an API key or token rather
// than a variable name: a known key prefix, or a long run of letters and
// digits with no underscore.
func looksLikeSecret(v string) bool {
	for _, p := range []string{"sk-", "sk_", "sk-ant-", "xai-", "gsk_", "AIza", "Bearer ", "ghp_", "github_pat_"} {
		if strings.HasPrefix(v, p) {
			return true
		}
	}
	if len(v) < 24 || strings.Contains(v, "_") {
		return false
	}
	var letter, digit bool
	for _, r := range v {
		switch {
		case r >= '0' && r <= '9':
			digit = true
		case r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z':
			letter = true
		}
	}
	return letter && digit
}

func (s *state) validateDaemon() {
	d := s.cfg.Daemon
	s.positive(TableDaemon, "daemon.limits.", map[string]uint64{"header_bytes": d.Limits.HeaderBytes,
		"body_timeout_ms": d.Limits.BodyTimeoutMS, "body_min_rate": d.Limits.BodyMinRate,
		"idle_timeout_ms": d.Limits.IdleTimeoutMS, "connections": d.Limits.Connections})
	if d.Limits.Connections > 0 && d.Limits.OwnerConnections >= d.Limits.Connections {
		s.errorf(TableDaemon, "daemon.limits.owner_connections", "must be below daemon.limits.connections (%d): the other allowed users share the rest", d.Limits.Connections)
	}
	if d.AuthTokenEnv != "" {
		if msg := checkEnvName(d.AuthTokenEnv, "CTXD_AUTH_TOKEN"); msg != "" {
			s.errorf(TableDaemon, "daemon.auth_token_env", "%s", msg)
		}
	}
	if d.Listen == "" {
		return
	}
	host, port, err := net.SplitHostPort(d.Listen)
	if err != nil || port == "" {
		s.errorf(TableDaemon, "daemon.listen", "must be host:port, e.g. \"127.0.0.1:7411\"")
		return
	}
	if !validListenPort(port) {
		s.errorf(TableDaemon, "daemon.listen", "port %q: must be 1 to 65535 (0: any free port), e.g. \"127.0.0.1:7411\"", port)
		return
	}
	if d.AuthTokenEnv == "" {
		// docs/design.md §8b: loopback does not make TCP private — every local
		// user reaches it, bypassing the socket's peer-uid check.
		where := "every local user can reach a loopback port"
		if !isLoopback(host) {
			where = fmt.Sprintf("%q is not even a loopback address", host)
		}
		s.errorf(TableDaemon, "daemon.listen", "TCP needs a bearer token (%s): set auth_token_env to the name of an environment variable holding the token, e.g. auth_token_env = \"CTXD_AUTH_TOKEN\", or remove listen and use the unix socket", where)
	}
}

// Limits of [storage.nats].
const (
	// DefaultNATSReplicas is storage.nats.replicas when unset.
	DefaultNATSReplicas = 3
	// DefaultNATSAckWaitMS is storage.nats.ack_wait_ms when unset: a dead
	// node's compaction moves to another node within 30 s.
	DefaultNATSAckWaitMS = 30_000
	// MinNATSAckWaitMS bounds ack_wait_ms from below: a live node renews
	// its claim every ack_wait/4, and a shorter wait would hand a job on
	// at a garbage-collection pause or a slow network round trip.
	MinNATSAckWaitMS = 10_000
	// MaxNATSAckWaitMS (one day) bounds ack_wait_ms: a job's node silent
	// that long has stopped, and a larger value would overflow the
	// time.Duration it becomes.
	MaxNATSAckWaitMS = 86_400_000
)

func (s *state) validateStorage() {
	st := s.cfg.Storage
	if st.SessionMemoryBytes < MinSessionMemoryBytes {
		s.errorf(TableStorage, "storage.session_memory_bytes", "must be at least %d (1 MiB); the default is %d (256 MiB)", MinSessionMemoryBytes, DefaultSessionMemoryBytes)
	}
	switch st.Backend {
	case "", BackendBadger:
		if s.authored(TableStorage, "storage.nats") {
			s.warnf(TableStorage, "storage.nats", "is ignored: storage.backend is %q; set backend = %q to use it, or remove [storage.nats]", BackendBadger, BackendNATS)
		}
		return
	case BackendNATS:
	default:
		s.errorf(TableStorage, "storage.backend", "must be %q (embedded, the default) or %q (a fleet sharing a NATS JetStream cluster), got %q", BackendBadger, BackendNATS, st.Backend)
		return
	}
	n := st.NATS
	if len(n.Servers) == 0 && s.authored(TableStorage, "storage.nats.servers") {
		s.errorf(TableStorage, "storage.nats.servers", "must list at least one server with backend = \"nats\", e.g. servers = [\"nats://nats-1:4222\", \"nats://nats-2:4222\", \"nats://nats-3:4222\"]")
	} else if len(n.Servers) == 0 {
		s.missing(TableStorage, "storage.nats.servers", "missing required key with backend = \"nats\": the cluster's URLs, e.g. servers = [\"nats://nats-1:4222\", \"nats://nats-2:4222\", \"nats://nats-3:4222\"]")
	}
	for i, raw := range n.Servers {
		key := indexPath("storage.nats.servers", i)
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" || u.Port() == "" {
			s.errorf(TableStorage, key, "must be a URL with a host and port, e.g. \"nats://nats-1:4222\"")
			continue
		}
		if n, perr := strconv.Atoi(u.Port()); perr != nil || n < 1 || n > 65535 {
			s.errorf(TableStorage, key, "port %q: must be 1 to 65535, e.g. \"nats://nats-1:4222\"", u.Port())
			continue
		}
		switch u.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			s.errorf(TableStorage, key, "scheme %q: must be nats, tls, ws or wss", u.Scheme)
		}
		if u.User != nil {
			s.errorf(TableStorage, key, "must not carry credentials: use credentials_file or token_env")
		}
	}
	if n.CredentialsFile != "" && n.TokenEnv != "" {
		s.errorf(TableStorage, "storage.nats.token_env", "set at most one of credentials_file and token_env")
	}
	if n.TokenEnv != "" {
		if msg := checkEnvName(n.TokenEnv, "CTXD_NATS_TOKEN"); msg != "" {
			s.errorf(TableStorage, "storage.nats.token_env", "%s", msg)
		}
	}
	switch n.Replicas {
	case 0, 1, 3, 5:
	default:
		s.errorf(TableStorage, "storage.nats.replicas", "must be 1, 3 or 5 (3 in production: an append survives the loss of one server)")
	}
	if n.Prefix != "" || s.authored(TableStorage, "storage.nats.prefix") {
		ok := len(n.Prefix) >= 1 && len(n.Prefix) <= 32
		for _, c := range n.Prefix {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
				ok = false
			}
		}
		if !ok {
			s.errorf(TableStorage, "storage.nats.prefix", "must be 1 to 32 characters from [A-Za-z0-9_-], e.g. prefix = \"ctxd\"")
		}
	}
	if n.AckWaitMS != 0 && n.AckWaitMS < MinNATSAckWaitMS {
		s.errorf(TableStorage, "storage.nats.ack_wait_ms", "must be at least %d (a live node renews its claim every ack_wait/4), e.g. ack_wait_ms = %d", MinNATSAckWaitMS, DefaultNATSAckWaitMS)
	} else if n.AckWaitMS > MaxNATSAckWaitMS {
		s.errorf(TableStorage, "storage.nats.ack_wait_ms", "must be at most %d (one day), e.g. ack_wait_ms = %d", MaxNATSAckWaitMS, DefaultNATSAckWaitMS)
	}
}

// isLoopback reports whether host names only the loopback interface. An
// empty host (":7411") listens on every interface.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// positive reports every key of vals (under prefix) that is 0: a limit
// that must be set.
func (s *state) positive(table, prefix string, vals map[string]uint64) {
	keys := make([]string, 0, len(vals))
	for k := range vals {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if vals[k] == 0 {
			s.errorf(table, prefix+k, "must be at least 1 (a limit cannot be turned off; raise it instead)")
		}
	}
}

func (s *state) validateProxy() {
	p := s.cfg.Proxy
	l := p.Limits
	s.positive(TableProxy, "proxy.limits.", map[string]uint64{"header_bytes": l.HeaderBytes, "body_bytes": l.BodyBytes,
		"body_timeout_ms": l.BodyTimeoutMS, "body_min_rate": l.BodyMinRate, "idle_timeout_ms": l.IdleTimeoutMS,
		"messages": l.Messages, "content_blocks": l.ContentBlocks, "sse_line_bytes": l.SSELineBytes, "connections": l.Connections})
	if l.BodyBytes > 1<<30 {
		s.errorf(TableProxy, "proxy.limits.body_bytes", "must be at most 1073741824 (1 GiB); the providers refuse far less")
	}
	if p.MemoryBytes < MinProxyMemoryBytes {
		s.errorf(TableProxy, "proxy.memory_bytes", "must be at least %d (1 MiB); the default is %d (64 MiB)", MinProxyMemoryBytes, DefaultProxyMemoryBytes)
	}
	switch p.Mode {
	case ProxyModeEnforce, ProxyModeObserve:
	default:
		s.errorf(TableProxy, "proxy.mode", "must be %q (send ctxd's context) or %q (forward every request as the client sent it and project the savings), got %q", ProxyModeEnforce, ProxyModeObserve, p.Mode)
	}
	switch p.Summarizer {
	case ProxySummarizerClient, ProxySummarizerBindings:
	default:
		s.errorf(TableProxy, "proxy.summarizer", "must be %q (the session's own upstream, model and credential) or %q (the configured [[summarizer.bindings]]), got %q", ProxySummarizerClient, ProxySummarizerBindings, p.Summarizer)
	}
	if host, port, err := net.SplitHostPort(p.Listen); err != nil || port == "" {
		s.errorf(TableProxy, "proxy.listen", "must be host:port, e.g. %q", DefaultProxyListen)
	} else if !validListenPort(port) {
		s.errorf(TableProxy, "proxy.listen", "port %q: must be 1 to 65535 (0: any free port), e.g. %q", port, DefaultProxyListen)
	} else if !isLoopback(host) && (p.Auth == ProxyAuthLoopback || p.Auth == "") {
		s.errorf(TableProxy, "proxy.listen", "%q is not a loopback address: with proxy.auth = %q the proxy listens on 127.0.0.1, ::1 or localhost only; behind a load balancer set proxy.auth = %q (clients send the daemon's token) or %q (the balancer authenticates them)", host, ProxyAuthLoopback, ProxyAuthToken, ProxyAuthFrontend)
	}
	switch p.Auth {
	case "", ProxyAuthLoopback, ProxyAuthFrontend:
	case ProxyAuthToken:
		if s.cfg.Daemon.AuthTokenEnv == "" {
			s.errorf(TableProxy, "proxy.auth", "%q needs the daemon's bearer token: set daemon.auth_token_env to the name of an environment variable holding it, e.g. auth_token_env = \"CTXD_AUTH_TOKEN\"", ProxyAuthToken)
		}
	default:
		s.errorf(TableProxy, "proxy.auth", "must be %q (the default: loopback only), %q (clients send the daemon's bearer token in Ctxd-Proxy-Token) or %q (a load balancer in front authenticates them), got %q", ProxyAuthLoopback, ProxyAuthToken, ProxyAuthFrontend, p.Auth)
	}
	for _, up := range []struct{ name, url, example string }{
		{"anthropic", p.Upstreams.Anthropic.BaseURL, DefaultAnthropicBaseURL},
		{"openai", p.Upstreams.OpenAI.BaseURL, DefaultOpenAIBaseURL},
	} {
		if msg := checkBaseURL(up.url, up.example); msg != "" {
			s.errorf(TableProxy, "proxy.upstreams."+up.name+".base_url", "%s", msg)
		} else if u, _ := url.Parse(up.url); strings.HasSuffix(strings.TrimRight(u.Path, "/"), "/v1") {
			// The proxy appends the client's whole path (/v1/…) to the
			// upstream's: a /v1 here would be sent /v1/v1/….
			s.errorf(TableProxy, "proxy.upstreams."+up.name+".base_url", "must not end in /v1: the proxy appends the client's path (/v1/…) to it, so the upstream would receive /v1/v1/…; drop the /v1, e.g. %q", up.example)
		}
	}
}

// validListenPort reports whether a listen address's port is a number in
// 0..65535 (0 asks the kernel for any free port).
func validListenPort(port string) bool {
	n, err := strconv.Atoi(port)
	return err == nil && n >= 0 && n <= 65535
}
