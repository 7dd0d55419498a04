package summarizer

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Holding over many compactions (docs/design.md §5.3). The history of a
// second compaction starts with the first one's summary; carriedItems
// keeps that summary's entries as items of lower priority than what
// happened since, so a tight budget may drop them. A fact the earlier
// summary kept must never shrink to nothing: after fitting, every line of
// the earlier summary whose names (backticked spans, paths, identifiers,
// quoted text) the new summary no longer holds is carried verbatim under
// HeadingCarried, within the same byte budget (the sections are fitted
// again to leave it room). The next compaction treats that section like
// any other part of the earlier summary, so a line stays carried until
// its names are back in the sections, however many compactions follow.

// HeadingCarried is the section of an extractive summary holding the lines
// of the earlier summary whose facts the other sections no longer hold.
const HeadingCarried = "## Carried from earlier summaries"

// HeadingFullHistory opens the paragraph ctxd appends to every summary
// naming its recall file (docs/design.md §5.6); an earlier summary's is
// never carried (the new summary gets its own).
const HeadingFullHistory = "## Full history"

// exNamesLabel opens the line of HeadingCarried listing, space-separated,
// the names of earlier lines that did not fit.
const exNamesLabel = "- Names from earlier summaries:"

// exCarriedShare is the most of the budget, in percent, the carried lines
// take; exCarriedLineRunes the longest carried line.
const (
	exCarriedShare     = 40
	exCarriedLineRunes = 400
	exCarriedHeadRunes = 120
)

var (
	exTermBacktickRe = regexp.MustCompile("`[^`\n]{2,}`")
	exTermQuoteRe    = regexp.MustCompile(`"[^"\n]{4,}"`)
	exTermPathRe     = regexp.MustCompile(`[\w.@~-]*/[\w./@~-]*\w|\b[\w-]+\.(?:go|ts|tsx|js|jsx|mjs|py|rs|java|kt|c|h|cc|cpp|hpp|rb|php|cs|swift|md|json|toml|ya?ml|txt|sh|sql|html|css|lock|mod|sum)\b`)
	exTermIdentRe    = regexp.MustCompile(`\b(?:[a-z]+[A-Z][A-Za-z0-9]*|[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*|[A-Za-z][A-Za-z0-9]*_[A-Za-z0-9_]+|[A-Za-z]+[0-9]+[A-Za-z0-9]*)\b`)
	exFailedTextRe   = regexp.MustCompile(`failed(?: ×\d+)?: (.{8,})`)
	exSeqRefRe       = regexp.MustCompile(`\s*\((?:seq|seqs) [0-9, –-]+\)`)
)

// lineTerms returns the names a summary line states: what a later summary
// must still hold for the line's fact to count as kept.
func lineTerms(l string) []string {
	var out []string
	// An error's message and a fix's change are facts in themselves, not
	// only the names in them.
	if m := exFailedTextRe.FindStringSubmatch(l); m != nil {
		out = append(out, truncRunes(strings.TrimSpace(m[1]), 50))
	}
	if rest, ok := strings.CutPrefix(l, "- fixed: "); ok {
		out = append(out, truncRunes(exSeqRefRe.ReplaceAllString(rest, ""), 50))
	}
	// So is a command's outcome ("→ 410 tests, 0 failures").
	if _, res, ok := strings.Cut(l, ") → "); ok && strings.HasPrefix(l, "- `") {
		if res = strings.TrimSpace(res); len(res) >= 4 {
			out = append(out, headRunes(res, 50))
		}
	}
	for _, re := range []*regexp.Regexp{exTermBacktickRe, exTermQuoteRe, exTermPathRe, exTermIdentRe} {
		for _, m := range re.FindAllString(l, -1) {
			m = strings.Trim(m, "`\"")
			if len(m) >= 3 {
				out = append(out, m)
			}
		}
	}
	return out
}

// exPrevLine is a line of an earlier summary and the priority of its
// section when carried (lower first).
type exPrevLine struct {
	text string
	prio int
	// missing are the names of the line the new summary lacks.
	missing []string
	// names marks an earlier exNamesLabel line: its missing names join
	// the new one.
	names bool
}

// exCarryPrio orders the sections of an earlier summary when its lines
// are carried: what was already carried (it survived a compaction as a
// fact the sections had dropped), errors, decisions, files and next steps
// before reasoning, the goal (the engine carries the first and the current
// request beside every summary, docs/design.md §5.2) and state.
var exCarryPrio = map[string]int{
	HeadingCarried: 0, HeadingErrors: 1, HeadingDecisions: 2, HeadingFiles: 3,
	HeadingNextSteps: 4, HeadingReasoning: 5, HeadingGoal: 6, HeadingState: 7,
}

// prevLines returns the lines of an earlier summary that state facts: the
// entries of its sections (not headings, labels, counts or markers), in
// order, without the Full history paragraph.
func prevLines(prev string) []exPrevLine {
	if i := strings.Index(prev, "\n"+HeadingFullHistory+"\n"); i >= 0 {
		prev = prev[:i]
	}
	if i := strings.Index(prev, "\n## "); i >= 0 {
		prev = prev[i+1:] // from the first section on: no title, no preamble
	}
	var out []exPrevLine
	prio := len(exCarryPrio)
	// head: the line before opens an entry of the goal (a request, task
	// material the agent opened), whose first quoted line is its title.
	head := false
	for l := range strings.SplitSeq(prev, "\n") {
		t := strings.TrimSpace(l)
		title := head && strings.HasPrefix(t, ">")
		head = prio == exCarryPrio[HeadingGoal] && strings.HasSuffix(t, ":") && !strings.HasPrefix(t, ">")
		switch {
		case title:
			// The task as stated (an issue's title, the request's first
			// line): a fact in its words, carried with the decisions, as
			// an entry (a carried quote is reasoning).
			out = append(out, exPrevLine{text: "- " + strings.TrimSpace(strings.TrimPrefix(t, ">")), prio: exCarryPrio[HeadingDecisions]})
		case strings.HasPrefix(t, "## "):
			p, ok := exCarryPrio[t]
			if !ok {
				p = len(exCarryPrio)
			}
			prio = p
		case t == "", strings.HasPrefix(t, "#"), t == exCutMarker, t == "[…]", t == "—":
		case strings.HasPrefix(t, "- Messages:"), strings.HasPrefix(t, "- Continues from"), strings.HasPrefix(t, "- Open tool rounds"),
			strings.HasPrefix(t, "- Tools used:"), strings.HasPrefix(t, "- Failed tool calls:"), strings.HasPrefix(t, "Failed tool calls:"),
			strings.HasPrefix(t, "- The last tool call failed:"):
			// counts, and the earlier state's own next step: the errors
			// section carries the failure itself
		case strings.HasPrefix(t, "No ") && strings.HasSuffix(t, "."):
		case strings.HasSuffix(t, ":") && !strings.HasPrefix(t, "-") && !strings.HasPrefix(t, ">"):
			// a group label
		case strings.HasPrefix(t, ">") && prio == exCarryPrio[HeadingCarried]:
			// A quote carried before (reasoning, a message): its names
			// matter, its wording least.
			out = append(out, exPrevLine{text: t, prio: exCarryPrio[HeadingReasoning]})
		case strings.HasPrefix(t, "- `") && prio > exCarryPrio[HeadingDecisions]:
			// A command worth re-running (a commit, a close): with the
			// decisions, before the files' details.
			out = append(out, exPrevLine{text: t, prio: exCarryPrio[HeadingDecisions]})
		default:
			out = append(out, exPrevLine{text: t, prio: prio})
		}
	}
	return out
}

// exWroteRe finds the snippets of written text a file line quotes: the
// names the edit added stay, the snippet goes when the line is carried.
var exWroteRe = regexp.MustCompile("; wrote `[^`]*`(?:…)?(?:; wrote `[^`]*`(?:…)?)*")

// lostLines returns the lines of the earlier summary prev whose facts
// summary no longer holds, in carrying order: a line with names is lost
// when one of them is missing; a line without names when its text (seq
// references aside) is.
func lostLines(prev, summary string) []exPrevLine {
	var lost []exPrevLine
	seen := map[string]bool{}
	for _, pl := range prevLines(prev) {
		l := exWroteRe.ReplaceAllString(pl.text, "")
		if seen[l] {
			continue
		}
		seen[l] = true
		if rest, ok := strings.CutPrefix(l, exNamesLabel); ok {
			var missing []string
			for _, n := range splitNames(rest) {
				if !strings.Contains(summary, strings.Trim(n, "`")) {
					missing = append(missing, n)
				}
			}
			if len(missing) > 0 {
				lost = append(lost, exPrevLine{prio: -1, missing: missing, names: true})
			}
			continue
		}
		terms := lineTerms(l)
		kept := true
		if len(terms) == 0 {
			// A line without names is a fact of its own only where
			// sentences are facts: decisions, errors, what was carried
			// before.
			core := strings.TrimSpace(strings.TrimLeft(exSeqRefRe.ReplaceAllString(l, ""), "->* "))
			kept = len(core) < 30 || pl.prio > exCarryPrio[HeadingDecisions] || strings.Contains(summary, headRunes(core, 60))
		}
		var missing []string
		for _, term := range terms {
			if !strings.Contains(summary, term) {
				kept = false
				missing = append(missing, term)
			}
		}
		if !kept {
			lost = append(lost, exPrevLine{text: compactLine(l, terms, summary), prio: pl.prio, missing: missing})
		}
	}
	sort.SliceStable(lost, func(i, j int) bool { return lost[i].prio < lost[j].prio })
	return lost
}

// headRunes is the first n runes of s, without the "…" a cut text ends
// with: what a later summary holding the same text holds too.
func headRunes(s string, n int) string {
	return strings.TrimSuffix(truncRunes(s, n), "…")
}

// compactLine is a lost line as carried: whole when short, else its head
// and then every name of it the summary lacks that the head does not hold,
// so a long line (a file with the names its edits added) keeps its facts
// in a fraction of its bytes.
func compactLine(l string, terms []string, summary string) string {
	if len([]rune(l)) <= exCarriedHeadRunes+40 {
		return l
	}
	head := wordHead(l, exCarriedHeadRunes)
	var missing []string
	seen := map[string]bool{}
	for _, t := range terms {
		if !seen[t] && !strings.Contains(summary, t) && !strings.Contains(head, t) {
			seen[t] = true
			missing = append(missing, t)
		}
	}
	if len(missing) == 0 {
		return head
	}
	return head + " " + strings.Join(missing, " ")
}

// wordHead is at most n runes of s, cut after its last whole word (a cut
// name would be a name no summary holds), with "…".
func wordHead(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	h := string(r[:n])
	if i := strings.LastIndex(h, " "); i > 0 {
		h = h[:i]
	}
	return h + " …"
}

// carriedSection renders lost lines under HeadingCarried in at most max
// bytes. Names come first: every name a lost line states (a path by its
// file name, an identifier, the head of a command or an error message) is
// listed on one line closing the section, so a name the earlier summary
// kept is never lost while the budget holds it; a lost line is carried
// whole only while the names of the lines that are not still fit beside
// it, in carrying order. When the names alone overflow max, the names of
// the lines first in carrying order are kept. "" when nothing fits.
func carriedSection(lost []exPrevLine, max int) string {
	head := "\n\n" + HeadingCarried + "\n"
	if len(lost) == 0 || max <= len(head)+len(exNamesLabel)+20 {
		return ""
	}
	// Every name, in carrying order, once.
	var names []string
	seen := map[string]bool{}
	for _, pl := range lost {
		for _, n := range carriedNames(pl) {
			if !seen[n] {
				seen[n] = true
				names = append(names, n)
			}
		}
	}
	// covered marks the names a line carried whole holds.
	covered := make([]bool, len(names))
	namesLen := func() int {
		n := 0
		for i, nm := range names {
			if !covered[i] {
				n += 1 + len(nm)
			}
		}
		if n == 0 {
			return 0
		}
		return len(exNamesLabel) + n + 1
	}
	var b strings.Builder
	b.WriteString(head)
	for _, pl := range lost {
		if pl.names {
			continue
		}
		l := pl.text
		if !strings.HasPrefix(l, "- ") && !strings.HasPrefix(l, "> ") {
			l = "- " + l
		}
		l = truncRunes(l, exCarriedLineRunes) + "\n"
		var now []int
		for i, nm := range names {
			if !covered[i] && strings.Contains(l, nm) {
				covered[i] = true
				now = append(now, i)
			}
		}
		if b.Len()+len(l)+namesLen() <= max {
			b.WriteString(l)
			continue
		}
		for _, i := range now {
			covered[i] = false
		}
	}
	line := exNamesLabel
	for i, nm := range names {
		if covered[i] || strings.Contains(b.String(), nm) {
			continue
		}
		if b.Len()+len(line)+1+len(nm)+1 > max {
			continue // a shorter name later may fit
		}
		line += " " + nm
	}
	if line != exNamesLabel {
		b.WriteString(line + "\n")
	}
	if b.Len() == len(head) {
		return ""
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// Limits of a phrase on the names line: the head of a command or an error
// message the earlier summary quoted, in words and bytes.
const (
	exPhraseWords = 4
	exPhraseBytes = 60
)

// exPathNameBytes is the longest path the names line holds whole; a longer
// one goes by its last two elements.
const exPathNameBytes = 40

// carriedNames returns the names a lost line carries on the names line: a
// path by its file name (the distinctive part, which a search of the recall
// files finds, docs/design.md §5.6), an identifier as it is, a command or
// a message by its head as a backticked phrase ("`bd close spotter-dov.1`":
// the command, not only its words) and by its distinctive words (a
// package, a flag, a path, an identifier).
func carriedNames(pl exPrevLine) []string {
	var out []string
	add := func(n string) {
		// A long path by its file and directory ("utils/config.ts": a
		// bare "config.ts" names several files).
		if len(n) > exPathNameBytes {
			t := strings.TrimSuffix(n, "/")
			if i := strings.LastIndex(t, "/"); i >= 0 && len(t)-i > 5 {
				if j := strings.LastIndex(t[:i], "/"); j >= 0 {
					i = j
				}
				n = t[i+1:]
			}
		}
		if len(n) >= 3 {
			out = append(out, n)
		}
	}
	for _, n := range pl.missing {
		if !strings.ContainsAny(n, " \t") {
			add(n)
			continue
		}
		if pl.names {
			out = append(out, n) // a phrase already
			continue
		}
		if f := strings.Fields(n); len(f) >= 2 && !strings.Contains(n, "`") {
			p := strings.Join(f[:min(len(f), exPhraseWords)], " ")
			if len(p) > exPhraseBytes {
				p = wordHead(p, exPhraseBytes)
				p = strings.TrimSuffix(p, " …")
			}
			// A fix stays a fix: "`fixed: read a.go first; then`".
			if rest, ok := strings.CutPrefix(pl.text, "- fixed: "); ok && strings.HasPrefix(exSeqRefRe.ReplaceAllString(rest, ""), strings.TrimSuffix(n, "…")) {
				p = "fixed: " + p
			}
			if strings.Contains(p, " ") {
				out = append(out, "`"+p+"`")
			}
		}
		// Code and regular expressions by the names in them
		// ("runRpcMode\|runPrintMode", "x=I(g.bgBlue(").
		for _, f := range strings.FieldsFunc(n, func(r rune) bool { return strings.ContainsRune(" \t\"'`,;:()[]{}=|\\<>!?*+&^$#%", r) }) {
			f = strings.Trim(f, ".-/")
			if len(f) >= 6 && strings.ContainsAny(f, "-_/.@") || len(lineTerms(f)) > 0 && len(f) >= 6 {
				add(f)
			}
		}
	}
	return out
}

// splitNames parses a names line's list: backticked phrases, then the
// space-separated names around them.
func splitNames(rest string) []string {
	var out []string
	for {
		i := strings.Index(rest, "`")
		if i < 0 {
			break
		}
		j := strings.Index(rest[i+1:], "`")
		if j < 0 {
			break
		}
		out = append(out, strings.Fields(rest[:i])...)
		out = append(out, rest[i:i+1+j+1])
		rest = rest[i+1+j+1:]
	}
	return append(out, strings.Fields(rest)...)
}

// withCarried returns the summary of x's items within maxBytes, followed
// by the earlier summary's lines whose facts the sections no longer hold.
func withCarried(x *extraction, title string, items []exItem, maxBytes int) string {
	s := fitItems(title, items, maxBytes)
	if !x.hasPrev {
		return s
	}
	lost := lostLines(x.prev, s)
	if len(lost) == 0 {
		return s
	}
	block := carriedSection(lost, maxBytes*exCarriedShare/100)
	if block == "" {
		return s
	}
	// Fit the sections again beside the carried lines, and carry what
	// that tighter fit dropped too, in what is left of the budget.
	s = fitItems(title, items, maxBytes-len(block))
	block = carriedSection(lostLines(x.prev, s), maxBytes-len(s))
	return s + block
}

// Limits of the names item (namesItem), and the budget below which a
// summary has it: above, the file and command lines have room for the
// same names.
const (
	exNamesBelow    = 6144
	exNamesFiles    = 25
	exNamesIdents   = 30
	exNamesCommands = 3
)

// namesItem is the densest line of a summary: the files written, the names
// their edits added and the commands run most, names only. Identifiers,
// files and commands are most of what an agent needs to continue and what
// a tight budget drops first with the lines that carry them, so this one
// line goes in at the first priority (docs/decisions.md "What the
// extractive summary keeps").
func (x *extraction) namesItem() []exItem {
	var modified []*exFile
	for _, f := range x.fileMap {
		if f.write > 0 {
			modified = append(modified, f)
		}
	}
	sort.Slice(modified, func(i, j int) bool {
		if modified[i].last != modified[j].last {
			return modified[i].last > modified[j].last
		}
		return modified[i].path < modified[j].path
	})
	var files, idents []string
	seen := map[string]bool{}
	for _, f := range modified {
		// The file and its directory: "core/agent-session.ts".
		base := x.rel(f.path)
		if parts := strings.Split(base, "/"); len(parts) > 2 {
			base = strings.Join(parts[len(parts)-2:], "/")
		}
		if len(files) < exNamesFiles && !seen[base] {
			seen[base] = true
			files = append(files, base)
		}
		for _, id := range f.added {
			if len(idents) < exNamesIdents && !seen[id] && len(id) >= 3 {
				seen[id] = true
				idents = append(idents, id)
			}
		}
	}
	counts := map[string]int{}
	var order []string
	for _, c := range x.calls {
		cmd := strings.TrimSpace(stripCd(c.cmd))
		if cmd == "" {
			continue
		}
		cmd = truncRunes(oneLine(cmd), 60)
		if counts[cmd] == 0 {
			order = append(order, cmd)
		}
		counts[cmd]++
	}
	sort.SliceStable(order, func(i, j int) bool { return counts[order[i]] > counts[order[j]] })
	var cmds []string
	for _, c := range order {
		if len(cmds) == exNamesCommands || counts[c] < 2 {
			break
		}
		cmds = append(cmds, fmt.Sprintf("`%s` ×%d", c, counts[c]))
	}
	if len(files) == 0 && len(idents) == 0 && len(cmds) == 0 {
		return nil
	}
	var parts []string
	if len(files) > 0 {
		parts = append(parts, "files written: "+strings.Join(files, ", "))
	}
	if len(idents) > 0 {
		parts = append(parts, "names added: "+strings.Join(idents, ", "))
	}
	if len(cmds) > 0 {
		parts = append(parts, "run most: "+strings.Join(cmds, ", "))
	}
	text := "- In short — " + strings.Join(parts, "; ") + "\n"
	alt := "- In short — " + parts[0] + "\n"
	return []exItem{{sec: secFiles, order: -1, prio: 0, text: text, alt: alt}}
}
