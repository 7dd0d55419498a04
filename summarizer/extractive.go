package summarizer

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/ctxd/ctxd/history"
)

// Limits of the extractive summary, in code points unless noted. They keep
// each item readable; the whole summary is then fitted to max_summary_bytes.
const (
	exFirstRequestRunes  = 2000
	exLatestRequestRunes = 2000
	exOtherRequestRunes  = 300
	exOtherRequests      = 3
	exCommandRunes       = 200
	exCommands           = 15
	exFiles              = 60
	exArtifacts          = 30
	exDecisionTexts      = 5
	exDecisionRunes      = 1200
	exErrors             = 10
	exErrorRunes         = 300
	exAfterRunes         = 200
	exThinking           = 2
	exThinkingRunes      = 1000
	exReasonLines        = 8
	exLineRunes          = 300
	exNextLines          = 8
	exCallSummaryRunes   = 160
	exQuoteLines         = 40 // a request that pastes a long output is quoted in part
)

// exFileKeys are the tool-input keys that name a file.
var exFileKeys = []string{"path", "file_path", "filePath", "filename", "notebook_path"}

// exEditorVerbs are values of an editor tool's "command" key (SWE-agent's
// str_replace_editor, Anthropic's text editor) — not shell commands.
var exEditorVerbs = map[string]string{
	"view": "read", "create": "write", "str_replace": "write", "insert": "write",
	"undo_edit": "write", "write": "write", "edit": "write",
}

var (
	exArtifactRe  = regexp.MustCompile(`artifact://[A-Za-z0-9_-]+`)
	exReasonRe    = regexp.MustCompile(`(?i)\b(because|hypothes\w*|suspect|likely|probably|ruled out|rule out|instead of|root cause|the (?:issue|problem|bug) is|turns out|caused by|doesn't work|does not work|won't work|assum\w+|so that)\b`)
	exNextRe      = regexp.MustCompile(`(?i)^\s*(?:[-*]\s*)?(?:\[ \]\s*)?(?:\d+[.)]\s*)?(?:\*\*)?(next|then|todo|remaining|still need|i'll|i will|let me|we need|need to|we should|i should|after that|finally)\b`)
	exAbandonedRe = regexp.MustCompile(`(?i)tool call abandoned`)
)

// exCall is one tool call seen in the history, with its result.
type exCall struct {
	idx     int // message index of the call
	seq     uint64
	id      string
	name    string
	input   map[string]any
	raw     json.RawMessage
	done    bool
	isError bool
	resIdx  int
	resText string
}

// exFile is one file seen in tool-call inputs.
type exFile struct {
	path         string
	reads, write int
	last         int // message index of the last call naming it
}

// ExtractiveSummary is the embedded, network-free summarizer (DESIGN.md
// §3): a deterministic, structured summary of msgs with the same section
// headings as BuiltinPrompt, at most maxBytes bytes (0 means
// DefaultMaxSummaryBytes), valid UTF-8, every cut on a code-point boundary.
// It quotes the first and the latest user requests, lists files read and
// modified and commands run (from tool-call inputs), artifact:// URIs seen,
// failed tool calls and what followed them, the latest assistant
// conclusions and reasoning, and open tool rounds. The same input always
// gives the same bytes.
func ExtractiveSummary(msgs []history.Message, maxBytes uint64) string {
	if maxBytes == 0 {
		maxBytes = DefaultMaxSummaryBytes
	}
	x := newExtraction(msgs)
	sections := []exSection{
		{HeadingGoal, x.goal(), 3},
		{HeadingState, x.state(), 1.5},
		{HeadingFiles, x.files(), 2.5},
		{HeadingDecisions, x.decisions(), 2},
		{HeadingErrors, x.errorsAndFixes(), 1.5},
		{HeadingReasoning, x.reasoning(), 1.5},
		{HeadingNextSteps, x.nextSteps(), 1},
	}
	title := fmt.Sprintf("# Checkpoint summary (extractive, %d messages%s)\n\n", len(msgs), x.seqRange())
	return fitSections(title, sections, maxBytes)
}

// extraction is what ExtractiveSummary gathers in one pass over msgs.
type extraction struct {
	msgs       []history.Message
	users      []int // indexes of user messages with text
	assistants []int // indexes of assistant messages with text
	thinking   []string
	calls      []*exCall
	byID       map[string]*exCall
	fileMap    map[string]*exFile
	commands   []string
	nCommands  int
	artifacts  []string
	seenArt    map[string]bool
	toolCount  map[string]int
	prevGoal   string // Goal of an earlier checkpoint summary, if the history starts with one
	prev       string // that whole summary
	hasPrev    bool
	abandoned  int
}

func newExtraction(msgs []history.Message) *extraction {
	x := &extraction{msgs: msgs, byID: map[string]*exCall{}, fileMap: map[string]*exFile{},
		seenArt: map[string]bool{}, toolCount: map[string]int{}}
	for i := range msgs {
		m := &msgs[i]
		for _, b := range m.Content {
			x.scanArtifacts(b.Text)
			x.scanArtifacts(string(b.Input))
			x.scanArtifacts(string(b.JSON))
			x.scanArtifacts(b.Artifact)
		}
		switch m.Role {
		case history.RoleUser:
			if t := strings.TrimSpace(messageText(m)); t != "" {
				if len(x.users) == 0 && !x.hasPrev && isSummary(t) {
					x.hasPrev = true
					x.prev = t
					x.prevGoal = sectionBody(t, HeadingGoal)
					continue
				}
				x.users = append(x.users, i)
			}
		case history.RoleAssistant:
			if strings.TrimSpace(messageText(m)) != "" {
				x.assistants = append(x.assistants, i)
			}
			for _, b := range m.Content {
				switch b.Type {
				case history.BlockThinking:
					if strings.TrimSpace(b.Text) != "" {
						x.thinking = append(x.thinking, b.Text)
					}
				case history.BlockToolCall:
					x.addCall(i, m.Seq, b)
				}
			}
		case history.RoleTool:
			text := toolText(m)
			if exAbandonedRe.MatchString(text) {
				x.abandoned++
			}
			if c, ok := x.byID[m.ToolCallID]; ok && !c.done {
				c.done, c.isError, c.resIdx, c.resText = true, m.IsError, i, text
			}
		}
	}
	return x
}

// addCall records a tool call and what its input says about files and
// commands.
func (x *extraction) addCall(i int, seq uint64, b history.Block) {
	c := &exCall{idx: i, seq: seq, id: b.ID, name: b.Name, raw: b.Input}
	_ = json.Unmarshal(b.Input, &c.input)
	x.calls = append(x.calls, c)
	if b.ID != "" {
		x.byID[b.ID] = c
	}
	x.toolCount[b.Name]++

	verb, _ := c.input["command"].(string)
	editorOp, isEditor := exEditorVerbs[verb]
	for _, k := range exFileKeys {
		p, ok := c.input[k].(string)
		if !ok || strings.TrimSpace(p) == "" || strings.HasPrefix(p, "artifact://") {
			continue
		}
		f := x.fileMap[p]
		if f == nil {
			f = &exFile{path: p}
			x.fileMap[p] = f
		}
		f.last = i
		op := toolOp(b.Name)
		if isEditor {
			op = editorOp
		}
		if op == "write" {
			f.write++
		} else {
			f.reads++
		}
		break
	}
	if !isEditor {
		if cmd := commandOf(c.input); cmd != "" {
			x.nCommands++
			if n := len(x.commands); n == 0 || x.commands[n-1] != cmd {
				x.commands = append(x.commands, cmd)
			}
		}
	}
}

func (x *extraction) scanArtifacts(s string) {
	if !strings.Contains(s, "artifact://") {
		return
	}
	for _, u := range exArtifactRe.FindAllString(s, -1) {
		if !x.seenArt[u] {
			x.seenArt[u] = true
			x.artifacts = append(x.artifacts, u)
		}
	}
}

func (x *extraction) seqRange() string {
	var first, last uint64
	for _, m := range x.msgs {
		if m.Seq == 0 {
			continue
		}
		if first == 0 {
			first = m.Seq
		}
		last = m.Seq
	}
	if first == 0 {
		return ""
	}
	return fmt.Sprintf(", seq %d–%d", first, last)
}

func (x *extraction) goal() string {
	var b strings.Builder
	users := x.users
	if x.hasPrev {
		// The session's first request survives every compaction, quoted
		// once: an earlier summary's own first request is carried, never
		// nested under another label.
		if orig := originalRequest(x.prevGoal); orig != "" {
			fmt.Fprintf(&b, "%s:\n%s\n", exOriginalRequest, orig)
		} else if x.prevGoal != "" {
			fmt.Fprintf(&b, "%s:\n%s\n", exOriginalRequest, quote(truncLines(truncRunes(x.prevGoal, exFirstRequestRunes), exQuoteLines)))
		}
	}
	if len(users) == 0 {
		if b.Len() == 0 {
			b.WriteString("No user request in the summarized messages.\n")
		}
		return b.String()
	}
	if !x.hasPrev {
		first := users[0]
		fmt.Fprintf(&b, "%s%s:\n%s\n", exOriginalRequest, x.at(first), quote(truncLines(truncRunes(messageText(&x.msgs[first]), exFirstRequestRunes), exQuoteLines)))
	} else {
		// Every request here came after the earlier checkpoint.
		users = append([]int{-1}, users...)
	}
	if n := len(users); n > 1 {
		between := users[1 : n-1]
		if len(between) > 0 {
			fmt.Fprintf(&b, "\nLater requests (%d in between", len(between))
			if len(between) > exOtherRequests {
				fmt.Fprintf(&b, ", last %d shown", exOtherRequests)
				between = between[len(between)-exOtherRequests:]
			}
			b.WriteString("):\n")
			for _, i := range between {
				fmt.Fprintf(&b, "- %s%s\n", oneLine(truncRunes(messageText(&x.msgs[i]), exOtherRequestRunes)), x.at(i))
			}
		}
		last := users[n-1]
		fmt.Fprintf(&b, "\nLatest request%s:\n%s\n", x.at(last), quote(truncLines(truncRunes(messageText(&x.msgs[last]), exLatestRequestRunes), exQuoteLines)))
	}
	return b.String()
}

func (x *extraction) state() string {
	var b strings.Builder
	failed := 0
	for _, c := range x.calls {
		if c.isError {
			failed++
		}
	}
	fmt.Fprintf(&b, "- Messages: %d (%d user requests, %d assistant messages with text, %d tool calls, %d failed).\n",
		len(x.msgs), len(x.users), len(x.assistants), len(x.calls), failed)
	if x.hasPrev {
		b.WriteString("- Continues from an earlier checkpoint summary.\n")
	}
	if len(x.toolCount) > 0 {
		names := make([]string, 0, len(x.toolCount))
		for n := range x.toolCount {
			names = append(names, n)
		}
		sort.Slice(names, func(i, j int) bool {
			if x.toolCount[names[i]] != x.toolCount[names[j]] {
				return x.toolCount[names[i]] > x.toolCount[names[j]]
			}
			return names[i] < names[j]
		})
		parts := make([]string, len(names))
		for i, n := range names {
			parts[i] = fmt.Sprintf("%s ×%d", n, x.toolCount[n])
		}
		fmt.Fprintf(&b, "- Tools used: %s.\n", strings.Join(parts, ", "))
	}
	if n := len(x.calls); n > 0 {
		c := x.calls[n-1]
		status := "no result recorded"
		if c.done && c.isError {
			status = "failed"
		} else if c.done {
			status = "succeeded"
		}
		fmt.Fprintf(&b, "- Last tool call%s: %s — %s.\n", x.at(c.idx), callSummary(c), status)
	}
	if n := len(x.assistants); n > 0 {
		i := x.assistants[n-1]
		fmt.Fprintf(&b, "- Last assistant message%s: %s\n", x.at(i), oneLine(truncRunes(messageText(&x.msgs[i]), exLineRunes)))
	}
	if x.abandoned > 0 {
		fmt.Fprintf(&b, "- Abandoned tool calls (interrupted, no result): %d.\n", x.abandoned)
	}
	open := x.openCalls()
	if len(open) == 0 {
		b.WriteString("- Open tool rounds: none.\n")
	} else {
		fmt.Fprintf(&b, "- Open tool rounds: %d call(s) without a result:\n", len(open))
		for _, c := range open {
			fmt.Fprintf(&b, "  - %s [%s]%s\n", callSummary(c), c.id, x.at(c.idx))
		}
	}
	return b.String()
}

func (x *extraction) openCalls() []*exCall {
	var open []*exCall
	for _, c := range x.calls {
		if !c.done {
			open = append(open, c)
		}
	}
	return open
}

func (x *extraction) files() string {
	var b strings.Builder
	var modified, read []*exFile
	for _, f := range x.fileMap {
		if f.write > 0 {
			modified = append(modified, f)
		} else {
			read = append(read, f)
		}
	}
	byRecent := func(fs []*exFile) {
		sort.Slice(fs, func(i, j int) bool {
			if fs[i].last != fs[j].last {
				return fs[i].last > fs[j].last
			}
			return fs[i].path < fs[j].path
		})
	}
	byRecent(modified)
	byRecent(read)
	list := func(title string, fs []*exFile, counts func(*exFile) string) {
		if len(fs) == 0 {
			return
		}
		fmt.Fprintf(&b, "%s (%d, most recent first):\n", title, len(fs))
		for i, f := range fs {
			if i == exFiles {
				fmt.Fprintf(&b, "- … %d more\n", len(fs)-exFiles)
				break
			}
			fmt.Fprintf(&b, "- %s%s\n", f.path, counts(f))
		}
		b.WriteString("\n")
	}
	list("Modified", modified, func(f *exFile) string {
		s := fmt.Sprintf(" (writes ×%d", f.write)
		if f.reads > 0 {
			s += fmt.Sprintf(", reads ×%d", f.reads)
		}
		return s + ")"
	})
	list("Read", read, func(f *exFile) string {
		if f.reads > 1 {
			return fmt.Sprintf(" (×%d)", f.reads)
		}
		return ""
	})
	if len(x.commands) > 0 {
		cmds := x.commands
		fmt.Fprintf(&b, "Commands run (%d", x.nCommands)
		if len(cmds) > exCommands {
			fmt.Fprintf(&b, ", last %d", exCommands)
			cmds = cmds[len(cmds)-exCommands:]
		}
		b.WriteString(", oldest first):\n")
		for _, c := range cmds {
			fmt.Fprintf(&b, "- `%s`\n", c)
		}
		b.WriteString("\n")
	}
	if len(x.artifacts) > 0 {
		arts := x.artifacts
		fmt.Fprintf(&b, "Artifacts referenced (%d", len(arts))
		if len(arts) > exArtifacts {
			fmt.Fprintf(&b, ", last %d", exArtifacts)
			arts = arts[len(arts)-exArtifacts:]
		}
		b.WriteString("):\n")
		for _, a := range arts {
			fmt.Fprintf(&b, "- %s\n", a)
		}
	}
	earlier := x.carried(HeadingFiles, exCarriedRunes, exNoFiles)
	if b.Len() == 0 {
		return exNoFiles + "\n" + earlier
	}
	return strings.TrimRight(b.String(), "\n") + "\n" + earlier
}

func (x *extraction) decisions() string {
	// The latest substantive assistant texts: a short "Let me check." says
	// nothing worth carrying, the very last message always counts.
	var picked []int
	for k := len(x.assistants) - 1; k >= 0 && len(picked) < exDecisionTexts; k-- {
		i := x.assistants[k]
		if k == len(x.assistants)-1 || len(strings.TrimSpace(messageText(&x.msgs[i]))) >= 80 {
			picked = append(picked, i)
		}
	}
	if len(picked) == 0 {
		return "No assistant conclusions in the summarized messages.\n"
	}
	var b strings.Builder
	b.WriteString("Latest assistant conclusions (oldest first):\n")
	for k := len(picked) - 1; k >= 0; k-- {
		i := picked[k]
		fmt.Fprintf(&b, "\nAssistant%s:\n%s\n", x.at(i), quote(truncRunes(messageText(&x.msgs[i]), exDecisionRunes)))
	}
	return b.String()
}

func (x *extraction) errorsAndFixes() string {
	var failed []*exCall
	for _, c := range x.calls {
		if c.isError {
			failed = append(failed, c)
		}
	}
	earlier := x.carried(HeadingErrors, exCarriedRunes, exNoFailures, exNoFailuresSince)
	if len(failed) == 0 && x.abandoned == 0 {
		if x.hasPrev {
			return exNoFailuresSince + "\n" + earlier
		}
		return exNoFailures + "\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Failed tool calls: %d of %d", len(failed), len(x.calls))
	if len(failed) > exErrors {
		fmt.Fprintf(&b, " (last %d shown)", exErrors)
		failed = failed[len(failed)-exErrors:]
	}
	b.WriteString(".\n")
	for _, c := range failed {
		fmt.Fprintf(&b, "- %s%s: %s\n", callSummary(c), x.at(c.resIdx), oneLine(truncRunes(firstLines(c.resText, 3), exErrorRunes)))
		if after := x.after(c); after != "" {
			fmt.Fprintf(&b, "  - after: %s\n", after)
		}
	}
	return b.String() + earlier
}

// after says what followed a failed call: the next call of the same tool
// and its outcome, and the assistant's next words.
func (x *extraction) after(failed *exCall) string {
	var parts []string
	for _, c := range x.calls {
		if c.idx <= failed.idx || c.name != failed.name {
			continue
		}
		outcome := "no result"
		switch {
		case c.done && c.isError:
			outcome = "failed again"
		case c.done:
			outcome = "succeeded"
		}
		parts = append(parts, fmt.Sprintf("next %s call%s %s", c.name, x.at(c.idx), outcome))
		break
	}
	for _, i := range x.assistants {
		if i > failed.resIdx {
			parts = append(parts, fmt.Sprintf("the assistant said%s: %q", x.at(i), oneLine(truncRunes(messageText(&x.msgs[i]), exAfterRunes))))
			break
		}
	}
	return strings.Join(parts, "; ")
}

func (x *extraction) reasoning() string {
	var b strings.Builder
	if n := len(x.thinking); n > 0 {
		th := x.thinking[max(0, n-exThinking):]
		b.WriteString("Latest thinking (oldest first):\n")
		for _, t := range th {
			b.WriteString(quote(truncRunes(strings.TrimSpace(t), exThinkingRunes)))
			b.WriteString("\n\n")
		}
	}
	// Reasoning lines of the recent assistant texts, oldest first.
	var lines []string
	seen := map[string]bool{}
	for k := len(x.assistants) - 1; k >= 0 && len(lines) < exReasonLines; k-- {
		text := messageText(&x.msgs[x.assistants[k]])
		ls := strings.Split(text, "\n")
		var found []string
		for _, l := range ls {
			l = strings.TrimSpace(l)
			if len(l) < 20 || !exReasonRe.MatchString(l) {
				continue
			}
			l = truncRunes(l, exLineRunes)
			if !seen[l] {
				seen[l] = true
				found = append(found, l)
			}
		}
		for j := len(found) - 1; j >= 0 && len(lines) < exReasonLines; j-- {
			lines = append(lines, found[j])
		}
	}
	if len(lines) > 0 {
		b.WriteString("Reasoning from the latest assistant messages (oldest first):\n")
		for j := len(lines) - 1; j >= 0; j-- {
			fmt.Fprintf(&b, "- %s\n", lines[j])
		}
	}
	if b.Len() == 0 {
		return "No reasoning recorded in the summarized messages.\n"
	}
	return strings.TrimRight(b.String(), "\n") + "\n"
}

func (x *extraction) nextSteps() string {
	var b strings.Builder
	lastUser, lastAsst := -1, -1
	if n := len(x.users); n > 0 {
		lastUser = x.users[n-1]
	}
	if n := len(x.assistants); n > 0 {
		lastAsst = x.assistants[n-1]
	}
	if lastUser > lastAsst && lastUser >= 0 {
		fmt.Fprintf(&b, "- Answer the latest user request%s (quoted under Goal).\n", x.at(lastUser))
	}
	if open := x.openCalls(); len(open) > 0 {
		fmt.Fprintf(&b, "- %d tool call(s) have no result (see State): re-run them or treat them as abandoned.\n", len(open))
	}
	if n := len(x.calls); n > 0 && x.calls[n-1].isError {
		fmt.Fprintf(&b, "- The last tool call failed: %s — fix the cause before going on.\n", callSummary(x.calls[n-1]))
	}
	var plan []string
	for k := len(x.assistants) - 1; k >= 0 && k >= len(x.assistants)-3; k-- {
		var found []string
		for _, l := range strings.Split(messageText(&x.msgs[x.assistants[k]]), "\n") {
			if exNextRe.MatchString(l) {
				found = append(found, truncRunes(strings.TrimSpace(l), exLineRunes))
			}
		}
		if len(found) > 0 {
			plan = found
			break
		}
	}
	if len(plan) > exNextLines {
		plan = plan[:exNextLines]
	}
	if len(plan) > 0 {
		b.WriteString("- Planned in the latest assistant message that states a plan:\n")
		for _, l := range plan {
			fmt.Fprintf(&b, "  - %s\n", strings.TrimLeft(l, "-* "))
		}
	}
	if b.Len() == 0 {
		b.WriteString("- Continue from the latest request and the last assistant message above.\n")
	}
	return b.String()
}

// at names a message's position: " (seq N)" when stored, else its index.
func (x *extraction) at(i int) string {
	if i < 0 || i >= len(x.msgs) {
		return ""
	}
	if s := x.msgs[i].Seq; s != 0 {
		return fmt.Sprintf(" (seq %d)", s)
	}
	return fmt.Sprintf(" (message %d)", i+1)
}

// exSection is one section of the extractive summary and its share weight.
type exSection struct {
	heading string
	body    string
	weight  float64
}

// fitSections joins the sections under title and fits the whole into
// maxBytes: sections shorter than their weighted share keep everything and
// leave the rest to the others; longer ones are cut (at a line end when
// one is near, else on a code-point boundary) with a visible marker.
func fitSections(title string, secs []exSection, maxBytes uint64) string {
	fixed := len(title)
	for _, s := range secs {
		fixed += len(s.heading) + 3 // "\n" after the heading, "\n\n" after the body
	}
	full := func(bodies []string) string {
		var b strings.Builder
		b.WriteString(title)
		for i, s := range secs {
			b.WriteString(s.heading)
			b.WriteString("\n")
			b.WriteString(strings.TrimRight(bodies[i], "\n"))
			b.WriteString("\n\n")
		}
		return strings.TrimRight(b.String(), "\n") + "\n"
	}
	bodies := make([]string, len(secs))
	total := fixed
	for i, s := range secs {
		bodies[i] = strings.TrimRight(s.body, "\n")
		total += len(bodies[i])
	}
	if uint64(total) <= maxBytes {
		return full(bodies)
	}
	if uint64(fixed) >= maxBytes {
		return truncateBytes(full(make([]string, len(secs))), int(maxBytes))
	}
	// Water-filling: repeat until every unsatisfied section has its share.
	avail := int(maxBytes) - fixed
	alloc := make([]int, len(secs))
	done := make([]bool, len(secs))
	for {
		var w float64
		for i, s := range secs {
			if !done[i] {
				w += s.weight
			}
		}
		if w == 0 {
			break
		}
		changed := false
		for i, s := range secs {
			if done[i] {
				continue
			}
			share := int(float64(avail) * s.weight / w)
			if len(bodies[i]) <= share {
				alloc[i], done[i], changed = len(bodies[i]), true, true
				avail -= len(bodies[i])
			}
		}
		if !changed {
			for i, s := range secs {
				if !done[i] {
					alloc[i] = int(float64(avail) * s.weight / w)
				}
			}
			break
		}
	}
	for i := range bodies {
		bodies[i] = cutBody(bodies[i], alloc[i])
	}
	out := full(bodies)
	if uint64(len(out)) > maxBytes { // rounding; never exceed the hard limit
		out = truncateBytes(out, int(maxBytes))
	}
	return out
}

// cutMarker ends a section that was cut to fit.
const cutMarker = "\n[… cut to fit max_summary_bytes]"

// cutBody cuts s to at most n bytes, ending with cutMarker when it cuts.
func cutBody(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n < len(cutMarker)+16 {
		return truncateBytes(s, n)
	}
	limit := n - len(cutMarker)
	cut := strings.LastIndexByte(s[:limit], '\n')
	if cut < limit/2 {
		cut = len(truncateBytes(s, limit))
	}
	return s[:cut] + cutMarker
}

// messageText joins the text blocks of m with blank lines.
func messageText(m *history.Message) string {
	var parts []string
	for _, b := range m.Content {
		if (b.Type == history.BlockText || b.Type == history.BlockCompaction) && strings.TrimSpace(b.Text) != "" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n\n")
}

// toolText is a tool result's text: text blocks, and json blocks as JSON.
func toolText(m *history.Message) string {
	var parts []string
	for _, b := range m.Content {
		switch b.Type {
		case history.BlockText:
			parts = append(parts, b.Text)
		case history.BlockJSON:
			parts = append(parts, string(b.JSON))
		}
	}
	return strings.Join(parts, "\n")
}

// exOriginalRequest labels the session's first request in the Goal section.
const exOriginalRequest = "First request"

// Errors-section lines when nothing failed; exCarriedRunes bounds what a
// section carries over from an earlier summary, in runes, so repeated
// compactions cannot grow it.
const (
	exNoFailures      = "No failed tool calls."
	exNoFailuresSince = "No failed tool calls since the earlier checkpoint."
	exCarriedRunes    = 1500
	exNoFiles         = "No files, commands or artifacts in tool-call inputs."
)

// exEarlier introduces what a section carries over from an earlier
// checkpoint summary.
const exEarlier = "Before the earlier checkpoint:"

// originalRequest returns the quoted first request of an earlier summary's
// Goal section ("First request…:" followed by "> " lines), or "".
func originalRequest(goal string) string {
	lines := strings.Split(goal, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, exOriginalRequest) {
			continue
		}
		var out []string
		for _, q := range lines[i+1:] {
			if !strings.HasPrefix(q, ">") {
				break
			}
			out = append(out, q)
		}
		return strings.Join(out, "\n")
	}
	return ""
}

// carried returns the body of section heading of the earlier summary, for
// appending to this summary's section: its labels and empty markers dropped
// (so nothing nests across compactions), at most n runes.
func (x *extraction) carried(heading string, n int, empty ...string) string {
	if !x.hasPrev {
		return ""
	}
	var keep []string
	for _, l := range strings.Split(sectionBody(x.prev, heading), "\n") {
		t := strings.TrimSpace(l)
		if t == exEarlier || slices.Contains(empty, t) {
			continue
		}
		if t == "" && (len(keep) == 0 || keep[len(keep)-1] == "") {
			continue
		}
		keep = append(keep, l)
	}
	body := strings.TrimSpace(strings.Join(keep, "\n"))
	if body == "" {
		return ""
	}
	return "\n" + exEarlier + "\n" + truncLines(truncRunes(body, n), 40) + "\n"
}

// isSummary reports whether a user message is an earlier checkpoint
// summary: it carries the summary headings.
func isSummary(t string) bool {
	return strings.Contains(t, HeadingGoal+"\n") && strings.Contains(t, HeadingNextSteps+"\n")
}

// sectionBody returns the body of the section under heading in a summary.
func sectionBody(t, heading string) string {
	i := strings.Index(t, heading+"\n")
	if i < 0 {
		return ""
	}
	rest := t[i+len(heading)+1:]
	if j := strings.Index(rest, "\n## "); j >= 0 {
		rest = rest[:j]
	}
	return strings.TrimSpace(rest)
}

// toolOp classifies a tool by its name: "write" for tools that change
// files, "read" otherwise.
func toolOp(name string) string {
	n := strings.ToLower(name)
	for _, w := range []string{"write", "edit", "create", "patch", "replace", "insert", "delete", "remove", "move", "rename", "apply"} {
		if strings.Contains(n, w) {
			return "write"
		}
	}
	return "read"
}

// commandOf returns the shell command of a tool input (command or cmd, a
// string or an argv list), on one line and bounded.
func commandOf(in map[string]any) string {
	for _, k := range []string{"command", "cmd"} {
		switch v := in[k].(type) {
		case string:
			if strings.TrimSpace(v) != "" {
				return oneLine(truncRunes(strings.TrimSpace(v), exCommandRunes))
			}
		case []any:
			var parts []string
			for _, p := range v {
				if s, ok := p.(string); ok {
					parts = append(parts, s)
				}
			}
			if len(parts) > 0 {
				return oneLine(truncRunes(strings.Join(parts, " "), exCommandRunes))
			}
		}
	}
	return ""
}

// callSummary renders a call as name(key=value) with its most telling
// input, bounded.
func callSummary(c *exCall) string {
	for _, k := range []string{"path", "file_path", "filePath", "filename", "command", "cmd", "pattern", "query", "url"} {
		switch v := c.input[k].(type) {
		case string:
			return fmt.Sprintf("%s(%s=%s)", c.name, k, oneLine(truncRunes(v, exCallSummaryRunes)))
		case []any:
			raw, _ := json.Marshal(v)
			return fmt.Sprintf("%s(%s=%s)", c.name, k, oneLine(truncRunes(string(raw), exCallSummaryRunes)))
		}
	}
	if len(c.raw) == 0 {
		return c.name + "()"
	}
	return fmt.Sprintf("%s(%s)", c.name, oneLine(truncRunes(string(c.raw), exCallSummaryRunes)))
}

// truncRunes cuts s to n code points, ending with "…" when it cuts.
func truncRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i, k := 0, 0
	for i < len(s) && k < n {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
		k++
	}
	return s[:i] + "…"
}

// truncLines keeps the first n lines of s, ending with a line "…" when it
// cuts.
func truncLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) <= n {
		return s
	}
	return strings.Join(lines[:n], "\n") + "\n…"
}

// oneLine folds whitespace runs (newlines included) into single spaces.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// firstLines returns the first n non-empty lines of s.
func firstLines(s string, n int) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		out = append(out, l)
		if len(out) == n {
			break
		}
	}
	return strings.Join(out, "\n")
}

// quote renders text as a Markdown block quote.
func quote(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight("> "+l, " ")
	}
	return strings.Join(lines, "\n")
}
