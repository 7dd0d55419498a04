package summarizer

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"
)

// TestClassifyCorpus classifies every real provider error body of the
// corpus — JSON bodies, application text and python reprs alike — and
// checks it against the body's category.
func TestClassifyCorpus(t *testing.T) {
	want := map[string]Class{
		"context_overflow": ClassContextLength,
		"rate_limit":       ClassTransient,
		"overloaded":       ClassTransient,
		"history_invalid":  ClassPermanent,
	}
	bodies := errorBodies(t)
	ids := make([]string, 0, len(bodies))
	for id := range bodies {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		e := bodies[id]
		w, ok := want[e.Category]
		if !ok {
			t.Errorf("%s: category %q has no expected class; extend this test", id, e.Category)
			continue
		}
		forms := map[string]*string{"body": e.Body, "text": e.Text, "python_repr": e.PythonRepr, "body_as_json": e.BodyAsJSON}
		n := 0
		for form, s := range forms {
			if s == nil {
				continue
			}
			n++
			t.Run(id+"/"+form, func(t *testing.T) {
				if got := Classify(e.Status, []byte(*s)); got != w {
					t.Errorf("Classify(%d, %s) = %s, want %s", e.Status, form, got, w)
				}
			})
		}
		if n == 0 {
			t.Errorf("%s: no body, text or python_repr to classify", id)
		}
	}
}

func TestClassifyTable(t *testing.T) {
	cases := []struct {
		name   string
		status int
		body   string
		want   Class
	}{
		{"connection error", 0, "", ClassTransient},
		{"408", 408, "", ClassTransient},
		{"429 mentions prompt length", 429, `{"error":{"message":"Please reduce the prompt length"}}`, ClassTransient},
		{"413 html", 413, "<html>Request Entity Too Large</html>", ClassContextLength},
		{"500", 500, `{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`, ClassTransient},
		{"502 html", 502, "<html>Bad Gateway</html>", ClassTransient},
		{"529", 529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, ClassTransient},
		{"vllm", 400, `{"object":"error","message":"This model's maximum context length is 32768 tokens. However, you requested 40000 tokens","type":"BadRequestError","code":400}`, ClassContextLength},
		{"llama.cpp", 400, `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}`, ClassContextLength},
		{"500 wrapping context length", 500, `{"error":{"message":"prompt is too long: 1 tokens > 0 maximum"}}`, ClassContextLength},
		{"401", 401, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`, ClassPermanent},
		{"404 model", 404, `{"error":{"message":"The model does not exist","code":"model_not_found"}}`, ClassPermanent},
		{"400 other", 400, `{"error":{"message":"messages: text content blocks must be non-empty"}}`, ClassPermanent},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Classify(c.status, []byte(c.body)); got != c.want {
				t.Errorf("Classify(%d, %q) = %s, want %s", c.status, c.body, got, c.want)
			}
		})
	}
}

func TestProviderErrorIsAs(t *testing.T) {
	pe := &ProviderError{Binding: "main", Provider: ProviderAnthropic, Status: 400, Class: ClassContextLength, Message: "prompt is too long"}
	err := fmt.Errorf("wrapped: %w", pe)
	if !errors.Is(err, ErrContextLength) || errors.Is(err, ErrTransient) || errors.Is(err, ErrPermanent) {
		t.Errorf("class sentinels wrong for %v", err)
	}
	var got *ProviderError
	if !errors.As(err, &got) || got.Binding != "main" || got.Status != 400 {
		t.Errorf("errors.As: %#v", got)
	}
	if ClassOf(err) != ClassContextLength {
		t.Errorf("ClassOf = %s", ClassOf(err))
	}
	timeout := &ProviderError{Binding: "b", Class: ClassTransient, Err: context.DeadlineExceeded}
	if !errors.Is(timeout, context.DeadlineExceeded) || !errors.Is(timeout, ErrTransient) {
		t.Errorf("timeout error does not unwrap: %v", timeout)
	}
	answer := &ProviderError{Binding: "b", Class: ClassPermanent, Err: ErrEmptyAnswer}
	if !errors.Is(answer, ErrEmptyAnswer) || !errors.Is(answer, ErrPermanent) {
		t.Errorf("answer error does not unwrap: %v", answer)
	}
}

func TestErrorMessage(t *testing.T) {
	_, body := corpusError(t, "openrouter_413_wrapped_prompt_too_long")
	if got := errorMessage(body); got != "Prompt is too long" {
		t.Errorf("nested raw message: got %q", got)
	}
	_, body = corpusError(t, "anthropic_400_prompt_too_long_with_request_id_1")
	if got := errorMessage(body); got != "prompt is too long: 200251 tokens > 200000 maximum" {
		t.Errorf("anthropic message: got %q", got)
	}
	long := make([]byte, 5000)
	for i := range long {
		long[i] = 'x'
	}
	if got := errorMessage(long); len(got) != maxMessageBytes {
		t.Errorf("long body not cut: %d bytes", len(got))
	}
}
