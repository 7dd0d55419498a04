package summarizer

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxd/ctxd/config"
)

// sentAnthropic decodes a request a fake Anthropic provider received.
type sentAnthropic struct {
	Model     string           `json:"model"`
	MaxTokens uint64           `json:"max_tokens"`
	System    string           `json:"system"`
	Tools     []map[string]any `json:"tools"`
	Messages  []struct {
		Role    string           `json:"role"`
		Content []map[string]any `json:"content"`
	} `json:"messages"`
}

func decodeSent(t *testing.T, r recorded) sentAnthropic {
	t.Helper()
	var s sentAnthropic
	if err := json.Unmarshal(r.body, &s); err != nil {
		t.Fatalf("request body: %v", err)
	}
	return s
}

var markerRe = regexp.MustCompile(`^\[tool result pruned for compaction: (\d+) bytes, format (text|tool-content-json); read it with filePath="(artifact://[0-9a-f]+)"\]$`)

// TestPrunedRetryScenario: the first binding answers "prompt is too long"
// → exactly one pruned retry (no tool definitions, markers resolvable
// through the store, artifact read output omitted); it fails with context
// length again → no second pruning; the second binding gets the original
// request, fails the same way, is not pruned; the third answers.
func TestPrunedRetryScenario(t *testing.T) {
	status, tooLong := corpusError(t, "anthropic_400_prompt_too_long_with_request_id_1")
	_, tooLong2 := corpusError(t, "anthropic_400_input_plus_max_tokens_exceed_context")
	ok := cassetteBody(t, "prompt_caching_turn2_cache_read")
	first := newFakeProvider(t, reply{status: status, body: tooLong})
	second := newFakeProvider(t, reply{status: status, body: tooLong2})
	third := newFakeProvider(t, reply{status: 200, body: ok})

	req := sampleRequest()
	before := cloneRequest(req)
	store := newMemStore()
	bindings := []config.Binding{anthropicBinding("first", first.URL), anthropicBinding("second", second.URL), anthropicBinding("third", third.URL)}
	res, err := newTestSummarizer().Summarize(context.Background(), bindings, req, store)
	if err != nil {
		t.Fatal(err)
	}
	if res.Binding != "third" || res.PrunedRetry {
		t.Errorf("result from %q pruned=%v, want third unpruned", res.Binding, res.PrunedRetry)
	}
	if !strings.HasPrefix(res.Summary, "Python is a beginner-friendly") {
		t.Errorf("summary = %q", res.Summary)
	}
	if res.Usage == nil || res.Usage.CacheReadInputTokens != 1111 {
		t.Errorf("usage = %+v", res.Usage)
	}
	if !reflect.DeepEqual(req, before) {
		t.Error("the request was modified")
	}

	f, s, th := first.got(), second.got(), third.got()
	if len(f) != 2 || len(s) != 1 || len(th) != 1 {
		t.Fatalf("requests: first %d, second %d, third %d; want 2, 1, 1", len(f), len(s), len(th))
	}
	// Attempts: first, first pruned, second, third.
	wantAttempts := []struct {
		binding string
		pruned  bool
		class   Class
		ok      bool
	}{{"first", false, ClassContextLength, false}, {"first", true, ClassContextLength, false}, {"second", false, ClassContextLength, false}, {"third", false, 0, true}}
	if len(res.Attempts) != len(wantAttempts) {
		t.Fatalf("attempts = %+v", res.Attempts)
	}
	for i, w := range wantAttempts {
		a := res.Attempts[i]
		if a.Binding != w.binding || a.Pruned != w.pruned || (a.Err == nil) != w.ok || (!w.ok && a.Class != w.class) {
			t.Errorf("attempt %d = %+v, want %+v", i, a, w)
		}
	}
	if res.Prune == nil || res.Prune.Results != 2 || res.Prune.ArtifactReads != 1 {
		t.Errorf("prune stats = %+v", res.Prune)
	}

	// Unpruned requests keep system, tools, history, and end with the prompt.
	for name, r := range map[string]recorded{"first": f[0], "second": s[0], "third": th[0]} {
		sent := decodeSent(t, r)
		if r.path != "/v1/messages" || r.header.Get("anthropic-version") != AnthropicVersion {
			t.Errorf("%s: path %s version %q", name, r.path, r.header.Get("anthropic-version"))
		}
		if sent.System != req.System || len(sent.Tools) != 2 || sent.MaxTokens != DefaultAnthropicMaxTokens {
			t.Errorf("%s: system %q, %d tools, max_tokens %d", name, sent.System, len(sent.Tools), sent.MaxTokens)
		}
		last := sent.Messages[len(sent.Messages)-1]
		if last.Role != "user" || last.Content[0]["text"] != BuiltinPrompt {
			t.Errorf("%s: last message is not the prompt: %v", name, last)
		}
		if strings.Contains(string(r.body), "pruned for compaction") {
			t.Errorf("%s: unpruned request carries markers", name)
		}
		// The cache breakpoint sits on the last history block.
		hist := sent.Messages[len(sent.Messages)-2].Content
		if hist[len(hist)-1]["cache_control"] == nil {
			t.Errorf("%s: no cache breakpoint on the last history block", name)
		}
	}

	// The pruned retry: no tools, markers resolvable, artifact read omitted.
	pruned := decodeSent(t, f[1])
	if len(pruned.Tools) != 0 || strings.Contains(string(f[1].body), `"tools"`) {
		t.Error("pruned retry still carries tool definitions")
	}
	if pruned.System != req.System {
		t.Error("pruned retry lost the system prompt")
	}
	body := string(f[1].body)
	if !strings.Contains(body, ArtifactReadOmitted) {
		t.Error("artifact read output not omitted")
	}
	if strings.Contains(body, "already stored") || strings.Contains(body, "func TestFoo") {
		t.Error("pruned retry still carries tool result content")
	}
	// Tool blocks are flattened to text (no tools defined); find the markers.
	var markers []string
	for _, m := range pruned.Messages {
		for _, b := range m.Content {
			text, _ := b["text"].(string)
			for _, line := range strings.Split(text, "\n") {
				if strings.HasPrefix(line, "[tool result pruned") {
					markers = append(markers, line)
				}
			}
		}
	}
	if len(markers) != 2 {
		t.Fatalf("markers = %q", markers)
	}
	originals := map[string]string{
		"text":              "package foo\n\nfunc TestFoo(t *testing.T) {}\n",
		"tool-content-json": `[{"type":"text","text":"--- FAIL: TestFoo"},{"type":"json","json":{"exit_code":1}}]`,
	}
	for _, mk := range markers {
		m := markerRe.FindStringSubmatch(mk)
		if m == nil {
			t.Fatalf("marker %q does not match %s", mk, markerRe)
		}
		content, format, ok := store.get(m[3])
		if !ok {
			t.Fatalf("marker URI %s not in the store", m[3])
		}
		if format != m[2] || string(content) != originals[format] || m[1] != itoa(len(content)) {
			t.Errorf("marker %q: store has %q (%s)", mk, content, format)
		}
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// TestPrunedRetrySucceeds: the pruned retry's answer is the result.
func TestPrunedRetrySucceeds(t *testing.T) {
	status, tooLong := corpusError(t, "anthropic_400_prompt_too_long_no_request_id")
	p := newFakeProvider(t, reply{status: status, body: tooLong}, reply{status: 200, body: cassetteBody(t, "prompt_caching_turn1_cache_write")})
	res, err := newTestSummarizer().Summarize(context.Background(), []config.Binding{anthropicBinding("only", p.URL)}, sampleRequest(), newMemStore())
	if err != nil {
		t.Fatal(err)
	}
	if !res.PrunedRetry || res.Binding != "only" || len(res.Attempts) != 2 {
		t.Errorf("result = %+v", res)
	}
}

// TestOnePrunedRetryPerCompaction: two bindings failing on context length,
// OpenAI shapes this time: only the first is retried pruned, and the whole
// compaction fails listing every attempt.
func TestOnePrunedRetryPerCompaction(t *testing.T) {
	status, body := corpusError(t, "openai_chat_400_context_length_exceeded_compact")
	_, body2 := corpusError(t, "openai_responses_context_length_exceeded")
	a := newFakeProvider(t, reply{status: status, body: body})
	b := newFakeProvider(t, reply{status: status, body: body2})
	res, err := newTestSummarizer().Summarize(context.Background(),
		[]config.Binding{openAIBinding("a", a.URL), openAIBinding("b", b.URL)}, sampleRequest(), newMemStore())
	if !errors.Is(err, ErrAllBindingsFailed) || !errors.Is(err, ErrContextLength) {
		t.Fatalf("err = %v", err)
	}
	var pe *ProviderError
	if !errors.As(err, &pe) || pe.Binding != "a" {
		t.Errorf("errors.As = %+v", pe)
	}
	if len(a.got()) != 2 || len(b.got()) != 1 || len(res.Attempts) != 3 {
		t.Errorf("requests a=%d b=%d attempts=%d", len(a.got()), len(b.got()), len(res.Attempts))
	}
	if res.Summary != "" {
		t.Error("a failed compaction returned a summary")
	}
	if strings.Contains(string(b.got()[0].body), "pruned for compaction") {
		t.Error("second binding got a pruned request")
	}
	var sent struct {
		Tools    []any `json:"tools"`
		Messages []struct {
			Role string `json:"role"`
		} `json:"messages"`
	}
	_ = json.Unmarshal(a.got()[1].body, &sent)
	if len(sent.Tools) != 0 {
		t.Error("openai pruned retry carries tools")
	}
}

// TestOtherFailuresNeverPrune: a permanent or transient failure moves on
// without pruning.
func TestOtherFailuresNeverPrune(t *testing.T) {
	_, hist := corpusError(t, "anthropic_400_tool_use_without_tool_result")
	bad := newFakeProvider(t, reply{status: 400, body: hist})
	store := newMemStore()
	res, err := newTestSummarizer().Summarize(context.Background(),
		[]config.Binding{anthropicBinding("bad", bad.URL), {Name: "local", Provider: ProviderExtractive}}, sampleRequest(), store)
	if err != nil {
		t.Fatal(err)
	}
	if res.Binding != "local" || res.Prune != nil || store.calls != 0 || len(bad.got()) != 1 {
		t.Errorf("result %+v, store calls %d, requests %d", res, store.calls, len(bad.got()))
	}
	if res.Attempts[0].Class != ClassPermanent {
		t.Errorf("class = %s", res.Attempts[0].Class)
	}
}

// TestPruneFailureMovesOn: no store (or a failing one) → the pruned retry
// fails as an attempt and the next binding is tried.
func TestPruneFailureMovesOn(t *testing.T) {
	status, tooLong := corpusError(t, "anthropic_400_prompt_too_long_roo")
	p := newFakeProvider(t, reply{status: status, body: tooLong})
	for name, store := range map[string]ArtifactStore{"nil store": nil, "failing store": &memStore{err: errors.New("disk full")}} {
		t.Run(name, func(t *testing.T) {
			res, err := newTestSummarizer().Summarize(context.Background(),
				[]config.Binding{anthropicBinding("p", p.URL), {Name: "local", Provider: ProviderExtractive}}, sampleRequest(), store)
			if err != nil {
				t.Fatal(err)
			}
			if res.Binding != "local" || len(res.Attempts) != 3 || !res.Attempts[1].Pruned || res.Attempts[1].Err == nil {
				t.Errorf("attempts = %+v", res.Attempts)
			}
		})
	}
}

// TestAnswerChecks: a tool call, an empty answer, one cut at the output cap,
// one over max_summary_bytes, a refusal: each fails its binding and the
// next one answers; alone, each fails the compaction with no summary.
func TestAnswerChecks(t *testing.T) {
	okText := string(cassetteBody(t, "prompt_caching_turn2_cache_read"))
	anth := func(content, stop string) []byte {
		return []byte(`{"id":"msg_1","type":"message","role":"assistant","model":"claude-test","content":` + content +
			`,"stop_reason":"` + stop + `","usage":{"input_tokens":10,"output_tokens":5}}`)
	}
	oai := func(message, finish string) []byte {
		return []byte(`{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":` + message +
			`,"finish_reason":"` + finish + `"}],"usage":{"prompt_tokens":100,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":60}}}`)
	}
	cases := []struct {
		name     string
		provider string
		body     []byte
		max      uint64
		want     error
	}{
		{"anthropic tool call", ProviderAnthropic, anth(`[{"type":"text","text":"Let me look."},{"type":"tool_use","id":"toolu_1","name":"read","input":{"path":"a"}}]`, "tool_use"), 0, ErrToolCallAnswer},
		{"anthropic empty", ProviderAnthropic, anth(`[]`, "end_turn"), 0, ErrEmptyAnswer},
		{"anthropic whitespace", ProviderAnthropic, anth(`[{"type":"text","text":"  \n"}]`, "end_turn"), 0, ErrEmptyAnswer},
		{"anthropic max_tokens", ProviderAnthropic, anth(`[{"type":"text","text":"## Goal\nhalf a summ"}]`, "max_tokens"), 0, ErrAnswerTruncated},
		{"anthropic refusal", ProviderAnthropic, anth(`[{"type":"text","text":"no"}]`, "refusal"), 0, ErrAnswerRefused},
		{"anthropic over max_summary_bytes", ProviderAnthropic, []byte(okText), 100, ErrAnswerTooLarge},
		{"openai tool call", ProviderOpenAI, oai(`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"read","arguments":"{}"}}]}`, "tool_calls"), 0, ErrToolCallAnswer},
		{"openai empty", ProviderOpenAI, oai(`{"role":"assistant","content":""}`, "stop"), 0, ErrEmptyAnswer},
		{"openai length", ProviderOpenAI, oai(`{"role":"assistant","content":"## Goal\nhalf"}`, "length"), 0, ErrAnswerTruncated},
		{"openai over max_summary_bytes", ProviderOpenAI, oai(`{"role":"assistant","content":"`+strings.Repeat("x", 200)+`"}`, "stop"), 100, ErrAnswerTooLarge},
		{"openai content filter", ProviderOpenAI, oai(`{"role":"assistant","content":"x"}`, "content_filter"), 0, ErrAnswerRefused},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newFakeProvider(t, reply{status: 200, body: c.body})
			b := config.Binding{Name: "p", Provider: c.provider, Model: "m", BaseURL: p.URL}
			req := sampleRequest()
			req.MaxSummaryBytes = c.max
			res, err := newTestSummarizer().Summarize(context.Background(), []config.Binding{b, {Name: "local", Provider: ProviderExtractive}}, req, newMemStore())
			if err != nil {
				t.Fatal(err)
			}
			if res.Binding != "local" || !errors.Is(res.Attempts[0].Err, c.want) || res.Attempts[0].Class != ClassPermanent {
				t.Errorf("binding %q, first attempt %v, want %v", res.Binding, res.Attempts[0].Err, c.want)
			}
			if max := req.maxBytes(); uint64(len(res.Summary)) > max {
				t.Errorf("extractive summary %d bytes > %d", len(res.Summary), max)
			}
			res, err = newTestSummarizer().Summarize(context.Background(), []config.Binding{b}, req, newMemStore())
			if !errors.Is(err, c.want) || !errors.Is(err, ErrAllBindingsFailed) || res.Summary != "" {
				t.Errorf("alone: err %v, summary %q", err, res.Summary)
			}
		})
	}
}

// TestTransientRetried: 429 with Retry-After: 0, then 500, then 200 → one
// success after three tries.
func TestTransientRetried(t *testing.T) {
	status429, rate := corpusError(t, "anthropic_429_rate_limit_itpm_old_wording")
	_, over := corpusError(t, "anthropic_529_overloaded")
	ok := cassetteBody(t, "prompt_caching_turn2_cache_read")
	cases := map[string][]reply{
		"429 then 500 then 200": {
			{status: status429, header: map[string]string{"Retry-After": "0"}, body: rate},
			{status: 500, body: []byte(`{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`)},
			{status: 200, body: ok},
		},
		"529 then 200": {{status: 529, body: over}, {status: 200, body: ok}},
	}
	for name, replies := range cases {
		t.Run(name, func(t *testing.T) {
			p := newFakeProvider(t, replies...)
			res, err := newTestSummarizer().Summarize(context.Background(), []config.Binding{anthropicBinding("p", p.URL)}, sampleRequest(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Attempts) != 1 || res.Attempts[0].Tries != len(replies) || len(p.got()) != len(replies) {
				t.Errorf("attempts %+v, requests %d", res.Attempts, len(p.got()))
			}
			// Every try sent the same body.
			got := p.got()
			for i := range got {
				if string(got[i].body) != string(got[0].body) {
					t.Errorf("try %d sent a different body", i)
				}
			}
		})
	}
}

// TestTransientExhausted: retries give up after RetryMax and the last
// response is classified with its body.
func TestTransientExhausted(t *testing.T) {
	_, over := corpusError(t, "anthropic_529_overloaded")
	p := newFakeProvider(t, reply{status: 529, body: over})
	s := New(Options{Logger: quietLogger(), RetryMax: 2, RetryWaitMin: time.Millisecond, RetryWaitMax: time.Millisecond})
	_, err := s.Summarize(context.Background(), []config.Binding{anthropicBinding("p", p.URL)}, sampleRequest(), nil)
	var pe *ProviderError
	if !errors.As(err, &pe) || pe.Status != 529 || pe.Class != ClassTransient || pe.Message != "Overloaded" {
		t.Fatalf("err = %v", err)
	}
	if len(p.got()) != 3 {
		t.Errorf("requests = %d, want 3", len(p.got()))
	}
}

// TestRetryAfterBeyondDeadline: a Retry-After longer than the time left is
// not waited for; the binding fails with the provider's answer at once.
func TestRetryAfterBeyondDeadline(t *testing.T) {
	status, rate := corpusError(t, "anthropic_429_rate_limit_itpm_new_wording_error_object_only")
	p := newFakeProvider(t, reply{status: status, header: map[string]string{"Retry-After": "3600"}, body: rate})
	req := sampleRequest()
	req.Timeout = time.Minute
	_, err := newTestSummarizer().Summarize(context.Background(), []config.Binding{anthropicBinding("p", p.URL)}, req, nil)
	var pe *ProviderError
	if !errors.As(err, &pe) || pe.Status != 429 || pe.Class != ClassTransient {
		t.Fatalf("err = %v", err)
	}
	if len(p.got()) != 1 {
		t.Errorf("requests = %d", len(p.got()))
	}
}

// TestTimeout: a summarizer slower than the timeout fails at the timeout:
// the error is a deadline error and the server saw the request cancelled;
// the next binding is then tried. The call's deadline expires once the
// server holds the request (a wall-clock timeout could expire before the
// request reached it on a loaded machine): no timing in the test.
func TestTimeout(t *testing.T) {
	arrived := make(chan struct{}, 1)
	cancelled := make(chan struct{}, 1)
	testDone := make(chan struct{})
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		// The server notices a closed connection only once the body is read.
		_, _ = io.ReadAll(r.Body)
		arrived <- struct{}{}
		select { // never answers
		case <-r.Context().Done():
			cancelled <- struct{}{}
		case <-testDone:
		}
	}))
	defer srv.Close()
	defer close(testDone)
	req := sampleRequest()
	req.Timeout = 50 * time.Millisecond
	s := newTestSummarizer()
	var timeouts []time.Duration
	s.withTimeout = func(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
		timeouts = append(timeouts, d)
		return expireOn(parent, arrived)
	}
	res, err := s.Summarize(context.Background(),
		[]config.Binding{anthropicBinding("slow", srv.URL), {Name: "local", Provider: ProviderExtractive}}, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(timeouts) != 2 || timeouts[0] != req.Timeout || timeouts[1] != req.Timeout {
		t.Errorf("call timeouts %v, want the request's %v for each binding", timeouts, req.Timeout)
	}
	a := res.Attempts[0]
	if !errors.Is(a.Err, context.DeadlineExceeded) || a.Class != ClassTransient {
		t.Errorf("slow binding error = %v (class %s)", a.Err, a.Class)
	}
	if res.Binding != "local" {
		t.Errorf("binding = %s", res.Binding)
	}
	// The attempt returned once its deadline expired; the server sees the
	// closed connection on its own schedule (no bound on it here: a hang
	// is go test's timeout).
	<-cancelled
	if hits.Load() != 1 {
		t.Errorf("hits = %d: a timed-out call must not be retried", hits.Load())
	}
}

// expireOn returns a context that expires as a deadline does (Err and
// Cause context.DeadlineExceeded) when a value arrives on fire, or ends
// with parent.
func expireOn(parent context.Context, fire <-chan struct{}) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	e := &expiring{Context: ctx}
	go func() {
		select {
		case <-fire:
			e.expired.Store(true)
			cancel(context.DeadlineExceeded)
		case <-ctx.Done():
		}
	}()
	return e, func() { cancel(context.Canceled) }
}

// expiring is a context whose Err reports an expired deadline once fired.
type expiring struct {
	context.Context
	expired atomic.Bool
}

func (e *expiring) Err() error {
	if e.expired.Load() {
		return context.DeadlineExceeded
	}
	return e.Context.Err()
}

// TestParentCancelStops: a cancelled caller stops the compaction; no
// further binding is tried.
func TestParentCancelStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		cancel()
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}))
	defer srv.Close()
	res, err := newTestSummarizer().Summarize(ctx,
		[]config.Binding{anthropicBinding("a", srv.URL), {Name: "local", Provider: ProviderExtractive}}, sampleRequest(), nil)
	if !errors.Is(err, context.Canceled) || len(res.Attempts) != 1 {
		t.Fatalf("err %v, attempts %d", err, len(res.Attempts))
	}
}

// TestAPIKeyAndHeaders: keys come from api_key_env at call time; Anthropic
// sends x-api-key, OpenAI a bearer token; an unset variable fails the
// binding before any request.
func TestAPIKeyAndHeaders(t *testing.T) {
	t.Setenv("CTXD_TEST_ANTHROPIC_KEY", "sk-ant-test")
	t.Setenv("CTXD_TEST_OPENAI_KEY", "sk-oai-test")
	ok := cassetteBody(t, "prompt_caching_turn2_cache_read")
	oaiOK := []byte(`{"choices":[{"message":{"role":"assistant","content":"## Goal\nok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":100,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":60}}}`)
	ap := newFakeProvider(t, reply{status: 200, body: ok})
	op := newFakeProvider(t, reply{status: 200, body: oaiOK})
	s := newTestSummarizer()

	ab := anthropicBinding("a", ap.URL)
	ab.APIKeyEnv = "CTXD_TEST_ANTHROPIC_KEY"
	ab.MaxOutputTokens = 2000
	if _, err := s.Summarize(context.Background(), []config.Binding{ab}, sampleRequest(), nil); err != nil {
		t.Fatal(err)
	}
	r := ap.got()[0]
	if r.header.Get("x-api-key") != "sk-ant-test" || decodeSent(t, r).MaxTokens != 2000 || decodeSent(t, r).Model != "claude-test" {
		t.Errorf("anthropic headers %v body %s", r.header, r.body)
	}

	ob := openAIBinding("o", op.URL+"/v1/") // a base URL ending in /v1 is not doubled
	ob.APIKeyEnv = "CTXD_TEST_OPENAI_KEY"
	ob.MaxOutputTokens = 3000
	res, err := s.Summarize(context.Background(), []config.Binding{ob}, sampleRequest(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Usage == nil || res.Usage.InputTokens != 40 || res.Usage.CacheReadInputTokens != 60 || res.Usage.OutputTokens != 5 {
		t.Errorf("openai usage = %+v", res.Usage)
	}
	r = op.got()[0]
	var sent map[string]any
	_ = json.Unmarshal(r.body, &sent)
	if r.path != "/v1/chat/completions" || r.header.Get("Authorization") != "Bearer sk-oai-test" {
		t.Errorf("openai path %s auth %q", r.path, r.header.Get("Authorization"))
	}
	// A compatible server (not api.openai.com) gets max_tokens.
	if sent["max_tokens"] != float64(3000) || sent["max_completion_tokens"] != nil || sent["model"] != "gpt-test" {
		t.Errorf("openai body = %s", r.body)
	}
	msgs := sent["messages"].([]any)
	if m := msgs[0].(map[string]any); m["role"] != "system" {
		t.Errorf("first message = %v", m)
	}
	if m := msgs[len(msgs)-1].(map[string]any); m["role"] != "user" || m["content"] != BuiltinPrompt {
		t.Errorf("last message = %v", m)
	}

	ob.APIKeyEnv = "CTXD_TEST_UNSET_KEY_VARIABLE"
	_, err = s.Summarize(context.Background(), []config.Binding{ob}, sampleRequest(), nil)
	if !errors.Is(err, ErrMissingAPIKey) || len(op.got()) != 1 {
		t.Errorf("unset key: err %v, requests %d", err, len(op.got()))
	}
	if strings.Contains(err.Error(), "sk-") {
		t.Error("an error mentions a key")
	}
}

func TestMaxTokensFieldByHost(t *testing.T) {
	for base, want := range map[string]bool{"": true, "https://api.openai.com": true, "https://api.openai.com/v1": true,
		"http://localhost:8000": false, "https://openrouter.ai/api/v1": false} {
		if got := isOpenAIHost(base); got != want {
			t.Errorf("isOpenAIHost(%q) = %v", base, got)
		}
	}
}

// TestInvalidHistoryTriesNothing: a history with an open round fails
// clearly before any request.
func TestInvalidHistoryTriesNothing(t *testing.T) {
	p := newFakeProvider(t, reply{status: 200, body: cassetteBody(t, "prompt_caching_turn2_cache_read")})
	req := sampleRequest()
	req.Messages = req.Messages[:3] // c2 is left open
	res, err := newTestSummarizer().Summarize(context.Background(), []config.Binding{anthropicBinding("p", p.URL)}, req, nil)
	if !errors.Is(err, ErrInvalidHistory) || len(p.got()) != 0 || len(res.Attempts) != 0 {
		t.Errorf("err %v, requests %d", err, len(p.got()))
	}
	if !strings.Contains(err.Error(), `"c2"`) {
		t.Errorf("error does not name the open call: %v", err)
	}
}

func TestDefaultAndUnknownBindings(t *testing.T) {
	res, err := newTestSummarizer().Summarize(context.Background(), nil, sampleRequest(), nil)
	if err != nil || res.Binding != ProviderExtractive || !strings.Contains(res.Summary, HeadingGoal) {
		t.Fatalf("default binding: %v %+v", err, res)
	}
	_, err = newTestSummarizer().Summarize(context.Background(), []config.Binding{{Name: "x", Provider: "gemini"}}, sampleRequest(), nil)
	if !errors.Is(err, ErrUnknownProvider) {
		t.Errorf("unknown provider: %v", err)
	}
}
