package recall

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/ctxd/ctxd/checkpoint"
)

// Source is what Search and Read need of a session's store; *engine.Engine
// satisfies it. Errors are the store's (a session not found, …).
type Source interface {
	// Events calls fn with each event of session id from seq from on.
	Events(ctx context.Context, id string, from uint64, follow bool, fn func(checkpoint.Event) error) error
	// Checkpoints returns the session's checkpoints, oldest first, with
	// their summaries.
	Checkpoints(ctx context.Context, id string) ([]checkpoint.Checkpoint, error)
	// SystemPrompt returns the session's system prompt.
	SystemPrompt(ctx context.Context, id string) (string, error)
}

// ArtifactFunc returns the bytes of the artifact a URI ("artifact://<id>")
// names. Nil: offloaded results are not searched.
type ArtifactFunc func(ctx context.Context, uri string) ([]byte, error)

// Sources of a search hit.
const (
	SourceMessage   = "message"   // an original message of the event log
	SourceSummary   = "summary"   // a checkpoint's summary
	SourceOffloaded = "offloaded" // the whole text of an offloaded tool result
)

// Limits of Search and Read (docs/design.md §5.6).
const (
	// MaxQueryChars is the longest query, in characters.
	MaxQueryChars = 500
	// DefaultLimit and MaxLimit bound the hits of one page.
	DefaultLimit = 20
	MaxLimit     = 100
	// MaxLineChars is the most characters of a matching line a hit shows.
	MaxLineChars = 300
	// DefaultReadChars and MaxReadChars bound one page of Read.
	DefaultReadChars = 20000
	MaxReadChars     = 200000
	// workingDirMessages is how many of the first messages WorkingDir
	// looks at beside the system prompt.
	workingDirMessages = 8
)

// ErrInvalid marks a bad query or range; the message names the field.
var ErrInvalid = errors.New("invalid")

// Hit is one matching line.
type Hit struct {
	// Seq is the message's sequence number (for a summary, the
	// checkpoint's; for an offloaded result, its tool message's).
	Seq    uint64 `json:"seq"`
	Source string `json:"source"`
	// Role, Tool and ToolCallID describe the message ("" for a summary).
	Role       string `json:"role,omitempty"`
	Tool       string `json:"tool,omitempty"`
	ToolCallID string `json:"tool_call_id,omitempty"`
	// Artifact is the URI of an offloaded result's whole text.
	Artifact string `json:"artifact,omitempty"`
	// Line is the matching line's number (from 1) in the message as Read
	// renders it, in the summary, or in the offloaded text.
	Line int `json:"line"`
	// Text is the line, cut to MaxLineChars characters around the match.
	Text string `json:"text"`
}

// SearchResult is one page of hits, in order of seq (messages first,
// then the offloaded text of the same seq, then summaries).
type SearchResult struct {
	Hits []Hit `json:"hits"`
	// Total is the number of matching lines in the session.
	Total int `json:"total"`
	// Next is the offset of the following page, 0 when this is the last.
	Next int `json:"next,omitempty"`
	// WorkingDir is the session's recorded working directory, "" when its
	// agent named none (see WorkingDir).
	WorkingDir string `json:"working_dir,omitempty"`
}

// matcher matches a line: it holds the query's whole text and its words,
// lower-cased; a line matches when it holds every word (so it holds the
// whole query too).
type matcher struct {
	whole string
	words []string
}

func newMatcher(query string) (matcher, error) {
	q := strings.TrimSpace(query)
	switch n := utf8.RuneCountInString(q); {
	case n == 0:
		return matcher{}, fmt.Errorf("%w: q: the query is empty", ErrInvalid)
	case n > MaxQueryChars:
		return matcher{}, fmt.Errorf("%w: q: the query has %d characters, at most %d", ErrInvalid, n, MaxQueryChars)
	}
	low := strings.ToLower(q)
	return matcher{whole: low, words: strings.Fields(low)}, nil
}

// match returns the byte offset of the match in line, -1 for none.
func (m matcher) match(line string) int {
	low := strings.ToLower(line)
	if i := strings.Index(low, m.whole); i >= 0 {
		return i
	}
	if len(m.words) < 2 {
		return -1
	}
	first := -1
	for _, w := range m.words {
		i := strings.Index(low, w)
		if i < 0 {
			return -1
		}
		if first < 0 || i < first {
			first = i
		}
	}
	return first
}

// pager collects the hits of one page and counts them all.
type pager struct {
	m             matcher
	offset, limit int
	total         int
	hits          []Hit
}

// scan adds the matching lines of text, each described by proto.
func (p *pager) scan(text string, proto Hit) {
	n := 0
	for line := range strings.SplitSeq(text, "\n") {
		n++
		at := p.m.match(line)
		if at < 0 {
			continue
		}
		p.total++
		if p.total <= p.offset || len(p.hits) >= p.limit {
			continue
		}
		h := proto
		h.Line = n
		h.Text = excerpt(line, at, MaxLineChars)
		p.hits = append(p.hits, h)
	}
}

// excerpt is at most max characters of line around byte offset at.
func excerpt(line string, at, max int) string {
	if utf8.RuneCountInString(line) <= max {
		return line
	}
	start := at
	for back := max / 3; start > 0 && back > 0; back-- {
		_, size := utf8.DecodeLastRuneInString(line[:start])
		start -= size
	}
	out := line[start:]
	end, n := 0, 0
	for end < len(out) && n < max {
		_, size := utf8.DecodeRuneInString(out[end:])
		end += size
		n++
	}
	s := out[:end]
	if start > 0 {
		s = "…" + s
	}
	if end < len(out) {
		s += "…"
	}
	return s
}

// offloadRecord is what Search reads of an offload event's data.
type offloadRecord struct {
	ToolCallID string `json:"tool_call_id"`
	ToolName   string `json:"tool_name"`
	Artifact   string `json:"artifact"`
}

// Search finds the lines holding query (case-insensitive; a line holding
// every word of a query of several words matches too) in session id's
// original messages (rendered as Read renders them, so a header line
// "=== seq N · tool result · Bash" is searchable), its checkpoints'
// summaries and, with artifact, the whole text of its offloaded results;
// returns the page of at most limit hits (0: DefaultLimit) after the first
// offset. Errors: ErrInvalid (q, limit, offset), the source's.
func Search(ctx context.Context, src Source, artifact ArtifactFunc, id, query string, limit, offset int) (SearchResult, error) {
	m, err := newMatcher(query)
	if err != nil {
		return SearchResult{}, err
	}
	if limit == 0 {
		limit = DefaultLimit
	}
	if limit < 1 || limit > MaxLimit {
		return SearchResult{}, fmt.Errorf("%w: limit: %d is not between 1 and %d", ErrInvalid, limit, MaxLimit)
	}
	if offset < 0 {
		return SearchResult{}, fmt.Errorf("%w: offset: %d is negative", ErrInvalid, offset)
	}
	p := &pager{m: m, offset: offset, limit: limit}
	wd := workingDirFinder{}
	if sys, err := src.SystemPrompt(ctx, id); err == nil {
		wd.add(sys)
	} else {
		return SearchResult{}, err
	}
	var buf bytes.Buffer
	callSeq := map[string]uint64{}
	var offloads []offloadRecord
	err = src.Events(ctx, id, 1, false, func(ev checkpoint.Event) error {
		switch {
		case ev.Kind == checkpoint.KindMessage && ev.Message != nil:
			msg := *ev.Message
			msg.Seq = ev.Seq
			buf.Reset()
			RenderMessage(&buf, msg, nil)
			wd.addMessage(buf.String())
			p.scan(strings.TrimSuffix(buf.String(), "\n"), Hit{Seq: ev.Seq, Source: SourceMessage, Role: roleName(string(msg.Role)), Tool: msg.ToolName, ToolCallID: msg.ToolCallID})
			if msg.ToolCallID != "" {
				callSeq[msg.ToolCallID] = ev.Seq
				// The offloaded text of this result follows its message.
				for i := 0; i < len(offloads); i++ {
					if offloads[i].ToolCallID == msg.ToolCallID {
						scanOffload(ctx, p, artifact, offloads[i], ev.Seq)
						offloads = append(offloads[:i], offloads[i+1:]...)
						i--
					}
				}
			}
		case ev.Kind == checkpoint.KindOffload:
			var r offloadRecord
			if json.Unmarshal(ev.Data, &r) != nil || r.Artifact == "" {
				return nil
			}
			if seq, ok := callSeq[r.ToolCallID]; ok {
				scanOffload(ctx, p, artifact, r, seq)
			} else {
				offloads = append(offloads, r)
			}
		}
		return ctx.Err()
	})
	if err != nil {
		return SearchResult{}, err
	}
	for _, r := range offloads {
		scanOffload(ctx, p, artifact, r, 0)
	}
	cps, err := src.Checkpoints(ctx, id)
	if err != nil {
		return SearchResult{}, err
	}
	for _, cp := range cps {
		p.scan(cp.Summary, Hit{Seq: cp.Seq, Source: SourceSummary})
	}
	// Summaries were scanned last: put every hit in seq order (stable, so
	// a message's own lines stay before its offloaded text).
	sort.SliceStable(p.hits, func(i, j int) bool { return p.hits[i].Seq < p.hits[j].Seq })
	res := SearchResult{Hits: p.hits, Total: p.total, WorkingDir: wd.dir}
	if res.Hits == nil {
		res.Hits = []Hit{}
	}
	if offset+len(p.hits) < p.total {
		res.Next = offset + len(p.hits)
	}
	return res, nil
}

func scanOffload(ctx context.Context, p *pager, artifact ArtifactFunc, r offloadRecord, seq uint64) {
	if artifact == nil {
		return
	}
	b, err := artifact(ctx, r.Artifact)
	if err != nil {
		return // a missing artifact leaves the stub, which was searched
	}
	p.scan(string(b), Hit{Seq: seq, Source: SourceOffloaded, Role: roleName("tool"), Tool: r.ToolName, ToolCallID: r.ToolCallID, Artifact: r.Artifact})
}

func roleName(r string) string {
	if r == "tool" {
		return "tool result"
	}
	return r
}

// Page is one page of Read: the rendered messages of a range.
type Page struct {
	// From and To are the range asked for (To resolved to the session's
	// newest message seq when 0).
	From uint64 `json:"from"`
	To   uint64 `json:"to"`
	// Offset is the character offset of Text in the whole rendering of
	// the range; Next is the offset of the following page, 0 when Text
	// reaches the end.
	Offset int `json:"offset"`
	Next   int `json:"next,omitempty"`
	// Text is the messages as the recall file renders them.
	Text string `json:"text"`
	// WorkingDir is as in SearchResult.
	WorkingDir string `json:"working_dir,omitempty"`
}

// Read renders session id's messages with seq from to to (0: the newest)
// as a recall file does, and returns maxChars characters (0:
// DefaultReadChars) of it from character offset. Errors: ErrInvalid
// (from, to, offset, max_chars), the source's.
func Read(ctx context.Context, src Source, id string, from, to uint64, offset, maxChars int) (Page, error) {
	if maxChars == 0 {
		maxChars = DefaultReadChars
	}
	switch {
	case maxChars < 1 || maxChars > MaxReadChars:
		return Page{}, fmt.Errorf("%w: max_chars: %d is not between 1 and %d", ErrInvalid, maxChars, MaxReadChars)
	case offset < 0:
		return Page{}, fmt.Errorf("%w: offset: %d is negative", ErrInvalid, offset)
	case to != 0 && to < from:
		return Page{}, fmt.Errorf("%w: to: %d is before from %d", ErrInvalid, to, from)
	}
	if from == 0 {
		from = 1
	}
	wd := workingDirFinder{}
	sys, err := src.SystemPrompt(ctx, id)
	if err != nil {
		return Page{}, err
	}
	wd.add(sys)
	var all bytes.Buffer
	var one bytes.Buffer
	stop := errors.New("stop")
	need := offset + maxChars + 1 // characters; bytes ≥ characters
	var last uint64
	err = src.Events(ctx, id, 1, false, func(ev checkpoint.Event) error {
		if ev.Kind != checkpoint.KindMessage || ev.Message == nil {
			return nil
		}
		if wd.n < workingDirMessages {
			one.Reset()
			RenderMessage(&one, *ev.Message, nil)
			wd.addMessage(one.String())
		}
		if ev.Seq < from {
			return nil
		}
		if to != 0 && ev.Seq > to {
			if wd.dir != "" || wd.n >= workingDirMessages {
				return stop
			}
			return nil
		}
		last = ev.Seq
		if all.Len() <= need*utf8.UTFMax {
			msg := *ev.Message
			msg.Seq = ev.Seq
			RenderMessage(&all, msg, nil)
		}
		return ctx.Err()
	})
	if err != nil && !errors.Is(err, stop) {
		return Page{}, err
	}
	if to == 0 {
		to = last
	}
	text := all.String()
	// Character offsets: skip offset runes, take maxChars.
	start := runeOffset(text, offset)
	end := start + runeOffset(text[start:], maxChars)
	p := Page{From: from, To: to, Offset: offset, Text: text[start:end], WorkingDir: wd.dir}
	if end < len(text) {
		p.Next = offset + utf8.RuneCountInString(p.Text)
	}
	return p, nil
}

// runeOffset is the byte offset of the n-th character of s (len(s) when
// s has fewer).
func runeOffset(s string, n int) int {
	i := 0
	for off := range s {
		if i == n {
			return off
		}
		i++
	}
	return len(s)
}

// Working directories as agents state them: Claude Code's system prompt
// ("Working directory: …", "Primary working directory: …"), pi's ("Current
// working directory: …"), Codex's <environment_context> item
// ("<cwd>…</cwd>").
var workingDirRes = []*regexp.Regexp{
	regexp.MustCompile(`<cwd>([^<\n]+)</cwd>`),
	regexp.MustCompile(`(?m)^\W{0,4}(?:Primary |Current )?[Ww]orking directory: *(/[^\n]*?)\s*$`),
}

// WorkingDir returns the working directory an agent's text (its system
// prompt or one of its first messages) states, "" when none.
func WorkingDir(text string) string {
	for _, re := range workingDirRes {
		if m := re.FindStringSubmatch(text); m != nil {
			return strings.TrimSpace(m[1])
		}
	}
	return ""
}

// workingDirFinder keeps the first working directory of a session's system
// prompt and first messages.
type workingDirFinder struct {
	dir string
	n   int
}

func (w *workingDirFinder) add(text string) {
	if w.dir == "" {
		w.dir = WorkingDir(text)
	}
}

func (w *workingDirFinder) addMessage(text string) {
	if w.n < workingDirMessages {
		w.n++
		w.add(text)
	}
}
