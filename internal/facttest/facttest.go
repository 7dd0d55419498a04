// Package facttest holds the fact lists the summary and recall tests
// measure against (testdata/facts/*.json, one per corpus session): what an
// agent needs to continue at each point where a session was cut — the
// task, the names it wrote, the errors and their fixes, the decisions and
// the next step — written by hand from reading the history. A fact is kept
// by a text when the text contains one of its patterns (case-insensitive;
// "re:" marks a regular expression).
package facttest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/corpustest"
	"github.com/ctxd/ctxd/transcript"
)

// File is one fact list: the corpus session it is about, the share of fact
// weight the extractive summary must keep at every point, and the facts.
type File struct {
	// Session is the corpus file, relative to the corpus directory.
	Session string `json:"session"`
	// MinPercent is the share of fact weight, in percent, the extractive
	// summary must keep at every point.
	MinPercent float64 `json:"min_percent"`
	Facts      []Fact  `json:"facts"`
}

// Fact is one thing an agent needs to continue.
type Fact struct {
	ID     string   `json:"id"`
	Kind   string   `json:"kind"` // task, identifier, error, fix, decision, next, command, file
	Weight float64  `json:"weight"`
	Any    []string `json:"any"`
	// At lists the points the fact belongs to: "compaction1", … for the
	// original agent's compactions, "end" for the whole history; empty
	// means every point.
	At []string `json:"at,omitempty"`
}

// Kept reports whether text holds one of the fact's patterns.
func (f Fact) Kept(text string) bool {
	low := strings.ToLower(text)
	for _, p := range f.Any {
		if re, ok := strings.CutPrefix(p, "re:"); ok {
			if regexp.MustCompile("(?i)" + re).MatchString(text) {
				return true
			}
			continue
		}
		if strings.Contains(low, strings.ToLower(p)) {
			return true
		}
	}
	return false
}

// Applies reports whether the fact belongs to point.
func (f Fact) Applies(point string) bool {
	if len(f.At) == 0 {
		return true
	}
	for _, a := range f.At {
		if a == point {
			return true
		}
	}
	return false
}

// Score returns the kept share of the weight of the facts that apply at
// point, in percent, and the ids of the facts lost.
func (ff *File) Score(point, text string) (float64, []string) {
	var total, kept float64
	var lost []string
	for _, f := range ff.Facts {
		if !f.Applies(point) {
			continue
		}
		total += f.Weight
		if f.Kept(text) {
			kept += f.Weight
		} else {
			lost = append(lost, f.ID)
		}
	}
	if total == 0 {
		return 100, nil
	}
	return 100 * kept / total, lost
}

// Dir is the directory of the fact files.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "testdata", "facts")
}

// Load reads every fact file, strictly; it fails tb on none, on an unknown
// field, and on a fact with no id, weight or pattern.
func Load(tb testing.TB) []*File {
	tb.Helper()
	paths, err := filepath.Glob(filepath.Join(Dir(), "*.json"))
	if err != nil || len(paths) == 0 {
		tb.Fatalf("no fact files in %s: %v", Dir(), err)
	}
	var out []*File
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		var ff File
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ff); err != nil {
			tb.Fatalf("%s: %v", p, err)
		}
		for _, f := range ff.Facts {
			if f.ID == "" || f.Weight <= 0 || len(f.Any) == 0 {
				tb.Fatalf("%s: fact %q needs an id, a weight and patterns", p, f.ID)
			}
		}
		out = append(out, &ff)
	}
	return out
}

// Point is one place a session is summarized: before one of the original
// agent's compactions, or at the end.
type Point struct {
	Name string
	// Msgs is the history up to the point, abandoned rounds closed.
	Msgs []history.Message
	// LLM is the original agent's own summary there, "" when none.
	LLM string
}

// Points returns the points of corpus session rel: one per compaction of
// the original agent ("compaction1", …), then "end".
func Points(tb testing.TB, rel string) []Point {
	tb.Helper()
	tr, err := transcript.Import(bytes.NewReader(corpustest.Read(tb, rel)), transcript.Options{IncludeSidechains: true})
	if err != nil {
		tb.Fatal(err)
	}
	var pts []Point
	for k, c := range tr.OriginalCompactions {
		msgs, _ := transcript.CloseAbandoned(tr.Messages[:c.MessageIndex])
		pts = append(pts, Point{Name: fmt.Sprintf("compaction%d", k+1), Msgs: msgs, LLM: c.Summary})
	}
	msgs, _ := transcript.CloseAbandoned(tr.Messages)
	return append(pts, Point{Name: "end", Msgs: msgs})
}

// Large reports whether ff's session is one of the large corpus sessions
// (hundreds of tool calls, megabytes of history), which tests under the race
// detector leave out: it makes them take minutes.
func (ff *File) Large() bool {
	return !strings.HasPrefix(ff.Session, "recorded/")
}

// Cuts returns where n successive compactions of msgs happen, as message
// counts (msgs[:cut] is what the history holds at each): at even intervals
// of the history up to its last closed round boundary (no tool call waiting
// for its result, the last message not a user message), each at the first
// boundary at or past k/n of it that leaves one for every later cut, the
// last at that last boundary, no two at the same one. A history with fewer
// than n such boundaries is also cut after a user message no call waits
// before and no user message follows (where an agent sends a new prompt:
// what a pre-send compaction sees), but never after the first message
// alone (a compaction keeps the only request verbatim: nothing to
// compact). A history with fewer than n places of either kind gets one cut
// at each.
func Cuts(msgs []history.Message, n int) []int {
	var rounds, all []int
	state := &history.State{}
	for i, m := range msgs {
		state.Apply(m)
		switch {
		case i == 0 || len(state.Open()) != 0:
		case i+1 < len(msgs) && m.Role == history.RoleUser && msgs[i+1].Role == history.RoleUser:
			// a prompt that goes with the next message
		default:
			all = append(all, i+1)
			if m.Role != history.RoleUser {
				rounds = append(rounds, i+1)
			}
		}
	}
	if len(rounds) == 0 || n <= 0 {
		return nil
	}
	end := rounds[len(rounds)-1]
	bounds := rounds
	if len(rounds) < n {
		bounds = nil
		for _, b := range all {
			if b <= end {
				bounds = append(bounds, b)
			}
		}
	}
	if len(bounds) <= n {
		return bounds
	}
	var cuts []int
	j := 0
	for k := 1; k <= n; k++ {
		// The latest bound this cut may take: one is left for each
		// later cut.
		last := len(bounds) - (n - k) - 1
		for j < last && bounds[j] < k*end/n {
			j++
		}
		cuts = append(cuts, bounds[j])
		j++
	}
	return cuts
}

// fewerPlaces are the sessions with fewer places to compact than a test
// asks cuts of (Cuts), by session: how many they have.
var fewerPlaces = map[string]int{
	// u, (call, result) ×3, answer: 4 closed places after the request.
	"recorded/pi/pi0.73.1-anthropic-1compaction.jsonl": 4,
}

// WantCuts is how many cuts Cuts must give of session's history when n are
// asked: n, but in a session with fewer places to compact.
func WantCuts(session string, n int) int {
	if p, ok := fewerPlaces[session]; ok {
		return min(n, p)
	}
	return n
}

// FirstSegment returns the facts of ff whose patterns the first segment
// text holds: the facts a first summary replaced.
func (ff *File) FirstSegment(text string) []Fact {
	var out []Fact
	for _, f := range ff.Facts {
		if f.Kept(text) {
			out = append(out, f)
		}
	}
	return out
}

// Text is the text of msgs a fact is looked for in: every block's text,
// tool inputs as the agent wrote them, and tool results.
func Text(msgs []history.Message) string {
	var b strings.Builder
	for _, m := range msgs {
		for _, bl := range m.Content {
			b.WriteString(bl.Text)
			b.Write(bl.Input)
			b.WriteByte('\n')
		}
	}
	return b.String()
}
