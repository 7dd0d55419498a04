package summarizer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/redact"
)

// Retry defaults of Options (docs/design.md §5.5: transient failures are retried
// with backoff inside the call's timeout).
const (
	DefaultRetryMax     = 4
	DefaultRetryWaitMin = 1 * time.Second
	DefaultRetryWaitMax = 30 * time.Second
)

// Options configures a Summarizer. The zero value is usable.
type Options struct {
	// HTTPClient sends provider requests; nil means a client on a clone of
	// http.DefaultTransport. Timeouts come from each call's context, not
	// from the client.
	HTTPClient *http.Client
	// Logger receives one line per attempt and go-retryablehttp's lines;
	// nil means slog.Default(). API keys are never logged.
	Logger *slog.Logger
	// RetryMax is how many times a transient failure is retried within one
	// call; 0 means DefaultRetryMax, a negative value disables retries.
	RetryMax int
	// RetryWaitMin and RetryWaitMax bound the exponential backoff between
	// retries when the server sends no Retry-After; 0 means the defaults.
	// A Retry-After header is honored as sent, 0 included.
	RetryWaitMin, RetryWaitMax time.Duration
	// Redactor knows the daemon's configured secrets (docs/design.md §8b); a
	// provider's error text and body pass through it, and through the key
	// of the binding called, before they reach a ProviderError — hence any
	// log line, event or API error. nil redacts key-shaped strings and the
	// binding's own key.
	Redactor *redact.Redactor
}

// Summarizer runs compactions' summarizer calls (docs/design.md §5.3–§5.5). It
// is safe for concurrent use; one Summarizer serves every session.
type Summarizer struct {
	client *retryablehttp.Client
	log    *slog.Logger
	red    *redact.Redactor
	// withTimeout bounds one binding call: context.WithTimeout; tests
	// replace it to expire a call at a point they choose.
	withTimeout func(context.Context, time.Duration) (context.Context, context.CancelFunc)
}

// New returns a Summarizer configured by o.
func New(o Options) *Summarizer {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	switch {
	case o.RetryMax == 0:
		o.RetryMax = DefaultRetryMax
	case o.RetryMax < 0:
		o.RetryMax = 0
	}
	if o.RetryWaitMin <= 0 {
		o.RetryWaitMin = DefaultRetryWaitMin
	}
	if o.RetryWaitMax <= 0 {
		o.RetryWaitMax = DefaultRetryWaitMax
	}
	if o.RetryWaitMax < o.RetryWaitMin {
		o.RetryWaitMax = o.RetryWaitMin
	}
	log := o.Logger.With("component", "summarizer")
	return &Summarizer{client: newRetryClient(o, log), log: log, red: o.Redactor, withTimeout: context.WithTimeout}
}

// redactorFor is the redactor of a call of binding b: the configured
// secrets and b's own key (read from its variable, as the call does).
func (s *Summarizer) redactorFor(b config.Binding) *redact.Redactor {
	if b.APIKeyEnv == "" {
		return s.red.With()
	}
	return s.red.With(os.Getenv(b.APIKeyEnv))
}

// DefaultBindings is the binding list used when none is configured: the
// embedded extractive summarizer alone, so ctxd works with no network
// (docs/design.md §3).
func DefaultBindings() []config.Binding {
	return []config.Binding{{Name: ProviderExtractive, Provider: ProviderExtractive}}
}

// Attempt records one call of one binding, for events and metrics.
type Attempt struct {
	// Binding is the binding's name; Provider its provider.
	Binding  string
	Provider string
	// Pruned marks the pruned retry (docs/design.md §5.5).
	Pruned bool
	// Err is nil on success, else the failure (a *ProviderError, or the
	// artifact store's error when pruning failed).
	Err error
	// Class is the class of Err; meaningless when Err is nil.
	Class Class
	// Status is the final HTTP status, 0 when none arrived or for the
	// extractive provider.
	Status int
	// Tries is the number of HTTP requests sent, retries included.
	Tries int
	// Duration is the wall time of the call.
	Duration time.Duration
	// Usage is what the provider reported, or nil.
	Usage *history.Usage
}

// PruneStats describes what the pruned retry's pruning did.
type PruneStats struct {
	// Results is the number of tool results replaced by a marker.
	Results int
	// Kept is the number of tool results left whole, the newest: the
	// refusal named its excess and the older results made up for it.
	Kept int
	// ArtifactReads is the number of artifact read outputs omitted.
	ArtifactReads int
	// Bytes is the size of the content replaced, in bytes.
	Bytes uint64
}

// Result is a successful compaction's summary and how it was obtained; on
// failure only Attempts (and Prune) are filled.
type Result struct {
	// Summary is the answer, checked: non-empty, at most MaxSummaryBytes,
	// not cut at the output cap, free of tool calls.
	Summary string
	// Binding and Provider name the binding that produced it.
	Binding  string
	Provider string
	// PrunedRetry is true when the summary came from the pruned retry.
	PrunedRetry bool
	// Usage is the provider's reported usage for the successful call, or nil.
	Usage *history.Usage
	// Attempts lists every call made, in order.
	Attempts []Attempt
	// Prune describes the pruning, when the pruned retry ran.
	Prune *PruneStats
}

// Summarize asks the bindings, in order, for a summary of req (docs/design.md
// §5.3–§5.5); no bindings means DefaultBindings. Each call gets its own
// req.Timeout. The first answer that passes the answer checks is returned.
//
// A context-length failure permits at most one pruned retry per call of
// Summarize: the same binding is asked again with a pruned copy of req (see
// Prune; store must be non-nil then). After it, later bindings get the
// original, unpruned request, and no further context-length failure prunes.
// req and its messages are never modified.
//
// Errors: an error wrapping ErrInvalidHistory when req.Messages is not
// closed (no binding is tried); the context's error when ctx is done
// between attempts; otherwise, when every binding failed, an error wrapping
// ErrAllBindingsFailed and each attempt's error (so errors.Is(err,
// ErrContextLength) and errors.As(err, &*ProviderError) work).
func (s *Summarizer) Summarize(ctx context.Context, bindings []config.Binding, req Request, store ArtifactStore) (Result, error) {
	if len(bindings) == 0 {
		bindings = DefaultBindings()
	}
	var res Result
	if err := CheckClosed(req.Messages); err != nil {
		return res, err
	}
	prunedUsed := false
	var errs []error
	for _, b := range bindings {
		a, ans := s.attempt(ctx, b, &req, false)
		res.Attempts = append(res.Attempts, a)
		if a.Err == nil {
			return s.success(res, b, ans, false), nil
		}
		errs = append(errs, a.Err)
		if ctx.Err() != nil {
			return res, fmt.Errorf("summarizer: compaction stopped: %w", errors.Join(ctx.Err(), errors.Join(errs...)))
		}
		if a.Class != ClassContextLength || prunedUsed {
			continue
		}
		prunedUsed = true
		pruned, stats, err := prune(ctx, req, store, pruneTarget(a.Err))
		res.Prune = &stats
		if err != nil {
			pa := Attempt{Binding: b.Name, Provider: b.Provider, Pruned: true, Class: ClassPermanent,
				Err: fmt.Errorf("summarizer binding %q: pruning for the retry: %w", b.Name, err)}
			res.Attempts = append(res.Attempts, pa)
			errs = append(errs, pa.Err)
			s.log.Warn("pruned retry not possible", "binding", b.Name, "error", err)
			continue
		}
		a, ans = s.attempt(ctx, b, &pruned, true)
		res.Attempts = append(res.Attempts, a)
		if a.Err == nil {
			return s.success(res, b, ans, true), nil
		}
		errs = append(errs, a.Err)
		if ctx.Err() != nil {
			return res, fmt.Errorf("summarizer: compaction stopped: %w", errors.Join(ctx.Err(), errors.Join(errs...)))
		}
	}
	return res, fmt.Errorf("%w (%d attempt(s)): %w", ErrAllBindingsFailed, len(res.Attempts), errors.Join(errs...))
}

// success fills res from the answer of binding b.
func (s *Summarizer) success(res Result, b config.Binding, ans answer, pruned bool) Result {
	res.Summary = ans.text
	res.Binding = b.Name
	res.Provider = b.Provider
	res.PrunedRetry = pruned
	res.Usage = ans.usage
	return res
}

// attempt makes one call of binding b with its own timeout, applies the
// answer checks, logs the outcome and returns its record (and the answer
// when it passed).
func (s *Summarizer) attempt(ctx context.Context, b config.Binding, req *Request, pruned bool) (Attempt, answer) {
	start := time.Now()
	cctx, cancel := s.withTimeout(ctx, req.timeout())
	defer cancel()

	call := func(toolNone bool) callOutcome {
		switch b.Provider {
		case ProviderAnthropic:
			return s.callAnthropic(cctx, b, req, pruned, toolNone)
		case ProviderOpenAI:
			return s.callOpenAI(cctx, b, req)
		case ProviderOpenAIResponses:
			return s.callResponses(cctx, b, req, toolNone)
		case ProviderExtractive:
			return callOutcome{ans: answer{text: ExtractiveSummary(req.Messages, req.extractiveBytes())}}
		}
		return callOutcome{err: &ProviderError{Binding: b.Name, Provider: b.Provider, Class: ClassPermanent,
			Message: fmt.Sprintf("provider %q is not anthropic, openai, openai-responses or extractive", b.Provider), Err: ErrUnknownProvider}}
	}
	out := call(false)
	retriedNone := false
	if out.err == nil && out.ans.toolCall && (b.Provider == ProviderAnthropic || b.Provider == ProviderOpenAIResponses) && cctx.Err() == nil {
		// The model answered the summary request with a tool call: once
		// more with tool_choice none before the next binding (the first
		// call kept the session's tool_choice for its prompt cache).
		s.log.Info("summarizer answered with a tool call; asking once more with tool_choice none", "binding", b.Name)
		tries := out.tries
		out = call(true)
		out.tries += tries
		retriedNone = true
	}
	minBytes := uint64(0)
	if b.Provider != ProviderExtractive {
		minBytes = minSummaryBytes(req.Messages)
	}
	if out.err == nil {
		if err := checkAnswer(out.ans, req.maxBytes(), minBytes); err != nil {
			if retriedNone {
				err = fmt.Errorf("%w (after a retry with tool_choice none)", err)
			}
			out.err = &ProviderError{Binding: b.Name, Provider: b.Provider, Status: out.status,
				Class: ClassPermanent, Message: err.Error(), Err: err}
		}
	}
	if out.err != nil {
		// Whatever the provider said may echo the key it was sent.
		r := s.redactorFor(b)
		out.err.Message = r.String(out.err.Message)
		out.err.Err = r.Error(out.err.Err)
	}
	a := Attempt{Binding: b.Name, Provider: b.Provider, Pruned: pruned, Status: out.status,
		Tries: out.tries, Duration: time.Since(start), Usage: out.ans.usage}
	attrs := []any{"binding", b.Name, "provider", b.Provider, "pruned", pruned,
		"status", out.status, "tries", out.tries, "duration", a.Duration}
	if out.err != nil {
		a.Err = out.err
		a.Class = out.err.Class
		s.log.Warn("summarizer binding failed", append(attrs, "class", a.Class.String(), "error", out.err.Error())...)
		return a, answer{}
	}
	s.log.Info("summarizer binding answered", append(attrs, "summary_bytes", len(out.ans.text))...)
	return a, out.ans
}
