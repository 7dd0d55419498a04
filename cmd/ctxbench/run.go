package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ctxd/ctxd/api"
)

// defaultModel is the sessions' model when neither --model nor the
// transcript names one. Every session gives --context-limit, so any id
// works; this one is in the built-in catalog.
const defaultModel = "claude-sonnet-4-5"

// defaultTranscript is the corpus transcript replayed when no --transcript
// or --generated is given, relative to the repository root.
const defaultTranscript = "testdata/demo/claude-code-session.jsonl"

// sampleInterval is how often the queue depth and the daemon's memory are
// sampled during a run.
const sampleInterval = 500 * time.Millisecond

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// options are the command-line flags.
type options struct {
	ctxd, socket        string
	agents              int
	transcripts         stringList
	generated           bool
	generatedRounds     int
	rate                float64
	contextLimit        uint64
	duration            time.Duration
	maxRequests         int
	model               string
	timeout             time.Duration
	summarizerLatency   time.Duration
	contextLengthRate   float64
	overloadedRate      float64
	workers, queue      int
	syncWrites          bool
	idleSessions        int
	idleWait            time.Duration
	idleConcurrency     int
	idleListAll         bool
	queueFull           int
	jsonOut             bool
	seed                uint64
	arrivals            string
	checkConcurrency    int
	summaryOutputTokens int
	preparePercent      uint64
}

// The bounds of a non-zero --rate, in appends per second per agent: the
// interval between appends (1/rate) stays between 1 µs and ~11.6 days, so
// it and an exponential draw of it fit a time.Duration.
const (
	minRate = 1e-6
	maxRate = 1e6
)

// The values of --arrivals.
const (
	arrivalsFixed   = "fixed"
	arrivalsPoisson = "poisson"
)

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("ctxbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.ctxd, "ctxd", "", "the ctxd `binary` to start (default: ctxd next to ctxbench, else on PATH)")
	fs.StringVar(&o.socket, "socket", "", "target the ctxd already serving on this `socket` instead of starting one")
	fs.IntVar(&o.agents, "agents", 8, "simulated agents, each in its own sessions")
	fs.Var(&o.transcripts, "transcript", "a transcript `FILE` to replay (repeatable; agent i replays file i mod n; default "+defaultTranscript+")")
	fs.BoolVar(&o.generated, "generated", false, "replay generated transcripts (one per agent) instead of files")
	fs.IntVar(&o.generatedRounds, "generated-rounds", 60, "tool rounds of a generated transcript")
	fs.Float64Var(&o.rate, "rate", 0, "appends per second per agent; 0 = as fast as possible")
	fs.StringVar(&o.arrivals, "arrivals", arrivalsFixed, "with --rate, the gaps between an agent's appends: "+arrivalsFixed+" (exactly 1/rate) or "+arrivalsPoisson+" (exponential, mean 1/rate)")
	fs.Uint64Var(&o.contextLimit, "context-limit", 32000, "context window of every session, in `tokens` (small, so that compactions happen under load)")
	fs.DurationVar(&o.duration, "duration", 30*time.Second, "how long agents keep starting requests; 0 = no time bound")
	fs.IntVar(&o.maxRequests, "max-requests", 0, "requests per agent at most; 0 = no bound (with --duration 0 too: one pass of the transcript)")
	fs.StringVar(&o.model, "model", "", "the sessions' `model` (default: the transcript's, else "+defaultModel+")")
	fs.DurationVar(&o.timeout, "request-timeout", 2*time.Minute, "bound of one request")
	fs.DurationVar(&o.summarizerLatency, "summarizer-latency", 2*time.Second, "latency of the fake summarizer's answers")
	fs.Float64Var(&o.contextLengthRate, "context-length-rate", 0, "share of summarizer calls answered 400 prompt is too long")
	fs.Float64Var(&o.overloadedRate, "overloaded-rate", 0, "share of summarizer calls answered 529 overloaded")
	fs.IntVar(&o.workers, "workers", 4, "workers.size of the ctxd ctxbench starts")
	fs.IntVar(&o.queue, "queue", 64, "workers.queue of the ctxd ctxbench starts")
	fs.BoolVar(&o.syncWrites, "sync-writes", true, "storage.sync_writes of the ctxd ctxbench starts")
	fs.IntVar(&o.summaryOutputTokens, "summary-max-tokens", 2048, "max_output_tokens of the fake binding")
	fs.Uint64Var(&o.preparePercent, "prepare-percent", 0, "context_compaction.prepare_percent of the ctxd ctxbench starts: 0 derived from the trigger, 100 speculative summaries off")
	fs.IntVar(&o.idleSessions, "idle-sessions", 0, "idle mode: create `N` sessions of a few messages, let the daemon sit, report its memory")
	fs.DurationVar(&o.idleWait, "idle-wait", 10*time.Second, "idle mode: how long the daemon sits before memory is read")
	fs.IntVar(&o.idleConcurrency, "idle-concurrency", 16, "idle mode: sessions created at once")
	fs.BoolVar(&o.idleListAll, "idle-list-all", true, "idle mode: after the first page, page through every session (~1 ms a session on a loaded machine: false for a million)")
	fs.IntVar(&o.queueFull, "queue-full", 0, "queue-full mode: `N` sessions ask for a compaction (wait=false) at once; count the unavailable answers")
	fs.BoolVar(&o.jsonOut, "json", false, "print one JSON object")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the generated transcripts, of the fake provider's failures and of the agents' gaps under --arrivals poisson")
	fs.IntVar(&o.checkConcurrency, "check-concurrency", 16, "sessions whose events are read at once in the final check")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (flags only)", fs.Arg(0))
	}
	var problems []string
	if o.agents < 1 {
		problems = append(problems, "--agents must be ≥ 1")
	}
	switch {
	case o.rate < 0 || math.IsNaN(o.rate) || math.IsInf(o.rate, 0):
		problems = append(problems, "--rate must be a finite number ≥ 0")
	case o.rate > 0 && (o.rate < minRate || o.rate > maxRate):
		problems = append(problems, fmt.Sprintf("--rate must be 0 (unbounded) or between %g and %g appends per second", minRate, maxRate))
	}
	if o.arrivals == arrivalsPoisson && o.rate == 0 {
		problems = append(problems, "--arrivals poisson needs a --rate")
	}
	if o.arrivals != arrivalsFixed && o.arrivals != arrivalsPoisson {
		problems = append(problems, fmt.Sprintf("--arrivals must be %q or %q, not %q", arrivalsFixed, arrivalsPoisson, o.arrivals))
	}
	if o.duration < 0 || o.maxRequests < 0 || o.idleSessions < 0 || o.queueFull < 0 {
		problems = append(problems, "--duration, --max-requests, --idle-sessions and --queue-full must be ≥ 0")
	}
	if o.contextLimit == 0 {
		problems = append(problems, "--context-limit must be > 0")
	}
	if o.workers < 1 || o.queue < 1 || o.idleConcurrency < 1 || o.checkConcurrency < 1 || o.timeout <= 0 {
		problems = append(problems, "--workers, --queue, --idle-concurrency, --check-concurrency and --request-timeout must be positive")
	}
	if o.idleSessions > 0 && o.queueFull > 0 {
		problems = append(problems, "--idle-sessions and --queue-full are separate modes: give one")
	}
	if o.generated && len(o.transcripts) > 0 {
		problems = append(problems, "--generated and --transcript exclude each other")
	}
	if o.contextLengthRate < 0 || o.overloadedRate < 0 || o.contextLengthRate+o.overloadedRate > 1 {
		problems = append(problems, "--context-length-rate and --overloaded-rate must be ≥ 0 with a sum ≤ 1")
	}
	if o.socket != "" && o.ctxd != "" {
		problems = append(problems, "--socket (a running ctxd) and --ctxd (start one) exclude each other")
	}
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "; "))
	}
	return o, nil
}

// Report is the outcome of one run; --json prints it as one object. Fields
// are only ever added.
type Report struct {
	// Mode is "load", "idle" or "queue-full".
	Mode string `json:"mode"`
	// OK is false when anything was lost, duplicated or reordered, a
	// request failed, or a compaction request hung.
	OK bool `json:"ok"`
	// Problems says why OK is false, one line each.
	Problems []string `json:"problems,omitempty"`
	// Machine describes where ctxbench ran.
	Machine Machine `json:"machine"`
	// Settings echoes the flags that shape the load.
	Settings Settings `json:"settings"`
	// ElapsedSeconds is the wall time of the measured phase.
	ElapsedSeconds float64 `json:"elapsed_seconds"`
	// Load is the load mode's figures.
	Load *LoadReport `json:"load,omitempty"`
	// Idle is the idle mode's figures.
	Idle *IdleReport `json:"idle,omitempty"`
	// QueueFull is the queue-full mode's figures.
	QueueFull *QueueFullReport `json:"queue_full,omitempty"`
	// Queue is the compaction queue depth sampled every 500 ms, Busy the
	// busy workers.
	Queue Gauge `json:"queue_depth"`
	Busy  Gauge `json:"workers_busy"`
	// Memory is the daemon's memory at the end (only when ctxbench started
	// it), HeapInuseMiB its go_memstats_heap_inuse_bytes.
	Memory       *Memory `json:"memory,omitempty"`
	HeapInuseMiB float64 `json:"heap_inuse_mib"`
	// CompactionsMetrics are the changes of ctxd_compactions_total during
	// the run, by outcome.
	CompactionsMetrics map[string]float64 `json:"compactions_metrics,omitempty"`
	// Provider counts the fake provider's answers (only when ctxbench
	// started ctxd).
	Provider *ProviderStats `json:"provider,omitempty"`
}

// Machine describes the machine of the run.
type Machine struct {
	// CPUs is runtime.NumCPU of ctxbench (ctxd shares them).
	CPUs int `json:"cpus"`
	// GOOS, GOARCH and GoVersion are ctxbench's build's.
	GOOS      string `json:"goos"`
	GOARCH    string `json:"goarch"`
	GoVersion string `json:"go_version"`
	// CPUModel is /proc/cpuinfo's first "model name".
	CPUModel string `json:"cpu_model,omitempty"`
}

// Settings are the flags that shape a run.
type Settings struct {
	// Agents, Rate (appends/s per agent, 0 unbounded), ContextLimit,
	// DurationSeconds and MaxRequests are the load flags.
	Agents int     `json:"agents"`
	Rate   float64 `json:"rate"`
	// Arrivals is "fixed" (appends exactly 1/Rate apart) or "poisson"
	// (exponential gaps of mean 1/Rate).
	Arrivals        string  `json:"arrivals"`
	ContextLimit    uint64  `json:"context_limit"`
	DurationSeconds float64 `json:"duration_seconds"`
	MaxRequests     int     `json:"max_requests"`
	// Scripts names what the agents replay.
	Scripts []string `json:"scripts"`
	// SummarizerLatency, ContextLengthRate and OverloadedRate shape the
	// fake provider; Workers and Queue the daemon's pool.
	SummarizerLatency string  `json:"summarizer_latency"`
	ContextLengthRate float64 `json:"context_length_rate"`
	OverloadedRate    float64 `json:"overloaded_rate"`
	Workers           int     `json:"workers"`
	Queue             int     `json:"queue"`
	// External is true with --socket: the daemon's own configuration
	// applied and its memory was not read.
	External bool `json:"external_daemon"`
}

// PreparedCounts are speculative summaries by outcome.
type PreparedCounts struct {
	Made     uint64 `json:"made"`
	Used     uint64 `json:"used"`
	Extended uint64 `json:"extended"`
	Unused   uint64 `json:"unused"`
	Pending  uint64 `json:"pending"`
}

// LoadReport is the load mode's figures.
type LoadReport struct {
	// Sessions is the number of sessions the agents wrote.
	Sessions int `json:"sessions"`
	// Appends, Messages and ContextReads count acknowledged append
	// requests, the messages they stored, and pre-send context reads.
	Appends      int `json:"appends"`
	Messages     int `json:"messages"`
	ContextReads int `json:"context_reads"`
	// ContextOverWindow counts the context reads answered with more tokens
	// than the session's context window (a provider would refuse them);
	// ContextQueuedBehind those served uncompacted because their pre-send
	// compaction was queued behind others (docs/decisions.md "A pre-send
	// read waits at most one round of the pool").
	ContextOverWindow   int `json:"context_over_window"`
	ContextQueuedBehind int `json:"context_queued_behind"`
	// AppendsPerSecond and MessagesPerSec are over the whole run.
	AppendsPerSecond float64 `json:"appends_per_second"`
	MessagesPerSec   float64 `json:"messages_per_second"`
	// Append and Context are the latencies of append requests and of
	// pre-send context reads (canonical format), as the agents saw them.
	Append  Latencies `json:"append_latency"`
	Context Latencies `json:"context_latency"`
	// Crossing is the latency of the context reads at a compaction (the
	// first read after a session reached its threshold: a new
	// checkpoint, a pre-send diagnostic, or a context still over it), and
	// CrossingReads their number: the wait speculative summaries remove.
	Crossing      Latencies `json:"crossing_latency"`
	CrossingReads int       `json:"crossing_reads"`
	// Prepared sums the sessions' speculative summaries by outcome, from
	// their ledgers (docs/design.md §5.1); Pending is made less used,
	// extended and unused: ready when the run ended.
	Prepared PreparedCounts `json:"prepared"`
	// Compactions counts the outcomes found in the sessions' event logs.
	Compactions Outcomes `json:"compactions"`
	// Integrity is the loss and order check.
	Integrity Integrity `json:"integrity"`
	// Errors counts failed requests by api error code; FirstError is the
	// first one's message.
	Errors     map[string]int `json:"errors,omitempty"`
	FirstError string         `json:"first_error,omitempty"`
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// run is the whole command; main only wires signals and the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "ctxbench:", err)
		return 2
	}
	rep, err := execute(ctx, o, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "ctxbench:", err)
		return 1
	}
	if o.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	} else {
		printReport(stdout, rep)
	}
	if !rep.OK {
		for _, p := range rep.Problems {
			fmt.Fprintln(stderr, "ctxbench: FAIL:", p)
		}
		return 1
	}
	return 0
}

// target is the daemon a run talks to.
type target struct {
	socket string
	d      *daemon // nil for --socket
	fake   *fakeProvider
}

// client is an agent's client: appends retried with one Idempotency-Key
// (api.Client.Retries), as an agent should retry them, so that a retried
// append that was stored is not counted twice nor stored twice.
func (t *target) client() *api.Client {
	return &api.Client{Socket: t.socket, UserAgent: "ctxbench/" + api.Version, Retries: appendRetries}
}

// appendRetries is how many times ctxbench's agents send an append again
// after a 503 or a 504.
const appendRetries = 3

// execute starts (or reaches) the daemon, runs the mode and stops the
// daemon.
func execute(ctx context.Context, o *options, stderr io.Writer) (rep *Report, err error) {
	rep = &Report{
		Machine: Machine{CPUs: runtime.NumCPU(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, GoVersion: runtime.Version(), CPUModel: cpuModel()},
		Settings: Settings{Agents: o.agents, Rate: o.rate, Arrivals: o.arrivals, ContextLimit: o.contextLimit, DurationSeconds: o.duration.Seconds(),
			MaxRequests: o.maxRequests, SummarizerLatency: o.summarizerLatency.String(), ContextLengthRate: o.contextLengthRate,
			OverloadedRate: o.overloadedRate, Workers: o.workers, Queue: o.queue, External: o.socket != ""},
	}
	t := &target{socket: o.socket}
	if o.socket == "" {
		bin, err := findCtxd(o.ctxd)
		if err != nil {
			return nil, err
		}
		t.fake, err = startFake(o.summarizerLatency, o.contextLengthRate, o.overloadedRate, o.seed)
		if err != nil {
			return nil, err
		}
		t.d, err = startDaemon(ctx, bin, daemonConfig{fakeURL: t.fake.URL(), workers: o.workers, queue: o.queue,
			syncWrites: o.syncWrites, summaryTokens: o.summaryOutputTokens, preparePercent: o.preparePercent})
		if err != nil {
			t.fake.close()
			return nil, err
		}
		t.socket = t.d.socket
		defer func() {
			if serr := t.d.stop(); serr != nil && err == nil {
				fmt.Fprintf(stderr, "ctxbench: ctxd: %v\n%s", serr, t.d.stderr.String())
			}
			t.fake.close()
			ps := t.fake.stats()
			if rep != nil {
				rep.Provider = &ps
			}
		}()
	} else {
		fmt.Fprintln(stderr, "ctxbench: --socket: the daemon's own configuration applies; --workers, --queue and the fake summarizer flags are ignored")
	}
	c := t.client()
	before, err := c.Metrics(ctx)
	if err != nil {
		return nil, err
	}

	samp := startSampler(ctx, c, t)
	switch {
	case o.idleSessions > 0:
		rep.Mode = "idle"
		err = runIdleMode(ctx, o, t, rep, samp)
	case o.queueFull > 0:
		rep.Mode = "queue-full"
		err = runQueueFullMode(ctx, o, t, rep)
	default:
		rep.Mode = "load"
		err = runLoadMode(ctx, o, t, rep)
	}
	depth, busy := samp.stop()
	rep.Queue, rep.Busy = gauge(depth), gauge(busy)
	if err != nil {
		return nil, err
	}
	if after, merr := c.Metrics(context.WithoutCancel(ctx)); merr == nil {
		rep.HeapInuseMiB = round2(metricValues(after, "go_memstats_heap_inuse_bytes")[""] / (1 << 20))
		b, a := metricValues(before, "ctxd_compactions_total"), metricValues(after, "ctxd_compactions_total")
		rep.CompactionsMetrics = map[string]float64{}
		for k, v := range a {
			rep.CompactionsMetrics[strings.TrimSuffix(strings.TrimPrefix(k, `outcome="`), `"`)] = v - b[k]
		}
	}
	if t.d != nil {
		if m, merr := readMemory(t.d.pid()); merr == nil {
			m.RSS, m.PeakRSS = round2(m.RSS), round2(m.PeakRSS)
			rep.Memory = &m
		}
	}
	rep.OK = len(rep.Problems) == 0
	return rep, nil
}

func round2(x float64) float64 { return math.Round(x*100) / 100 }

// sampler polls /v1/status every sampleInterval for the queue depth and
// busy workers until stopped.
type sampler struct {
	cancel      context.CancelFunc
	wg          sync.WaitGroup
	mu          sync.Mutex
	depth, busy []int
}

func startSampler(ctx context.Context, c *api.Client, _ *target) *sampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &sampler{cancel: cancel}
	s.wg.Go(func() {
		tick := time.NewTicker(sampleInterval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			rctx, rcancel := context.WithTimeout(ctx, sampleInterval)
			st, err := c.Status(rctx)
			rcancel()
			if err != nil {
				continue
			}
			s.mu.Lock()
			s.depth = append(s.depth, st.Queue.Depth)
			s.busy = append(s.busy, st.Workers.Busy)
			s.mu.Unlock()
		}
	})
	return s
}

// stop ends the sampling and returns the samples.
func (s *sampler) stop() (depth, busy []int) {
	s.cancel()
	s.wg.Wait()
	return s.depth, s.busy
}

// loadScripts returns the scripts of the run and a chooser per agent.
func loadScripts(o *options) (func(int) *script, []string, error) {
	if o.generated {
		scripts := make([]*script, o.agents)
		names := make([]string, o.agents)
		for i := range scripts {
			scripts[i] = generatedScript(o.seed+uint64(i), o.generatedRounds)
			names[i] = scripts[i].name
		}
		if len(names) > 3 {
			names = []string{fmt.Sprintf("generated × %d (seeds %d..%d, %d rounds)", o.agents, o.seed, o.seed+uint64(o.agents)-1, o.generatedRounds)}
		}
		return func(i int) *script { return scripts[i] }, names, nil
	}
	files := o.transcripts
	if len(files) == 0 {
		files = stringList{defaultTranscriptPath()}
	}
	scripts := make([]*script, len(files))
	names := make([]string, len(files))
	for i, f := range files {
		s, err := loadTranscript(f)
		if err != nil {
			return nil, nil, err
		}
		scripts[i] = s
		names[i] = fmt.Sprintf("%s (%d messages, %d responses)", f, s.messages(), len(s.steps))
	}
	return func(i int) *script { return scripts[i%len(scripts)] }, names, nil
}

// defaultTranscriptPath finds defaultTranscript from the working directory
// or any parent (ctxbench runs from anywhere in the repository).
func defaultTranscriptPath() string {
	dir, err := os.Getwd()
	if err != nil {
		return defaultTranscript
	}
	for range 8 {
		p := dir + "/" + defaultTranscript
		if _, err := os.Stat(p); err == nil {
			return p
		}
		parent := dir[:max(strings.LastIndex(dir, "/"), 0)]
		if parent == dir || parent == "" {
			break
		}
		dir = parent
	}
	return defaultTranscript
}

// runLoadMode runs the agents, then checks every session.
func runLoadMode(ctx context.Context, o *options, t *target, rep *Report) error {
	choose, names, err := loadScripts(o)
	if err != nil {
		return err
	}
	rep.Settings.Scripts = names
	opt := &loadOptions{agents: o.agents, rate: o.rate, contextLimit: o.contextLimit, duration: o.duration,
		maxRequests: o.maxRequests, model: o.model, timeout: o.timeout, scripts: choose, poisson: o.arrivals == arrivalsPoisson, seed: o.seed,
		prefix: "bench-" + strconv.FormatInt(time.Now().UnixNano(), 36)}
	start := time.Now()
	results := runAgents(ctx, t.client, opt)
	elapsed := time.Since(start)
	rep.ElapsedSeconds = round2(elapsed.Seconds())

	lr := &LoadReport{Errors: map[string]int{}}
	var appendLat, contextLat, crossLat []time.Duration
	var sessions []sessionRecord
	for _, r := range results {
		appendLat = append(appendLat, r.appendLat...)
		contextLat = append(contextLat, r.contextLat...)
		crossLat = append(crossLat, r.crossLat...)
		lr.Appends += r.appends
		lr.Messages += r.messages
		lr.ContextReads += len(r.contextLat)
		lr.ContextOverWindow += r.overWindow
		lr.ContextQueuedBehind += r.queuedBehind
		sessions = append(sessions, r.sessions...)
		for k, v := range r.errors {
			lr.Errors[k] += v
		}
		if r.firstErr != nil && lr.FirstError == "" {
			lr.FirstError = r.firstErr.Error()
		}
	}
	lr.Sessions = len(sessions)
	lr.AppendsPerSecond = round2(float64(lr.Appends) / elapsed.Seconds())
	lr.MessagesPerSec = round2(float64(lr.Messages) / elapsed.Seconds())
	lr.Append, lr.Context = summarize(appendLat), summarize(contextLat)
	lr.Crossing, lr.CrossingReads = summarize(crossLat), len(crossLat)
	rep.Load = lr

	// The check: every acknowledged message once, in order. Compactions
	// still running in the background do not matter: they never rewrite
	// the log (docs/design.md §5.6).
	in, oc, err := checkSessions(context.WithoutCancel(ctx), t.client(), sessions, o.checkConcurrency)
	if err != nil {
		return err
	}
	lr.Integrity, lr.Compactions = in, oc
	lr.Prepared = preparedCounts(context.WithoutCancel(ctx), t.client(), sessions)
	if !in.OK() {
		rep.Problems = append(rep.Problems, fmt.Sprintf("integrity: %d lost, %d duplicated, %d reordered, %d at another seq (of %d acknowledged)",
			in.Lost, in.Duplicated, in.Reordered, in.SeqMismatch, in.Acknowledged))
	}
	if len(lr.Errors) > 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("request errors %v; first: %s", lr.Errors, lr.FirstError))
	}
	return nil
}

// preparedCounts sums the speculative summaries of sessions by outcome,
// from their ledgers (a session whose ledger cannot be read counts none).
func preparedCounts(ctx context.Context, c *api.Client, sessions []sessionRecord) PreparedCounts {
	var pc PreparedCounts
	for _, s := range sessions {
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		l, err := c.Ledger(rctx, s.id)
		cancel()
		if err != nil {
			continue
		}
		t := l.Totals
		pc.Made += t.PreparedMade
		pc.Used += t.PreparedUsed
		pc.Extended += t.PreparedExtended
		pc.Unused += t.PreparedUnused
	}
	if done := pc.Used + pc.Extended + pc.Unused; pc.Made > done {
		pc.Pending = pc.Made - done
	}
	return pc
}

// checkSessions reads the log of every session, conc at a time, and
// compares it with what was acknowledged.
func checkSessions(ctx context.Context, c *api.Client, sessions []sessionRecord, conc int) (Integrity, Outcomes, error) {
	var (
		mu    sync.Mutex
		total Integrity
		oc    Outcomes
		first error
		wg    sync.WaitGroup
	)
	sem := make(chan struct{}, conc)
	for _, s := range sessions {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var o Outcomes
			rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
			log, err := readLog(rctx, c, s.id, &o)
			cancel()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if first == nil {
					first = err
				}
				return
			}
			total.add(compare(s.acked, log))
			oc.OK += o.OK
			oc.Stalled += o.Stalled
			oc.Failed += o.Failed
			oc.PrunedRetry += o.PrunedRetry
		})
	}
	wg.Wait()
	return total, oc, first
}
