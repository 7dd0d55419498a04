package config

import (
	"fmt"
	"maps"
	"net/url"
	"strings"
	"time"
)

// Default values of docs/design.md §3, in the units named by each key.
const (
	DefaultTriggerPercent          = 70
	DefaultMaxSummaryBytes         = 262144  // bytes
	MaxMaxSummaryBytes             = 2097152 // bytes (2 MiB), inclusive
	DefaultKeepRecentTokens        = 16384   // tokens
	DefaultExtractiveSummaryBytes  = 10240   // bytes
	MinExtractiveSummaryBytes      = 1024    // bytes, inclusive
	DefaultOffloadMaxChars         = 16000   // code points
	DefaultOffloadKeepHead         = 4000    // code points
	DefaultOffloadKeepTail         = 1000    // code points
	DefaultKeepRecentTurns         = 3
	DefaultMinCharsToElide         = 1000   // code points
	DefaultMaxTotalToolResultChars = 100000 // code points
	DefaultMinCharsPerPass         = 50000  // code points
	DefaultWorkersSize             = 4
	DefaultWorkersQueue            = 64
	// DefaultMinFreeBytes is storage.min_free_bytes (128 MiB): room for
	// what badger writes on its own (a memtable flush, a compaction) and
	// one request of up to 32 MiB with its offloaded copy, so a write never
	// meets a full file system through badger's memory maps (a SIGBUS).
	DefaultMinFreeBytes = 128 << 20
	// DefaultSessionMemoryBytes is storage.session_memory_bytes (256 MiB):
	// about 1,000 loaded conversations of 250k tokens whose large tool
	// results are offloaded, or 8 requests at the 32 MiB body limit.
	DefaultSessionMemoryBytes = 256 << 20
	// MinSessionMemoryBytes is the smallest storage.session_memory_bytes
	// (1 MiB): below it every request would reload its session.
	MinSessionMemoryBytes = 1 << 20
	// DefaultProxyMemoryBytes is proxy.memory_bytes (64 MiB): the proxy's
	// digests of ~100,000 conversations' last requests, or the caches
	// (last outgoing encodings and client indexes) of ~100 branches at
	// 250k tokens whose large tool results are offloaded.
	DefaultProxyMemoryBytes = 64 << 20
	// MinProxyMemoryBytes is the smallest proxy.memory_bytes (1 MiB).
	MinProxyMemoryBytes = 1 << 20
	// DefaultModelTokenFactor is the token_factor of an authored model entry
	// that omits it.
	DefaultModelTokenFactor = 1.0
)

// Table names, the keys of Config.Sources besides model entries.
const (
	TableContextCompaction = "context_compaction"
	TableCompaction        = "compaction"
	TableOffload           = "offload"
	TableContextEditing    = "context_editing"
	TableSummarizer        = "summarizer"
	TableDaemon            = "daemon"
	TableStorage           = "storage"
	TableWorkers           = "workers"
	TableProxy             = "proxy"
)

// Proxy defaults (docs/design.md §10).
const (
	// DefaultProxyListen is the proxy's documented loopback address:
	// ANTHROPIC_BASE_URL=http://127.0.0.1:7420.
	DefaultProxyListen = "127.0.0.1:7420"
	// DefaultAnthropicBaseURL is the Anthropic upstream's default.
	DefaultAnthropicBaseURL = "https://api.anthropic.com"
	// DefaultOpenAIBaseURL is the OpenAI upstream's default.
	DefaultOpenAIBaseURL = "https://api.openai.com"
	// DefaultDialTimeoutMS and DefaultHeaderTimeoutMS are an upstream's
	// timeouts, in milliseconds.
	DefaultDialTimeoutMS   = 10000
	DefaultHeaderTimeoutMS = 600000
	// DefaultStreamIdleTimeoutMS is an upstream's stream idle timeout, in
	// milliseconds.
	DefaultStreamIdleTimeoutMS = 300000
	// ProxySummarizerClient and ProxySummarizerBindings are the values of
	// proxy.summarizer.
	ProxySummarizerClient   = "client"
	ProxySummarizerBindings = "bindings"
	// ProxyModeEnforce and ProxyModeObserve are the values of proxy.mode.
	ProxyModeEnforce = "enforce"
	ProxyModeObserve = "observe"
	// ProxyAuthLoopback, ProxyAuthToken and ProxyAuthFrontend are the
	// values of proxy.auth: who may reach the proxy.
	ProxyAuthLoopback = "loopback"
	ProxyAuthToken    = "token"
	ProxyAuthFrontend = "frontend"
)

// SourceDefault is the Sources value of a table nobody authored.
const SourceDefault = "default"

// SourceCatalog is the ModelSources value of a field the built-in model
// catalog set.
const SourceCatalog = "catalog"

// tables lists the replaceable top-level tables in file order.
var tables = []string{
	TableContextCompaction, TableCompaction, TableOffload, TableContextEditing,
	TableSummarizer, TableDaemon, TableStorage, TableWorkers, TableProxy,
}

// Defaults returns the built-in configuration: every key of docs/design.md §3 at
// its default, the model catalog, and Sources saying "default" everywhere.
// Each call returns fresh slices and maps.
func Defaults() Config {
	c := Config{
		ContextCompaction: defaultContextCompaction(),
		Compaction:        Compaction{Shape: ShapeAuto, KeepFirstRequest: true, Fallback: FallbackExtractive, ExtractiveSummaryBytes: DefaultExtractiveSummaryBytes},
		Offload:           defaultOffload(),
		ContextEditing:    defaultContextEditing(),
		Models:            Catalog(),
		Storage:           Storage{SyncWrites: true, MinFreeBytes: DefaultMinFreeBytes, SessionMemoryBytes: DefaultSessionMemoryBytes},
		Workers:           Workers{Size: DefaultWorkersSize, Queue: DefaultWorkersQueue},
		Proxy:             defaultProxy(),
		Daemon:            Daemon{Limits: DefaultDaemonLimits()},
		Sources:           map[string]string{},
	}
	for _, t := range tables {
		c.Sources[t] = SourceDefault
	}
	c.ModelSources = make(map[string]ModelFieldSources, len(c.Models))
	for id := range c.Models {
		c.Sources[modelSourceKey(id)] = SourceDefault
		c.ModelSources[id] = c.modelSources(id)
	}
	return c
}

func defaultContextCompaction() ContextCompaction {
	return ContextCompaction{
		Auto:             true,
		Trigger:          Trigger{Percent: DefaultTriggerPercent},
		MaxSummaryBytes:  DefaultMaxSummaryBytes,
		KeepRecentTokens: DefaultKeepRecentTokens,
		Idle:             IdleAuto,
		WeighCompactions: true,
	}
}

func defaultOffload() Offload {
	return Offload{
		Enabled:  true,
		MaxChars: DefaultOffloadMaxChars,
		KeepHead: DefaultOffloadKeepHead,
		KeepTail: DefaultOffloadKeepTail,
		Exclude:  []string{"read"},
	}
}

func defaultContextEditing() ContextEditing {
	return ContextEditing{
		Enabled:                 true,
		Mode:                    EditModeLocal,
		KeepRecentTurns:         DefaultKeepRecentTurns,
		MinCharsToElide:         DefaultMinCharsToElide,
		MaxTotalToolResultChars: DefaultMaxTotalToolResultChars,
		MinCharsPerPass:         DefaultMinCharsPerPass,
		ProtectToolNames:        []string{"todo", "plan"},
		ArtifactReadTools:       []string{"read"},
		ClearToolInputs:         true,
	}
}

// Values of Compaction.Shape (docs/design.md §3).
const (
	ShapeAuto     = "auto"
	ShapeKeepTail = "keep-tail"
	ShapeSimple   = "simple"
	ShapeServer   = "server"
)

// Values of Compaction.Fallback (docs/design.md §5.5).
const (
	FallbackExtractive = "extractive"
	FallbackNone       = "none"
)

// FirstRequestMaxTokens is the size in tokens up to which the first request
// is carried verbatim (docs/design.md §5.2 keep_first_request).
const FirstRequestMaxTokens = 2000

// Values of ContextEditing.Mode (docs/design.md §6).
const (
	EditModeLocal  = "local"
	EditModeServer = "server"
	EditModeAuto   = "auto"
)

// Values of Binding.Provider (docs/design.md §3).
const (
	ProviderAnthropic = "anthropic"
	ProviderOpenAI    = "openai"
	// ProviderOpenAIResponses is the OpenAI Responses API (POST
	// /v1/responses), where "openai" is Chat Completions.
	ProviderOpenAIResponses = "openai-responses"
	ProviderExtractive      = "extractive"
)

// claude is a catalog entry for Anthropic models: o200k_base undercounts
// Claude's tokenizer by 15–45 %, hence 1.35 (docs/design.md §2); thinking
// signatures bind to the prefix and the API edits context server-side.
func claude(limit uint64) Model {
	return Model{ContextLimit: limit, ThinkingBinding: true, ServerContextEditing: true, TokenFactor: 1.35}
}

// compacting marks a catalog entry whose provider compacts server-side:
// the Anthropic models Anthropic lists for compact_20260112 (Opus 4.6 and
// later, Sonnet 4.6).
func compacting(m Model) Model {
	m.ServerCompaction = true
	return m
}

// openai is a catalog entry for OpenAI models, which tokenize with o200k_base.
func openai(limit uint64) Model {
	return Model{ContextLimit: limit, TokenFactor: 1.0}
}

// catalog is the built-in model table. Limits are the providers' published
// input windows in tokens (the default tier; a session may give its own).
var catalog = map[string]Model{
	// Anthropic, Claude 4.x. "-0" ids are Anthropic's aliases of the 4.0 models.
	"claude-opus-4":     claude(200000),
	"claude-opus-4-0":   claude(200000),
	"claude-opus-4-1":   claude(200000),
	"claude-opus-4-5":   claude(200000),
	"claude-opus-4-6":   compacting(claude(200000)),
	"claude-opus-4-7":   compacting(claude(200000)),
	"claude-opus-4-8":   compacting(claude(200000)),
	"claude-sonnet-4":   claude(200000),
	"claude-sonnet-4-0": claude(200000),
	"claude-sonnet-4-5": claude(200000),
	"claude-sonnet-4-6": compacting(claude(200000)),
	"claude-haiku-4-5":  claude(200000),

	// OpenAI.
	"gpt-4o":       openai(128000),
	"gpt-4o-mini":  openai(128000),
	"gpt-4.1":      openai(1047576),
	"gpt-4.1-mini": openai(1047576),
	"gpt-4.1-nano": openai(1047576),
	"gpt-5":        openai(400000),
	"gpt-5-mini":   openai(400000),
	"gpt-5-nano":   openai(400000),
	"o1":           openai(200000),
	"o3":           openai(200000),
	"o3-mini":      openai(200000),
	"o4-mini":      openai(200000),
	// Codex CLI's models (the list its 0.171.0 release ships, with each
	// model's context_window): gpt-6.2-sol is the model Codex sends when
	// given none, so the README's Codex recipe is managed as it stands.
	"gpt-6.2-sol": openai(500000),
	"gpt-5.5":     openai(272000),

	// Open-weight models as commonly served by OpenAI-compatible servers.
	// gpt-oss uses o200k (harmony); Llama 3 counts ~10 % more than o200k.
	"gpt-oss-20b":            openai(131072),
	"gpt-oss-120b":           openai(131072),
	"llama-3.1-8b-instruct":  {ContextLimit: 131072, TokenFactor: 1.1},
	"llama-3.3-70b-instruct": {ContextLimit: 131072, TokenFactor: 1.1},
}

// Catalog returns a copy of the built-in model catalog (docs/design.md §3,
// [models."<id>"]), keyed by model id.
func Catalog() map[string]Model {
	return maps.Clone(catalog)
}

// Model returns the entry for model id (docs/design.md §3): an exact key of
// c.Models first; otherwise the longest key K such that id is K followed by
// a date suffix — "-YYYYMMDD", "-YYYY-MM-DD" or "@YYYYMMDD" (Vertex AI), as
// in "claude-sonnet-4-5-20250929" or "gpt-4o-2024-08-06". Any other suffix
// does not match: a model the catalog lacks must be given a limit, never a
// guessed one. The boolean is false when nothing matches.
func (c Config) Model(id string) (Model, bool) {
	k := c.modelKey(id)
	if k == "" {
		return Model{}, false
	}
	return c.Models[k], true
}

// modelKey is the key of c.Models that Model uses for id, "" when none.
func (c Config) modelKey(id string) string {
	if _, ok := c.Models[id]; ok {
		return id
	}
	best := ""
	for k := range c.Models {
		if len(k) > len(best) && strings.HasPrefix(id, k) && isDateSuffix(id[len(k):]) {
			best = k
		}
	}
	return best
}

// isDateSuffix reports whether s is "-YYYYMMDD", "@YYYYMMDD" or "-YYYY-MM-DD".
func isDateSuffix(s string) bool {
	if len(s) < 2 || (s[0] != '-' && s[0] != '@') {
		return false
	}
	d := s[1:]
	if len(d) == 10 && s[0] == '-' && d[4] == '-' && d[7] == '-' {
		d = d[:4] + d[5:7] + d[8:]
	}
	if len(d) != 8 {
		return false
	}
	for i := 0; i < len(d); i++ {
		if d[i] < '0' || d[i] > '9' {
			return false
		}
	}
	return true
}

func defaultProxy() Proxy {
	return Proxy{
		Enabled:     true,
		Listen:      DefaultProxyListen,
		Auth:        ProxyAuthLoopback,
		Summarizer:  ProxySummarizerClient,
		Mode:        ProxyModeEnforce,
		MemoryBytes: DefaultProxyMemoryBytes,
		Upstreams: Upstreams{Anthropic: Upstream{
			BaseURL:             DefaultAnthropicBaseURL,
			DialTimeoutMS:       DefaultDialTimeoutMS,
			HeaderTimeoutMS:     DefaultHeaderTimeoutMS,
			StreamIdleTimeoutMS: DefaultStreamIdleTimeoutMS,
		}, OpenAI: Upstream{
			BaseURL:             DefaultOpenAIBaseURL,
			DialTimeoutMS:       DefaultDialTimeoutMS,
			HeaderTimeoutMS:     DefaultHeaderTimeoutMS,
			StreamIdleTimeoutMS: DefaultStreamIdleTimeoutMS,
		}},
		Limits: DefaultProxyLimits(),
		Quotas: ProxyQuotas{Sessions: 1000, Bytes: 2 << 30, SessionExpiryHours: 720},
	}
}

// DefaultProxyLimits is [proxy.limits] as built in.
func DefaultProxyLimits() ProxyLimits {
	return ProxyLimits{HeaderBytes: 256 << 10, BodyBytes: 32 << 20, BodyTimeoutMS: 30000, BodyMinRate: 64 << 10,
		IdleTimeoutMS: 120000, Messages: 100000, ContentBlocks: 200000, SSELineBytes: 16 << 20, Connections: 512}
}

// DefaultDaemonLimits is [daemon.limits] as built in.
func DefaultDaemonLimits() DaemonLimits {
	return DaemonLimits{HeaderBytes: 64 << 10, BodyTimeoutMS: 30000, BodyMinRate: 64 << 10, IdleTimeoutMS: 60000,
		Connections: 512, OwnerConnections: 64}
}

// MemoryBound is proxy.memory_bytes, DefaultProxyMemoryBytes when unset
// (0: a proxy built with a zero Proxy).
func (p Proxy) MemoryBound() int64 {
	if p.MemoryBytes > 0 {
		return int64(p.MemoryBytes)
	}
	return DefaultProxyMemoryBytes
}

// DialTimeout is dial_timeout_ms as a duration, DefaultDialTimeoutMS
// when unset (0) or past a duration's range.
func (u Upstream) DialTimeout() time.Duration {
	if d := time.Duration(u.DialTimeoutMS) * time.Millisecond; d > 0 {
		return d
	}
	return DefaultDialTimeoutMS * time.Millisecond
}

// BaseURLs are the upstreams' base URLs, each its provider's default
// (DefaultAnthropicBaseURL, DefaultOpenAIBaseURL) when unset, so a proxy
// built with a zero Proxy reaches the public endpoints. Errors: one is not
// an absolute http or https URL, naming its key (Validate checks more).
func (u Upstreams) BaseURLs() (anthropic, openai *url.URL, err error) {
	parse := func(name, s, def string) (*url.URL, error) {
		if s == "" {
			s = def
		}
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("proxy.upstreams.%s.base_url: %q is not an absolute http or https URL", name, s)
		}
		return u, nil
	}
	if anthropic, err = parse("anthropic", u.Anthropic.BaseURL, DefaultAnthropicBaseURL); err != nil {
		return nil, nil, err
	}
	if openai, err = parse("openai", u.OpenAI.BaseURL, DefaultOpenAIBaseURL); err != nil {
		return nil, nil, err
	}
	return anthropic, openai, nil
}

// WithDefaults is l with every unset (0) key at its built-in default
// (DefaultProxyLimits), so a proxy built with a zero Proxy (tests,
// embedders) is bounded as a daemon's is.
func (l ProxyLimits) WithDefaults() ProxyLimits {
	d := DefaultProxyLimits()
	set := func(v *uint64, def uint64) {
		if *v == 0 {
			*v = def
		}
	}
	set(&l.HeaderBytes, d.HeaderBytes)
	set(&l.BodyBytes, d.BodyBytes)
	set(&l.BodyTimeoutMS, d.BodyTimeoutMS)
	set(&l.BodyMinRate, d.BodyMinRate)
	set(&l.IdleTimeoutMS, d.IdleTimeoutMS)
	set(&l.Messages, d.Messages)
	set(&l.ContentBlocks, d.ContentBlocks)
	set(&l.SSELineBytes, d.SSELineBytes)
	set(&l.Connections, d.Connections)
	return l
}
