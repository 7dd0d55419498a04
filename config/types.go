// Package config owns ctxd's configuration (docs/design.md §3): the TOML schema,
// built-in defaults, layering, strict decoding, validation, and authored
// compaction.md agent files (§5.4). It reads only the files it is given and
// has no other side effects.
package config

// Config is the effective configuration of ctxd: every table of docs/design.md §3.
// The TOML names of tables and keys are the toml struct tags.
type Config struct {
	ContextCompaction ContextCompaction `toml:"context_compaction" json:"context_compaction"`
	Compaction        Compaction        `toml:"compaction" json:"compaction"`
	Offload           Offload           `toml:"offload" json:"offload"`
	ContextEditing    ContextEditing    `toml:"context_editing" json:"context_editing"`
	Summarizer        Summarizer        `toml:"summarizer" json:"summarizer"`
	// Models maps a model id to its entry; it starts as the built-in catalog
	// and an authored entry overrides the keys it sets of the entry below it.
	Models  map[string]Model `toml:"models" json:"models"`
	Daemon  Daemon           `toml:"daemon" json:"daemon"`
	Storage Storage          `toml:"storage" json:"storage"`
	Workers Workers          `toml:"workers" json:"workers"`
	// Proxy is the provider proxy (docs/design.md §10): daemon files only, never
	// a session overlay.
	Proxy Proxy `toml:"proxy" json:"proxy"`

	// Sources maps each table to the layer that set it: a file path, an
	// overlay name, or "default". Keys are "context_compaction",
	// "compaction", "offload", "context_editing", "summarizer", "daemon",
	// "storage", "workers", "proxy" and `models."<id>"` for each model entry. It is
	// filled by Load and ApplyOverlay, never decoded from TOML.
	Sources map[string]string `toml:"-" json:"sources,omitempty"`
	// ModelSources maps each model id of Models to the source of each of
	// its fields: SourceCatalog (the built-in catalog), SourceDefault (a
	// key no layer set, for a model the catalog lacks), or the file or
	// overlay that set it. Filled by Load and ApplyOverlay; a model
	// missing here is the catalog's.
	ModelSources map[string]ModelFieldSources `toml:"-" json:"model_sources,omitempty"`
}

// ModelFieldSources names where each field of one [models."<id>"] entry
// came from (Config.ModelSources), with the TOML key names.
type ModelFieldSources struct {
	ContextLimit         string `json:"context_limit"`
	ThinkingBinding      string `json:"thinking_binding"`
	ServerContextEditing string `json:"server_context_editing"`
	ServerCompaction     string `json:"server_compaction"`
	TokenFactor          string `json:"token_factor"`
}

// modelSources is the field sources of model id (an exact key of Models or
// the undated entry a dated id uses): every field SourceCatalog when none
// are recorded.
func (c Config) modelSources(id string) ModelFieldSources {
	if src, ok := c.ModelSources[id]; ok {
		return src
	}
	if k := c.modelKey(id); k != id {
		if src, ok := c.ModelSources[k]; ok {
			return src
		}
	}
	return ModelFieldSources{ContextLimit: SourceCatalog, ThinkingBinding: SourceCatalog,
		ServerContextEditing: SourceCatalog, ServerCompaction: SourceCatalog, TokenFactor: SourceCatalog}
}

// ModelSourcesOf returns the field sources of model id's effective entry
// (Model's lookup), and whether the entry exists.
func (c Config) ModelSourcesOf(id string) (ModelFieldSources, bool) {
	if _, ok := c.Model(id); !ok {
		return ModelFieldSources{}, false
	}
	return c.modelSources(id), true
}

// Trigger is the compaction threshold rule (docs/design.md §3): exactly one of
// Percent (1..=99) or BufferTokens (> 0) is set.
type Trigger struct {
	// Percent: threshold = floor(context_limit × Percent / 100).
	Percent uint64 `toml:"percent,omitempty" json:"percent,omitempty"`
	// BufferTokens: threshold = context_limit − BufferTokens, saturating at 0.
	BufferTokens uint64 `toml:"buffer_tokens,omitempty" json:"buffer_tokens,omitempty"`
}

// ContextCompaction is the [context_compaction] table (docs/design.md §3).
type ContextCompaction struct {
	// Auto enables the automatic signals (post-check and pre-send). Manual
	// and overflow compaction work regardless. Default true.
	Auto bool `toml:"auto" json:"auto"`
	// Trigger is the threshold rule. Default { percent = 70 }.
	Trigger Trigger `toml:"trigger" json:"trigger"`
	// BufferTokens is the legacy alias of Trigger = { buffer_tokens = N }
	// (> 0). Setting it together with trigger is an error. Load folds it
	// into Trigger and clears it, so the effective config never carries it.
	BufferTokens uint64 `toml:"buffer_tokens,omitempty" json:"buffer_tokens,omitempty"`
	// MaxSummaryBytes is the hard limit on a summary, in bytes,
	// 1..=2097152. Default 262144.
	MaxSummaryBytes uint64 `toml:"max_summary_bytes" json:"max_summary_bytes"`
	// KeepRecentTokens is the retention budget in tokens (§5.2); 0 retains
	// nothing. Default 16384.
	KeepRecentTokens uint64 `toml:"keep_recent_tokens" json:"keep_recent_tokens"`
	// PreparePercent is the prepare mark of speculative summaries
	// (docs/design.md §5.1), in per cent of the context window: a session
	// whose context reaches it has its summary made in the background,
	// installed when the trigger fires. 0 (the default) derives it from
	// the trigger (PrepareMark), except for a session whose summarizer the
	// client's credential pays (none there); 1..=99 below a percent
	// trigger sets it, for every session;
	// PrepareOff (100) turns speculative summaries off.
	PreparePercent uint64 `toml:"prepare_percent,omitempty" json:"prepare_percent,omitempty"`
	// Idle is idle compaction timed to the prompt cache (docs/design.md
	// §5.1): IdleAuto (the default: on unless the session's summarizer is
	// paid by the client's credential), IdleOn or IdleOff.
	Idle string `toml:"idle" json:"idle"`
	// WeighCompactions: an automatic compaction between the threshold and
	// the hard mark (halfway from the threshold to the window) fires only
	// when what it saves over the requests expected pays for its cache
	// rewrite and its summary (docs/design.md §4); false compacts at the
	// threshold always. Default true.
	WeighCompactions bool `toml:"weigh_compactions" json:"weigh_compactions"`
}

// Values of context_compaction.idle.
const (
	IdleAuto = "auto"
	IdleOn   = "on"
	IdleOff  = "off"
)

// PrepareOff is the context_compaction.prepare_percent that turns
// speculative summaries off.
const PrepareOff = 100

// DefaultPrepareGap is how far below the threshold the derived prepare
// mark lies, in per cent of the context window: a trigger of 70 per cent
// prepares at 60.
const DefaultPrepareGap = 10

// PrepareMark is the token count at or above which a session of
// contextLimit tokens whose threshold is threshold (trigger.Threshold)
// prepares its summary: prepare_percent of the window when set; else
// DefaultPrepareGap per cent of the window below the threshold (at least
// half of it); 0 when speculative summaries are off (PrepareOff), or the
// window is unknown.
func (cc ContextCompaction) PrepareMark(contextLimit, threshold uint64) uint64 {
	switch {
	case contextLimit == 0 || threshold == 0 || cc.PreparePercent >= PrepareOff:
		return 0
	case cc.PreparePercent > 0:
		return min(contextLimit/100*cc.PreparePercent+contextLimit%100*cc.PreparePercent/100, threshold)
	}
	gap := contextLimit / 100 * DefaultPrepareGap
	return max(threshold-min(gap, threshold/2), 1)
}

// Compaction is the [compaction] table: ctxd's own compaction keys.
type Compaction struct {
	// Shape is "auto", "keep-tail", "simple" or "server". Default "auto".
	Shape string `toml:"shape" json:"shape"`
	// AgentFile is the path of an authored compaction.md (§5.4), or "".
	AgentFile string `toml:"agent_file,omitempty" json:"agent_file,omitempty"`
	// KeepFirstRequest carries the session's first user request as pinned
	// context after every compaction, verbatim up to FirstRequestMaxTokens
	// tokens, else its head and tail with the artifact URI of the whole
	// (docs/design.md §5.2). Default true. A session-overlay (policy) key.
	KeepFirstRequest bool `toml:"keep_first_request" json:"keep_first_request"`
	// Fallback is "extractive" (default: the embedded extractive
	// summarizer is an implicit last binding, docs/design.md §5.5) or "none".
	// A session-overlay (policy) key.
	Fallback string `toml:"fallback" json:"fallback"`
	// ExtractiveSummaryBytes is the byte budget of the embedded extractive
	// summarizer, 1024..=2097152; the extractive summary is at most the
	// smaller of it and context_compaction.max_summary_bytes. Default
	// 10240, about what an LLM summary of a 150k–170k-token session takes
	// (docs/decisions.md).
	ExtractiveSummaryBytes uint64 `toml:"extractive_summary_bytes" json:"extractive_summary_bytes"`
	// Binding names the summarizer binding compactions start with: one of
	// summarizer.bindings' names ("extractive" when none is configured).
	// The bindings before it are skipped, the ones after it stay the
	// fallback (Config.SummarizerBindings). "" starts with the first. A
	// session overlay chooses its summarizer with this key, never by
	// defining a binding (docs/design.md §3).
	Binding string `toml:"binding,omitempty" json:"binding,omitempty"`
}

// Offload is the [offload] table (docs/design.md §6). Limits count characters
// (Unicode code points).
type Offload struct {
	// Enabled turns offloading on. Default true.
	Enabled bool `toml:"enabled" json:"enabled"`
	// MaxChars: a tool result longer than this is offloaded. Default 16000.
	MaxChars uint64 `toml:"max_chars" json:"max_chars"`
	// KeepHead and KeepTail are the characters the stub keeps from each
	// end; KeepHead + KeepTail < MaxChars. Defaults 4000 and 1000.
	KeepHead uint64 `toml:"keep_head" json:"keep_head"`
	KeepTail uint64 `toml:"keep_tail" json:"keep_tail"`
	// Exclude names tools whose results are never offloaded. Default ["read"].
	Exclude []string `toml:"exclude" json:"exclude"`
	// Dir is where offloaded results are written; "" means
	// <storage.data_dir>/offload.
	Dir string `toml:"dir,omitempty" json:"dir,omitempty"`
}

// ContextEditing is the [context_editing] table (docs/design.md §6). Limits count
// characters (Unicode code points).
type ContextEditing struct {
	// Enabled turns context editing on. Default true.
	Enabled bool `toml:"enabled" json:"enabled"`
	// Mode is "local", "server" or "auto". Default "local".
	Mode string `toml:"mode" json:"mode"`
	// KeepRecentTurns are never elided. Default 3.
	KeepRecentTurns uint64 `toml:"keep_recent_turns" json:"keep_recent_turns"`
	// MinCharsToElide: shorter results are never elided. Default 1000.
	MinCharsToElide uint64 `toml:"min_chars_to_elide" json:"min_chars_to_elide"`
	// MaxTotalToolResultChars: a pass fires only above this much raw
	// tool-result text. Default 100000.
	MaxTotalToolResultChars uint64 `toml:"max_total_tool_result_chars" json:"max_total_tool_result_chars"`
	// MinCharsPerPass: a pass fires only if it saves at least this much.
	// Default 50000.
	MinCharsPerPass uint64 `toml:"min_chars_per_pass" json:"min_chars_per_pass"`
	// ProtectToolNames are never elided. An authored list replaces the
	// default ["todo", "plan"]; it does not extend it.
	ProtectToolNames []string `toml:"protect_tool_names" json:"protect_tool_names"`
	// ArtifactReadTools name the tools that read artifact:// URIs (§5.5).
	// Default ["read"].
	ArtifactReadTools []string `toml:"artifact_read_tools" json:"artifact_read_tools"`
	// ClearToolInputs: a pass also elides, in the calls it may edit, every
	// top-level string field of a tool call's input of at least
	// MinCharsToElide characters (docs/design.md §6). Default true.
	ClearToolInputs bool `toml:"clear_tool_inputs" json:"clear_tool_inputs"`
}

// Summarizer is the [summarizer] table.
type Summarizer struct {
	// Bindings are tried in order. Empty means the embedded extractive
	// summarizer alone.
	Bindings []Binding `toml:"bindings" json:"bindings"`
}

// Binding is one [[summarizer.bindings]] entry (docs/design.md §3).
type Binding struct {
	// Name identifies the binding in events and errors; required, unique.
	Name string `toml:"name" json:"name"`
	// Provider is "anthropic", "openai" (Chat Completions),
	// "openai-responses" (the Responses API) or "extractive".
	Provider string `toml:"provider" json:"provider"`
	// Model is the provider's model id; required for anthropic and openai.
	Model string `toml:"model,omitempty" json:"model,omitempty"`
	// BaseURL overrides the provider's endpoint (absolute http or https).
	BaseURL string `toml:"base_url,omitempty" json:"base_url,omitempty"`
	// APIKeyEnv is the name of the environment variable holding the key;
	// a key itself is never written in config.
	APIKeyEnv string `toml:"api_key_env,omitempty" json:"api_key_env,omitempty"`
	// MaxOutputTokens caps the summary's length in tokens; 0 means the
	// provider's default.
	MaxOutputTokens uint64 `toml:"max_output_tokens,omitempty" json:"max_output_tokens,omitempty"`
	// Credential is set only in memory, by the provider proxy, on the
	// binding it builds for a proxied session (docs/design.md §10): the
	// client's own credential, used instead of api_key_env. Never decoded
	// from a file, never encoded, never logged.
	Credential *Credential `toml:"-" json:"-"`
}

// Credential is a client's provider credential and prompt prefix, held in
// memory for the summarizer calls of its session (docs/design.md §10 "who pays
// for the summary").
type Credential struct {
	// APIKey and Authorization are the client's x-api-key and
	// Authorization header values; Beta its anthropic-beta header.
	APIKey, Authorization, Beta string
	// System and Tools are the client's own "system" and "tools" JSON,
	// sent verbatim so that the summarizer request extends the prefix the
	// provider cached for the session (Responses: System is the client's
	// "instructions").
	System, Tools []byte
	// ToolChoice is the client's own "tool_choice" JSON (Messages API),
	// nil when it sent none: kept in the summarizer's first request, since
	// a changed tool_choice costs Anthropic's cache of the messages.
	ToolChoice []byte
	// Prefix is the JSON array of the client's leading prefix items of a
	// Responses request (developer messages, Codex's additional_tools item
	// declaring its code-mode tools), sent verbatim ahead of the history.
	Prefix []byte
}

// String never shows the secret.
func (c *Credential) String() string { return "[client credential]" }

// GoString never shows the secret.
func (c *Credential) GoString() string { return "[client credential]" }

// Model is one [models."<id>"] entry.
type Model struct {
	// ContextLimit is the model's context window in tokens.
	ContextLimit uint64 `toml:"context_limit" json:"context_limit"`
	// ThinkingBinding: the model's thinking signatures are bound to the prefix.
	ThinkingBinding bool `toml:"thinking_binding" json:"thinking_binding"`
	// ServerContextEditing: the provider can edit context server-side.
	ServerContextEditing bool `toml:"server_context_editing" json:"server_context_editing"`
	// ServerCompaction: the provider compacts context server-side
	// (Anthropic compact_20260112, the OpenAI Responses compaction), which
	// compaction.shape "server" uses (docs/design.md §10).
	ServerCompaction bool `toml:"server_compaction" json:"server_compaction"`
	// TokenFactor is the calibration factor's starting value: provider
	// tokens ÷ o200k_base tokens.
	TokenFactor float64 `toml:"token_factor" json:"token_factor"`
	// Price is the model's price for the savings ledger (docs/design.md
	// §10); nil uses the built-in price of the catalog's model of that id
	// (package ledger), and a model with neither is counted in tokens only.
	Price *Price `toml:"price,omitempty" json:"price,omitempty"`
}

// Price is a model's list price in US dollars per million tokens
// ([models."<id>".price], docs/design.md §10): uncached input, prompt-cache
// writes with the 5-minute and the 1-hour lifetime, cache reads, output.
// A provider without a write surcharge (OpenAI) has both writes equal to
// Input.
type Price struct {
	Input        float64 `toml:"input" json:"input"`
	CacheWrite5m float64 `toml:"cache_write_5m" json:"cache_write_5m"`
	CacheWrite1h float64 `toml:"cache_write_1h" json:"cache_write_1h"`
	CacheRead    float64 `toml:"cache_read" json:"cache_read"`
	Output       float64 `toml:"output" json:"output"`
}

// Daemon is the [daemon] table.
type Daemon struct {
	// Socket is the unix socket path; "" means $XDG_RUNTIME_DIR/ctxd.sock.
	Socket string `toml:"socket,omitempty" json:"socket,omitempty"`
	// Listen is an optional TCP address, loopback only unless AuthTokenEnv
	// is set.
	Listen string `toml:"listen,omitempty" json:"listen,omitempty"`
	// AuthTokenEnv names the environment variable holding the TCP bearer
	// token.
	AuthTokenEnv string `toml:"auth_token_env,omitempty" json:"auth_token_env,omitempty"`
	// AllowedUIDs may connect besides the daemon's own uid (docs/design.md §8b).
	AllowedUIDs []uint32 `toml:"allowed_uids,omitempty" json:"allowed_uids,omitempty"`
	// Limits bound what one client of the daemon API's listeners may hold.
	Limits DaemonLimits `toml:"limits" json:"limits"`
}

// DaemonLimits is [daemon.limits]: what one client of the daemon API (the
// unix socket and the TCP listener) may hold (docs/operating.md "Limits").
type DaemonLimits struct {
	// HeaderBytes caps a request's line and headers, in bytes. Default
	// 65536.
	HeaderBytes uint64 `toml:"header_bytes" json:"header_bytes"`
	// BodyTimeoutMS is the longest wait for a request body's next bytes, in
	// milliseconds, and the grace before BodyMinRate applies. Default
	// 30000.
	BodyTimeoutMS uint64 `toml:"body_timeout_ms" json:"body_timeout_ms"`
	// BodyMinRate is the slowest average a body may arrive at after the
	// grace, in bytes per second; a slower one is answered 408. Default
	// 65536.
	BodyMinRate uint64 `toml:"body_min_rate" json:"body_min_rate"`
	// IdleTimeoutMS closes a keep-alive connection idle this long, in
	// milliseconds. Default 60000.
	IdleTimeoutMS uint64 `toml:"idle_timeout_ms" json:"idle_timeout_ms"`
	// Connections caps the open connections of each listener; one more is
	// answered 503 and closed. Default 512.
	Connections uint64 `toml:"connections" json:"connections"`
	// OwnerConnections of the unix socket's Connections are kept for the
	// daemon's own user: other allowed users share the rest. Default 64.
	OwnerConnections uint64 `toml:"owner_connections" json:"owner_connections"`
}

// Storage is the [storage] table.
type Storage struct {
	// DataDir holds the badger store and the daemon secret.
	DataDir string `toml:"data_dir,omitempty" json:"data_dir,omitempty"`
	// SyncWrites: an append is acknowledged only once durable. Default true.
	SyncWrites bool `toml:"sync_writes" json:"sync_writes"`
	// MinFreeBytes is the free space, in bytes, kept on the file systems of
	// the data directory and the offload directory: a write that would
	// leave less is refused (appends and compactions answer 507
	// insufficient_storage, an offload keeps the result whole), and ctxd
	// does not start below it. Default 134217728 (128 MiB); 0 turns the
	// guard off. See docs/operating.md "Disk full".
	MinFreeBytes uint64 `toml:"min_free_bytes" json:"min_free_bytes"`
	// SessionMemoryBytes bounds the memory, in bytes, the sessions held in
	// memory take (their active histories, about their encoded size):
	// beyond it the least recently used idle ones are dropped and
	// reloaded from the log on their next request. Default 268435456
	// (256 MiB); at least 1048576.
	SessionMemoryBytes uint64 `toml:"session_memory_bytes" json:"session_memory_bytes"`
	// Backend is where sessions, artifacts and compaction jobs live:
	// "badger" (the default: embedded, in DataDir, with the local worker
	// pool) or "nats" (a fleet of nodes sharing one NATS JetStream
	// cluster, [storage.nats]; docs/design.md §9).
	Backend string `toml:"backend,omitempty" json:"backend,omitempty"`
	// NATS is the [storage.nats] table, used when Backend is "nats".
	NATS StorageNATS `toml:"nats,omitempty" json:"nats,omitzero"`
}

// Backend names of [storage] backend.
const (
	BackendBadger = "badger"
	BackendNATS   = "nats"
)

// StorageNATS is the [storage.nats] table (docs/design.md §9). Its keys are the
// daemon's only: a session overlay may not set them.
type StorageNATS struct {
	// Servers are the cluster's client URLs (nats://, tls://, ws://,
	// wss://), at least one; the client learns the rest of the cluster.
	Servers []string `toml:"servers,omitempty" json:"servers,omitempty"`
	// CredentialsFile is a NATS .creds file (user JWT and NKey seed).
	CredentialsFile string `toml:"credentials_file,omitempty" json:"credentials_file,omitempty"`
	// TokenEnv names the environment variable holding an authentication
	// token (never the token itself). At most one of CredentialsFile and
	// TokenEnv.
	TokenEnv string `toml:"token_env,omitempty" json:"token_env,omitempty"`
	// Replicas is the replication factor of ctxd's streams and buckets: 1,
	// 3 or 5. Default 3 (an append is acknowledged once stored on 2 of 3
	// servers).
	Replicas uint64 `toml:"replicas,omitempty" json:"replicas,omitempty"`
	// Prefix names ctxd's streams, buckets and subjects ([A-Za-z0-9_-], at
	// most 32 characters). Default "ctxd"; every node of one fleet uses
	// the same, other fleets on the same cluster another.
	Prefix string `toml:"prefix,omitempty" json:"prefix,omitempty"`
	// AckWaitMS is how long a compaction job may go without its node's
	// progress signal (sent every ack_wait/4 while the job runs) before
	// the cluster gives it to another node, in milliseconds; at least
	// 10000. Default 30000.
	AckWaitMS uint64 `toml:"ack_wait_ms,omitempty" json:"ack_wait_ms,omitempty"`
}

// Workers is the [workers] table.
type Workers struct {
	// Size is the number of concurrent compactions. Default 4.
	Size uint64 `toml:"size" json:"size"`
	// Queue is the bound on waiting compactions. Default 64.
	Queue uint64 `toml:"queue" json:"queue"`
}

// Proxy is the [proxy] table: the provider proxy's listener and upstreams
// (docs/design.md §10). Its keys are capabilities (a listener, URLs): they come
// only from the daemon's own files.
type Proxy struct {
	// Enabled starts the proxy listener with the daemon. Default true.
	Enabled bool `toml:"enabled" json:"enabled"`
	// Listen is the proxy's TCP address: loopback only unless Auth is
	// "token" or "frontend". Default DefaultProxyListen.
	Listen string `toml:"listen" json:"listen"`
	// Auth says who may reach the proxy (docs/operating.md "A fleet"):
	// "loopback" (the default: the listener is on loopback, its users are
	// this host's), "token" (any address; every request carries the
	// daemon's bearer token, daemon.auth_token_env, in the Ctxd-Proxy-Token
	// header, removed before forwarding) or "frontend" (any address; a
	// load balancer in front authenticates the clients, e.g. by mTLS).
	Auth string `toml:"auth" json:"auth"`
	// Summarizer chooses who summarizes a proxied session: "client" (the
	// default: the session's own upstream, model and client credential,
	// then the extractive fallback) or "bindings" (the configured
	// [[summarizer.bindings]], as for daemon-API sessions).
	Summarizer string `toml:"summarizer" json:"summarizer"`
	// Mode is "enforce" (the default: requests carry ctxd's assembled
	// context) or "observe" (every request is forwarded byte-identical to
	// the client's while ctxd records the context it would have sent and
	// the ledger projects its savings, docs/design.md §10). A session's own
	// mode (X-Ctxd-Mode, `ctxctl session mode`) overrides it.
	Mode string `toml:"mode" json:"mode"`
	// MemoryBytes bounds, in bytes, what the proxy holds in memory of the
	// conversations it serves: each conversation's digests of its last
	// request's messages, each branch's last outgoing encodings and index
	// of the client's messages. Past it the least recently used caches,
	// then conversations, are dropped and rebuilt at their next request.
	// Default DefaultProxyMemoryBytes (64 MiB), at least
	// MinProxyMemoryBytes.
	MemoryBytes uint64 `toml:"memory_bytes" json:"memory_bytes"`
	// Upstreams are the providers the proxy forwards to.
	Upstreams Upstreams `toml:"upstreams" json:"upstreams"`
	// Limits bound what one request or client of the proxy may cost.
	Limits ProxyLimits `toml:"limits" json:"limits"`
	// Quotas bound what one client credential may keep stored.
	Quotas ProxyQuotas `toml:"quotas" json:"quotas"`
}

// ProxyLimits is [proxy.limits]: what one request or one client of the
// proxy listener may cost (docs/operating.md "Limits"). Every refusal
// names its key.
type ProxyLimits struct {
	// HeaderBytes caps a request's line and headers, in bytes. Default
	// 262144.
	HeaderBytes uint64 `toml:"header_bytes" json:"header_bytes"`
	// BodyBytes caps a request body, in bytes; a longer one is answered
	// 413. Default 33554432 (32 MiB, the Messages API's own limit: a longer
	// body would be refused upstream after costing ctxd its parse).
	BodyBytes uint64 `toml:"body_bytes" json:"body_bytes"`
	// BodyTimeoutMS is the longest wait for a body's next bytes, in
	// milliseconds, and the grace before BodyMinRate applies. Default
	// 30000.
	BodyTimeoutMS uint64 `toml:"body_timeout_ms" json:"body_timeout_ms"`
	// BodyMinRate is the slowest average a body may arrive at after the
	// grace, in bytes per second; a slower one is answered 408. Default
	// 65536.
	BodyMinRate uint64 `toml:"body_min_rate" json:"body_min_rate"`
	// IdleTimeoutMS closes a keep-alive connection idle this long, in
	// milliseconds. Default 120000.
	IdleTimeoutMS uint64 `toml:"idle_timeout_ms" json:"idle_timeout_ms"`
	// Messages caps the messages (input items) of one managed request;
	// ContentBlocks the content blocks of all of them. A request over
	// either is answered 413 before it is parsed. Defaults 100000 (the
	// Messages API's own limit: ctxd refuses no request the provider
	// would take for its count) and 200000.
	Messages      uint64 `toml:"messages" json:"messages"`
	ContentBlocks uint64 `toml:"content_blocks" json:"content_blocks"`
	// SSELineBytes caps one line of an upstream's event stream that ctxd
	// reads to record the answer, in bytes (the client still gets every
	// byte; the answer is then not recorded). Default 16777216.
	SSELineBytes uint64 `toml:"sse_line_bytes" json:"sse_line_bytes"`
	// Connections caps the listener's open connections; one more is
	// answered 503 and closed. Default 512.
	Connections uint64 `toml:"connections" json:"connections"`
}

// ProxyQuotas is [proxy.quotas]: what one client credential (by its keyed
// fingerprint) may keep in the store, and how long a proxied session
// without activity is kept. 0 turns a quota off.
type ProxyQuotas struct {
	// Sessions caps the proxied sessions of one credential. Default 1000.
	Sessions uint64 `toml:"sessions" json:"sessions"`
	// Bytes caps the message bytes one credential's sessions record.
	// Default 2147483648 (2 GiB).
	Bytes uint64 `toml:"bytes" json:"bytes"`
	// SessionExpiryHours deletes a proxied session (its log, checkpoints
	// and offloaded files) after this many hours without a request.
	// Default 720 (30 days).
	SessionExpiryHours uint64 `toml:"session_expiry_hours" json:"session_expiry_hours"`
}

// Upstreams is [proxy.upstreams]: one table per wire API.
type Upstreams struct {
	// Anthropic serves POST /v1/messages and everything else the proxy
	// forwards untouched.
	Anthropic Upstream `toml:"anthropic" json:"anthropic"`
	// OpenAI serves POST /v1/responses and POST /v1/chat/completions (the
	// base URL without /v1: "https://api.openai.com", or a compatible
	// server such as "http://127.0.0.1:8000" for vLLM).
	OpenAI Upstream `toml:"openai" json:"openai"`
}

// Upstream is one [proxy.upstreams.<name>] table.
type Upstream struct {
	// BaseURL is the provider's endpoint (absolute http or https URL).
	// Default: the provider's public endpoint.
	BaseURL string `toml:"base_url" json:"base_url"`
	// DialTimeoutMS bounds connecting to the upstream, in milliseconds.
	// Default 10000.
	DialTimeoutMS uint64 `toml:"dial_timeout_ms" json:"dial_timeout_ms"`
	// StreamIdleTimeoutMS ends an answer's body (a stream) when the
	// upstream sends nothing for this long, in milliseconds; 0 means no
	// limit. Default 300000 (the providers send pings every few seconds).
	StreamIdleTimeoutMS uint64 `toml:"stream_idle_timeout_ms" json:"stream_idle_timeout_ms"`
	// HeaderTimeoutMS bounds the wait for the upstream's response headers,
	// in milliseconds (a streamed answer sends them at once; a
	// non-streamed one only when the answer is complete); 0 means no
	// limit. Default 600000. The body is never timed: a stream lasts as
	// long as the answer.
	HeaderTimeoutMS uint64 `toml:"header_timeout_ms" json:"header_timeout_ms"`
}

// MinContextLimit and MaxContextLimit bound a context window, in tokens
// (a model's context_limit, a session's window): below the minimum no
// conversation fits beside a summary; above the maximum the figure is a
// typo (no model has a window of 10^8 tokens).
const (
	MinContextLimit = 1000
	MaxContextLimit = 100_000_000
)
