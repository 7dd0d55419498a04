package corpustest

import (
	"encoding/json"
	"testing"
)

// ErrorBodiesFile is the corpus file of real provider error answers, each
// with its provider, HTTP status, category and body (null where the
// provider's body was not kept).
const ErrorBodiesFile = "providers/error-bodies.json"

// ContextLengthCase is one error answer and whether a provider's
// context-length classifier must take it for a context overflow.
type ContextLengthCase struct {
	Name   string // the corpus id, or what the case is
	Status int    // HTTP status
	Body   string
	Want   bool
}

// ErrorBody is one entry of ErrorBodiesFile: a provider's real error
// answer. The pointers are nil where the entry has no such field (Body:
// the provider's body was not kept).
type ErrorBody struct {
	ID         string  `json:"id"`
	Provider   string  `json:"provider"`
	Status     int     `json:"http_status"`
	Category   string  `json:"category"`
	Body       *string `json:"body"`
	Text       *string `json:"text"`
	PythonRepr *string `json:"python_repr"`
	BodyAsJSON *string `json:"body_as_json"`
}

// ErrorBodies returns every entry of ErrorBodiesFile, in file order. It
// fails tb when the file is missing, does not decode or holds none.
func ErrorBodies(tb testing.TB) []ErrorBody {
	tb.Helper()
	var f struct {
		Errors []ErrorBody `json:"errors"`
	}
	if err := json.Unmarshal(Read(tb, ErrorBodiesFile), &f); err != nil {
		tb.Fatalf("%s: %v", ErrorBodiesFile, err)
	}
	if len(f.Errors) == 0 {
		tb.Fatalf("%s: no error bodies", ErrorBodiesFile)
	}
	return f.Errors
}

// ErrorBodyOf returns the HTTP status and body of the entry id of
// ErrorBodiesFile; it fails tb when there is no such entry or it has no
// body.
func ErrorBodyOf(tb testing.TB, id string) (status int, body string) {
	tb.Helper()
	for _, e := range ErrorBodies(tb) {
		if e.ID == id && e.Body != nil {
			return e.Status, *e.Body
		}
	}
	tb.Fatalf("no error body %q in %s", id, ErrorBodiesFile)
	return 0, ""
}

// ContextLengthCases returns a case for every error body of the corpus
// whose provider name keep accepts and whose body is neither null nor
// empty, wanted as an overflow exactly when its category is
// "context_overflow". It fails tb when fewer than atLeast were found (a
// corpus that lost them) and when the file is missing.
func ContextLengthCases(tb testing.TB, keep func(provider string) bool, atLeast int) []ContextLengthCase {
	tb.Helper()
	var cases []ContextLengthCase
	for _, e := range ErrorBodies(tb) {
		if !keep(e.Provider) || e.Body == nil || *e.Body == "" {
			continue
		}
		cases = append(cases, ContextLengthCase{Name: e.ID, Status: e.Status, Body: *e.Body, Want: e.Category == "context_overflow"})
	}
	if len(cases) < atLeast {
		tb.Fatalf("only %d error bodies of the chosen providers in %s, want at least %d", len(cases), ErrorBodiesFile, atLeast)
	}
	return cases
}

// CheckContextLength runs isContextLength (a provider's classifier: HTTP
// status and body → an overflow or not) over cases, a subtest each, and
// fails each whose verdict is not the case's Want.
func CheckContextLength(t *testing.T, cases []ContextLengthCase, isContextLength func(status int, body []byte) bool) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			if got := isContextLength(c.Status, []byte(c.Body)); got != c.Want {
				t.Errorf("IsContextLength(%d, %s) = %v, want %v", c.Status, c.Body, got, c.Want)
			}
		})
	}
}
