package summarizer

import (
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/ctxd/ctxd/history"
)

// DefaultExtractiveBytes is the extractive summary's byte budget when none is
// configured ([compaction] extractive_summary_bytes): about what an LLM summary
// of a 150k–170k-token coding session takes (docs/decisions.md "What the
// extractive summary keeps").
const DefaultExtractiveBytes uint64 = 10240

// Limits of single items, in code points. They keep each item readable;
// which items make it into the summary is decided by the byte budget.
const (
	exFirstRequestRunes  = 1500
	exLatestRequestRunes = 1500
	exOtherRequestRunes  = 240
	exOtherRequests      = 6
	exCommandRunes       = 160
	exRecentCommands     = 6
	exKeyCommands        = 12
	exModifiedFiles      = 40
	exReadFiles          = 40
	exArtifacts          = 30
	exIdentsPerFile      = 20
	exDecisionLines      = 10
	exDecisionRunes      = 300
	exErrors             = 10
	exErrorRunes         = 220
	exThinking           = 2
	exThinkingRunes      = 600
	exReasonLines        = 6
	exLineRunes          = 300
	exLastMessageRunes   = 3000
	exTaskRunes          = 900
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
	exReasonRe    = regexp.MustCompile(`(?i)\b(because|hypothes\w*|suspect|likely|probably|ruled out|rule out|root cause|the (?:issue|problem|bug) is|turns out|caused by|doesn't work|does not work|won't work|assum\w+)\b`)
	exDecisionRe  = regexp.MustCompile(`(?i)\b(decid\w*|decision|instead of|rather than|chose|choos\w+|going with|opt(?:ed)? for|prefer\w*|i'll use|we'll use|will use|keep(?:ing)? (?:the|it|them|old|both)|must|never|always|the approach|trade-?off|so that|not needed|no longer needed|redundant|(?:don't|do not|no) need|not necessary|better to|the right (?:fix|approach|place))\b`)
	exNextRe      = regexp.MustCompile(`(?i)^\s*(?:[-*]\s*)?(?:\[ \]\s*)?(?:\d+[.)]\s*)?(?:\*\*)?(next|then|todo|remaining|still need|i'll|i will|let me|we need|need to|we should|i should|after that|finally)\b`)
	exAbandonedRe = regexp.MustCompile(`(?i)tool call abandoned`)
	exErrTextRe   = regexp.MustCompile(`^(?:Error|ERROR|Traceback|fatal:|error(?:\[\w+\])?:|panic:|Exception|npm ERR!|\*\* \(\w*Error\)|--- FAIL|FAIL\s)`)
	exSysTagRe    = regexp.MustCompile(`(?s)<system-reminder>.*?</system-reminder>`)
	exUserShellRe = regexp.MustCompile("^Ran `[^`\n]*`\n(?:```|\\(no output\\))")
	exSteerRe     = regexp.MustCompile(`(?i)\b(only|never|always|don't|do not|dont|must|should|prefer|want|instead|keep|no need|rather|why (?:does|do|would|are)|not what)\b`)
	exRuleRe      = regexp.MustCompile(`(?i)\b(only|never|always|must|must not|mustn't)\b`)
	exBranchCmdRe = regexp.MustCompile(`\bgit\s+(?:checkout\s+-b|switch\s+-c|branch)\s+\S+|\bgit\s+worktree\s+add\b`)
	exOpenFileRe  = regexp.MustCompile(`(?m)^\[File: (\S+) \(\d+ lines total\)\]`)
	exCmdNameRe   = regexp.MustCompile(`<command-name>\s*([^<]*?)\s*</command-name>`)
	exCmdArgsRe   = regexp.MustCompile(`(?s)<command-args>\s*(.*?)\s*</command-args>`)
	exTaskCmdRe   = regexp.MustCompile(`(?i)^(?:\S+=\S+\s+)*(?:bd|br|gh|glab|tea|issues?|jira|linear|task|tk|todo|beads)\s+(?:(?:issue|pr|task|ticket)\s+)?(?:show|view|get|read|info|details)\b`)
	exTaskFileRe  = regexp.MustCompile(`(?i)(spec|issue|task|todo|plan|requirement|prd|design|brief|ticket|story)[^/]*$|\.md$`)
	exKeyCmdRe    = regexp.MustCompile(`(?i)\b(git\s+(?:commit|push|tag|merge|rebase|cherry-pick|reset|revert|checkout\s+-b|switch\s+-c)|(?:bd|br|issues?|gh\s+issue|gh\s+pr|glab|jira|linear|tk)\s+(?:close|create|update|resolve|done|merge|new|comment)|npm\s+publish|cargo\s+publish|deploy|release)\b`)
	exTestCmdRe   = regexp.MustCompile(`(?i)\b(go\s+(?:test|build|vet)|mix\s+(?:test|compile|credo|dialyzer|format)|npm\s+(?:test|run)|npx\s+\S+|pnpm\s+\S+|yarn\s+\S+|pytest|python\s+-m\s+pytest|tox|cargo\s+(?:test|build|check|clippy)|make\b|gradle|mvn|dotnet\s+(?:test|build)|bundle\s+exec|rspec|jest|vitest|tsc\b)`)
)

// exNotRequest are prefixes of user-role text that is not a request: agent
// notifications, injected skill, hook and environment text, command
// caveats, interruption markers and earlier compaction summaries. Such text
// never fills a request slot of the Goal.
var exNotRequest = []string{
	"<task-notification>", "<local-command-stdout>", "<local-command-stderr>", "<local-command-caveat>",
	"Caveat: The messages below were generated", "<environment_context>", "<user_instructions>",
	"<permissions instructions>", "# AGENTS.md instructions", "<skills_instructions>", "<skill",
	"Base directory for this skill", "[Request interrupted", "This session is being continued from a previous conversation",
	"<user-prompt-submit-hook>", "<bash-stdout>", "<bash-stderr>", "<turn_aborted>", "<subagent_notification>",
	"Stop hook feedback", "<hook", "[SUGGESTION MODE", "<system-reminder>", "<command-stdout>", "<INSTRUCTIONS>",
	"<collaboration_mode>", "<multi_agent", "<developer", "<summary>", "<persisted-output>",
}

// exCall is one tool call seen in the history, with its result.
type exCall struct {
	idx     int // message index of the call
	seq     uint64
	id      string
	name    string
	input   map[string]any
	raw     json.RawMessage
	file    string // the file its input names, "" when none
	cmd     string // its shell command on one line, "" when none
	edits   []exEdit
	done    bool
	isError bool
	resIdx  int
	resText string
}

// failed reports whether the call's result says it failed: the error flag,
// or (for agents that set none) an error line opening the result.
func (c *exCall) failed() bool {
	if !c.done {
		return false
	}
	if c.isError {
		return true
	}
	// Only a command's output is judged by its text: a file read may
	// well start with "Error".
	return c.cmd != "" && exErrTextRe.MatchString(strings.TrimSpace(c.resText))
}

// exFile is one file seen in tool-call inputs.
type exFile struct {
	path                    string
	reads, write            int
	created                 bool
	last                    int // message index of the last call naming it
	added, removed, changed []string
	snippets                []string // small edits that define nothing, as written
}

// exUser is one user message with text and what it is.
type exUser struct {
	idx     int
	text    string // the request's text (a slash command as "/name args")
	request bool   // a request, not injected or notification text
}

// ExtractiveSummary is the embedded, network-free summarizer (docs/design.md
// §3): a deterministic, structured summary of msgs with the same section
// headings as BuiltinPrompt, at most maxBytes bytes (0 means
// DefaultExtractiveBytes), valid UTF-8, every cut on a code-point boundary.
//
// Within that budget it keeps what an agent needs to continue, most
// important first (docs/decisions.md "What the extractive summary keeps"):
// the goal (the first request, the task material the agent opened, the
// latest request), the files written with the names each edit added,
// removed or changed, each failure paired with the change after which the
// same action succeeded, key commands (commits, closes, pushes) from the
// whole run, decisions, the last assistant message in full and the pending
// next step. Paths are relative to the session's working directory when
// the history shows it. The same input always gives the same bytes.
func ExtractiveSummary(msgs []history.Message, maxBytes uint64) string {
	if maxBytes == 0 {
		maxBytes = DefaultExtractiveBytes
	}
	x := newExtraction(msgs)
	var items []exItem
	items = append(items, x.goal()...)
	items = append(items, x.state()...)
	if maxBytes < exNamesBelow {
		// A tight budget drops the lines that carry names first.
		items = append(items, x.namesItem()...)
	}
	items = append(items, x.files()...)
	items = append(items, x.decisions()...)
	items = append(items, x.errorsAndFixes()...)
	items = append(items, x.reasoning()...)
	items = append(items, x.nextSteps()...)
	// The title names the range of seqs read, not a count: the messages
	// read here include the previous summary and the recent ones retention
	// may keep, so their number is not what the checkpoint records as
	// summarized.
	title := fmt.Sprintf("# Checkpoint summary (extractive%s)\n\n", x.seqRange())
	return withCarried(x, title, items, int(maxBytes))
}

// extraction is what ExtractiveSummary gathers in one pass over msgs.
type extraction struct {
	msgs       []history.Message
	users      []exUser
	assistants []int // indexes of assistant messages with text
	thinking   []string
	calls      []*exCall
	byID       map[string]*exCall
	fileMap    map[string]*exFile
	artifacts  []string
	seenArt    map[string]bool
	toolCount  map[string]int
	workDir    string
	ids        identCache
	prevGoal   string // Goal of an earlier checkpoint summary, if the history starts with one
	prev       string // that whole summary
	prevIdx    int    // index of that summary's message in msgs
	hasPrev    bool
	abandoned  int
}

func newExtraction(msgs []history.Message) *extraction {
	x := &extraction{msgs: msgs, byID: map[string]*exCall{}, fileMap: map[string]*exFile{},
		seenArt: map[string]bool{}, toolCount: map[string]int{}, ids: identCache{}}
	afterCommand := false // the previous user message was a slash command
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
			t := strings.TrimSpace(messageText(m))
			if t == "" {
				continue
			}
			// The earlier summary: the first user message with its
			// headings before any assistant turn (the engine puts the
			// pinned context and the first request before it).
			if len(x.assistants) == 0 && len(x.calls) == 0 && !x.hasPrev && isSummary(t) {
				x.hasPrev = true
				x.prev = t
				x.prevIdx = i
				x.prevGoal = sectionBody(t, HeadingGoal)
				continue
			}
			text, req := requestText(t)
			if afterCommand && req {
				// A slash command's expansion (the command's prompt file)
				// directly follows it: material, not a second request.
				req = false
			}
			afterCommand = req && strings.HasPrefix(text, "/") && strings.Contains(t, "<command-name>")
			x.users = append(x.users, exUser{idx: i, text: text, request: req})
		case history.RoleAssistant:
			afterCommand = false
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
	for _, c := range x.calls {
		// An editor that edits "the open file" (SWE-agent) names it in
		// its result.
		if c.file == "" && c.done && (len(c.edits) > 0 || toolOp(c.name) == "write") {
			if m := exOpenFileRe.FindStringSubmatch(c.resText); m != nil {
				c.file = m[1]
				for k := range c.edits {
					if c.edits[k].path == "" {
						c.edits[k].path = m[1]
					}
				}
			}
		}
	}
	x.collectFiles()
	x.workDir = x.statedWorkDir()
	if x.workDir == "" {
		var written, all []string
		for _, f := range x.fileMap {
			all = append(all, f.path)
			if f.write > 0 {
				written = append(written, f.path)
			}
		}
		sort.Strings(written)
		sort.Strings(all)
		x.workDir = inferWorkDir(written, all)
	}
	x.carryFiles()
	x.mergeFiles()
	return x
}

// mergeFiles joins the entries of one file named both by its absolute
// path and relative to the working directory.
func (x *extraction) mergeFiles() {
	if x.workDir == "" {
		return
	}
	keys := make([]string, 0, len(x.fileMap))
	for k := range x.fileMap {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	merged := map[string]*exFile{}
	for _, k := range keys {
		f := x.fileMap[k]
		r := strings.TrimPrefix(x.rel(f.path), "./")
		g := merged[r]
		if g == nil {
			f.path = r
			merged[r] = f
			continue
		}
		g.reads += f.reads
		g.write += f.write
		g.created = g.created || f.created
		g.last = max(g.last, f.last)
		g.added = appendNew(g.added, f.added...)
		g.removed = appendNew(g.removed, f.removed...)
		g.changed = appendNew(g.changed, f.changed...)
		g.snippets = appendNew(g.snippets, f.snippets...)
	}
	x.fileMap = merged
}

// requestText returns the text of a user message as a request and whether
// it is one: system reminders are dropped, a slash command becomes
// "/name args", and notification or injected text is not a request.
func requestText(t string) (string, bool) {
	if strings.Contains(t, "<command-name>") {
		if m := exCmdNameRe.FindStringSubmatch(t); m != nil {
			name := m[1]
			if !strings.HasPrefix(name, "/") {
				name = "/" + name
			}
			if a := exCmdArgsRe.FindStringSubmatch(t); a != nil && a[1] != "" {
				name += " " + a[1]
			}
			return name, true
		}
	}
	stripped := strings.TrimSpace(exSysTagRe.ReplaceAllString(t, ""))
	if stripped == "" {
		return t, false
	}
	for _, p := range exNotRequest {
		if strings.HasPrefix(stripped, p) {
			return stripped, false
		}
	}
	if exUserShellRe.MatchString(stripped) {
		// A shell command the user ran in the agent (pi's bashExecution,
		// Claude Code's "!" commands) and its output.
		return stripped, false
	}
	return stripped, true
}

// addCall records a tool call and what its input says about files,
// commands and edits.
func (x *extraction) addCall(i int, seq uint64, b history.Block) {
	c := &exCall{idx: i, seq: seq, id: b.ID, name: b.Name, raw: b.Input}
	_ = json.Unmarshal(b.Input, &c.input)
	x.calls = append(x.calls, c)
	if b.ID != "" {
		x.byID[b.ID] = c
	}
	x.toolCount[b.Name]++
	verb, _ := c.input["command"].(string)
	_, isEditor := exEditorVerbs[verb]
	for _, k := range exFileKeys {
		if p, ok := c.input[k].(string); ok && strings.TrimSpace(p) != "" && !strings.HasPrefix(p, "artifact://") {
			c.file = p
			break
		}
	}
	if !isEditor {
		c.cmd = commandOf(c.input)
	}
	c.edits = editsOf(b.Name, c.input)
}

// collectFiles fills fileMap from the calls: reads, writes, and the names
// each successful edit added, removed or changed.
func (x *extraction) collectFiles() {
	get := func(p string, i int) *exFile {
		f := x.fileMap[p]
		if f == nil {
			f = &exFile{path: p}
			x.fileMap[p] = f
		}
		f.last = i
		return f
	}
	// known is the last content of each file the history shows whole (a
	// full read, a whole-file write, edits applied to either), so a
	// rewrite's new names are told from the ones it kept.
	known := map[string]string{}
	for _, c := range x.calls {
		verb, _ := c.input["command"].(string)
		editorOp, isEditor := exEditorVerbs[verb]
		if c.file != "" && c.done && !c.failed() && len(c.edits) == 0 && toolOp(c.name) == "read" && !isEditor && wholeRead(c.input) {
			known[c.file] = cleanResult(c.resText)
		}
		op := toolOp(c.name)
		if isEditor {
			op = editorOp
		}
		if len(c.edits) > 0 {
			op = "write"
		}
		if c.file != "" && (op != "write" || len(c.edits) == 0) {
			f := get(c.file, c.idx)
			if op == "write" {
				f.write++
			} else {
				f.reads++
			}
		}
		if op != "write" || (c.done && c.failed()) {
			continue
		}
		for _, e := range c.edits {
			p := e.path
			if p == "" {
				p = c.file
			}
			if p == "" {
				continue
			}
			f := get(p, c.idx)
			f.write++
			if e.created && f.reads == 0 && f.write == 1 {
				f.created = true
			}
			if e.created && e.oldText == "" {
				if prev, ok := known[p]; ok {
					e.oldText = prev
				}
				known[p] = e.newText
			} else if prev, ok := known[p]; ok && e.oldText != "" && strings.Contains(prev, e.oldText) {
				known[p] = strings.Replace(prev, e.oldText, e.newText, 1)
			}
			add, rem, chg := identDeltaWith(x.ids.identifiers, e)
			if len(add)+len(rem)+len(chg) == 0 {
				if snip := editSnippet(e); snip != "" {
					f.snippets = appendNew(f.snippets, snip)
				}
			}
			f.added = appendNew(f.added, add...)
			f.removed = appendNew(f.removed, rem...)
			f.changed = appendNew(f.changed, chg...)
		}
	}
	// A name added then removed was renamed or dropped: it is listed as
	// removed only; a name removed then added again as changed.
	for _, f := range x.fileMap {
		var keep []string
		for _, n := range f.added {
			if !slices.Contains(f.removed, n) {
				keep = append(keep, n)
			}
		}
		f.added = keep
	}
}

// editSnippet returns the new text of a small edit on one line (what a
// one-line fix wrote), or "" when the edit is not small.
func editSnippet(e exEdit) string {
	n := strings.TrimSpace(e.newText)
	if n == "" || len(n) > 160 || e.created {
		return ""
	}
	return oneLine(n)
}

// wholeRead reports whether a read call's input asks for the whole file
// (no offset, limit or line range).
func wholeRead(in map[string]any) bool {
	for _, k := range []string{"offset", "limit", "view_range", "line_number", "start_line", "end_line"} {
		if _, ok := in[k]; ok {
			return false
		}
	}
	return true
}

// appendNew appends the names not yet in list.
func appendNew(list []string, names ...string) []string {
	for _, n := range names {
		if !slices.Contains(list, n) {
			list = append(list, n)
		}
	}
	return list
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

// requests returns the user messages that are requests. A request before
// an earlier summary that the summary already quotes (the first request the
// engine carries beside every summary, docs/design.md §5.2) is not one
// again: the Goal carries it from the summary, once.
func (x *extraction) requests() []exUser {
	var out []exUser
	for _, u := range x.users {
		if !u.request {
			continue
		}
		if x.hasPrev && u.idx < x.prevIdx {
			if l, _, _ := strings.Cut(strings.TrimSpace(u.text), "\n"); strings.Contains(x.prev, strings.TrimSuffix(truncRunes(l, 100), "…")) {
				continue
			}
		}
		out = append(out, u)
	}
	return out
}

// Section indexes of exItem.sec, in heading order.
const (
	secGoal = iota
	secState
	secFiles
	secDecisions
	secErrors
	secReasoning
	secNext
	secCount
)

// exHeadings are the headings of the sections, by section index.
var exHeadings = [secCount]string{HeadingGoal, HeadingState, HeadingFiles, HeadingDecisions,
	HeadingErrors, HeadingReasoning, HeadingNextSteps}

// exEmpty is what a section says when none of its items was gathered.
var exEmpty = [secCount]string{
	"No user request in the summarized messages.",
	"No messages.",
	exNoFiles,
	"No decisions stated in the summarized messages.",
	exNoFailures,
	"No reasoning recorded in the summarized messages.",
	"- Continue from the latest request and the last assistant message above.",
}

func (x *extraction) goal() []exItem {
	var items []exItem
	add := func(prio int, text, alt string) {
		items = append(items, exItem{sec: secGoal, order: len(items), prio: prio, text: text, alt: alt})
	}
	if x.hasPrev {
		// The session's first request survives every compaction, quoted
		// once: an earlier summary's own first request is carried, never
		// nested under another label.
		if orig := originalRequest(x.prevGoal); orig != "" {
			add(0, exOriginalRequest+":\n"+orig+"\n", "")
		} else if x.prevGoal != "" {
			add(0, exOriginalRequest+":\n"+quote(truncLines(truncRunes(x.prevGoal, exFirstRequestRunes), exQuoteLines))+"\n", "")
		}
		if task := sectionPart(x.prevGoal, exTaskLabel); task != "" && len(x.taskMaterial(0)) == 0 {
			add(1, "\n"+task+"\n", "")
		}
	}
	reqs := x.requests()
	if len(reqs) == 0 && !x.hasPrev {
		// No request at all: the first user text is the best we have.
		if len(x.users) > 0 {
			u := x.users[0]
			add(0, fmt.Sprintf("%s%s (not a request; the first user text):\n%s\n", exOriginalRequest, x.at(u.idx),
				quote(truncLines(truncRunes(u.text, exOtherRequestRunes*2), 8))), "")
		}
	}
	if len(reqs) > 0 && !x.hasPrev {
		first := reqs[0]
		full := x.firstRequestText(first)
		add(0, fmt.Sprintf("%s%s:\n%s\n", exOriginalRequest, x.at(first.idx), quote(truncLines(truncRunes(full, exFirstRequestRunes), exQuoteLines))),
			fmt.Sprintf("%s%s:\n%s\n", exOriginalRequest, x.at(first.idx), quote(truncLines(truncRunes(full, 400), 8))))
	}
	items = append(items, x.taskMaterial(len(items))...)
	curIdx := -2
	if cur, ok := x.currentTask(reqs); !ok && x.hasPrev {
		if task := sectionPart(x.prevGoal, "Current task"); task != "" {
			add(1, "\n"+task+"\n", "")
		}
	} else if ok {
		curIdx = cur.idx
		add(0, fmt.Sprintf("\nCurrent task (the latest request followed by sustained work)%s:\n%s\n", x.at(cur.idx), quote(truncLines(truncRunes(cur.text, 800), 16))),
			fmt.Sprintf("\nCurrent task%s:\n%s\n", x.at(cur.idx), quote(truncLines(truncRunes(cur.text, 300), 6))))
	}
	if x.hasPrev && len(reqs) > 0 {
		// Every request here came after the earlier checkpoint.
		reqs = append([]exUser{{idx: -1}}, reqs...)
	}
	if n := len(reqs); n > 1 {
		var between []exUser
		for _, u := range reqs[1 : n-1] {
			if len(strings.TrimSpace(u.text)) >= 16 {
				between = append(between, u)
			}
		}
		if len(between) > 0 {
			label := fmt.Sprintf("Later requests (%d in between, short replies left out", len(between))
			if len(between) > exOtherRequests {
				label += fmt.Sprintf(", last %d shown", exOtherRequests)
				between = between[len(between)-exOtherRequests:]
			}
			label += "):"
			for k, u := range between {
				prio := 2
				if k < len(between)-3 {
					prio = 3
				}
				it := exItem{sec: secGoal, order: len(items), prio: prio, group: label,
					text: fmt.Sprintf("- %s%s\n", oneLine(truncRunes(u.text, exOtherRequestRunes)), x.at(u.idx))}
				items = append(items, it)
			}
		}
		last := reqs[n-1]
		if len(strings.TrimSpace(last.text)) < exSubstantive {
			// A short reply ("ok", "continue") says little alone: the
			// latest request with substance comes with it.
			for k := n - 2; k >= 1; k-- {
				if u := reqs[k]; len(strings.TrimSpace(u.text)) >= exSubstantive && u.idx >= 0 && u.idx != curIdx {
					add(0, fmt.Sprintf("\nLatest substantive request%s:\n%s\n", x.at(u.idx), quote(truncLines(truncRunes(u.text, 500), 12))),
						fmt.Sprintf("\nLatest substantive request%s:\n%s\n", x.at(u.idx), quote(truncLines(truncRunes(u.text, 200), 4))))
					break
				}
			}
		}
		add(0, fmt.Sprintf("\nLatest request%s:\n%s\n", x.at(last.idx), quote(truncLines(truncRunes(last.text, exLatestRequestRunes), exQuoteLines))),
			fmt.Sprintf("\nLatest request%s:\n%s\n", x.at(last.idx), quote(truncLines(truncRunes(last.text, 400), 8))))
	}
	return items
}

// exSustainedCalls is how many tool calls after a request, before the next
// one, make it a task rather than a question.
const exSustainedCalls = 8

// exSubstantive is the length, in bytes, from which a request says what to
// do on its own; shorter ones ("ok", "continue", "no, that's wrong") are
// replies.
const exSubstantive = 40

// currentTask returns the latest request that was followed by sustained
// work (exSustainedCalls tool calls or more before the next request),
// when it is neither the first nor the latest request: the task the
// recent work serves, which short follow-ups would otherwise hide.
func (x *extraction) currentTask(reqs []exUser) (exUser, bool) {
	for k := len(reqs) - 2; k >= 1; k-- {
		from, to := reqs[k].idx, reqs[k+1].idx
		n := 0
		for _, c := range x.calls {
			if c.idx > from && c.idx < to {
				n++
			}
		}
		if n >= exSustainedCalls {
			// A short go-ahead ("can leave it", "continue") starts the
			// work; the request it answers says what the work is.
			for j := k; j >= 1; j-- {
				if len(strings.TrimSpace(reqs[j].text)) >= exSubstantive {
					return reqs[j], true
				}
			}
			return exUser{}, false
		}
	}
	return exUser{}, false
}

// firstRequestText is the first request, followed by a slash command's
// expansion when the next user text is one.
func (x *extraction) firstRequestText(first exUser) string {
	t := first.text
	for k, u := range x.users {
		if u.idx == first.idx && k+1 < len(x.users) && !x.users[k+1].request && strings.HasPrefix(t, "/") {
			next := x.users[k+1]
			if !slices.ContainsFunc(x.assistants, func(a int) bool { return a > u.idx && a < next.idx }) {
				t += "\n\n(command prompt:) " + truncRunes(next.text, 500)
			}
		}
	}
	return t
}

// exTaskLabel introduces task material in the Goal section.
const exTaskLabel = "Task material the agent opened"

// taskMaterial returns the tool results that state the task: an issue
// tracker's show/view output, or a spec, plan or issue file read before
// the agent wrote anything. The first and the latest are quoted; the
// others are named by their first line.
func (x *extraction) taskMaterial(order int) []exItem {
	firstWrite := len(x.msgs)
	for _, c := range x.calls {
		if len(c.edits) > 0 || toolOp(c.name) == "write" {
			firstWrite = c.idx
			break
		}
	}
	var picked []*exCall
	for _, c := range x.calls {
		if !c.done || c.failed() || strings.TrimSpace(c.resText) == "" {
			continue
		}
		if c.cmd != "" && exTaskCmdRe.MatchString(stripCd(c.cmd)) {
			picked = append(picked, c)
			continue
		}
		if c.file != "" && c.idx < firstWrite && toolOp(c.name) == "read" && exTaskFileRe.MatchString(c.file) && len(picked) < 3 {
			picked = append(picked, c)
		}
	}
	if len(picked) == 0 {
		return nil
	}
	var items []exItem
	label := "\n" + exTaskLabel + ":"
	for k, c := range picked {
		what := "`" + x.rel(c.cmd) + "`"
		if c.cmd == "" {
			what = x.rel(c.file)
		}
		body := cleanResult(c.resText)
		head := oneLine(truncRunes(firstLines(body, 1), 200))
		it := exItem{sec: secGoal, order: order + k, group: label}
		switch {
		case k == 0 || k == len(picked)-1:
			it.prio = 1
			if k == 0 {
				it.prio = 0
			}
			it.text = fmt.Sprintf("- %s%s:\n%s\n", what, x.at(c.resIdx), quote(truncLines(truncRunes(firstLines(body, 20), exTaskRunes), 20)))
			it.alt = fmt.Sprintf("- %s%s: %s\n", what, x.at(c.resIdx), head)
		default:
			it.prio = 2
			it.text = fmt.Sprintf("- %s%s: %s\n", what, x.at(c.resIdx), head)
		}
		items = append(items, it)
	}
	return items
}

// cleanResult drops the line-number gutters of file reads ("   12→") so
// quoted material reads as text.
func cleanResult(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if j := strings.Index(l, "→"); j > 0 && j < 12 && strings.TrimSpace(l[:j]) != "" && strings.Trim(strings.TrimSpace(l[:j]), "0123456789") == "" {
			lines[i] = l[j+len("→"):]
		}
	}
	return strings.Join(lines, "\n")
}

func (x *extraction) state() []exItem {
	var items []exItem
	add := func(prio int, text string) {
		items = append(items, exItem{sec: secState, order: len(items), prio: prio, text: text})
	}
	failed := 0
	for _, c := range x.calls {
		if c.failed() {
			failed++
		}
	}
	add(0, fmt.Sprintf("- Messages: %d (%d user requests, %d assistant messages with text, %d tool calls, %d failed).\n",
		len(x.msgs), len(x.requests()), len(x.assistants), len(x.calls), failed))
	if x.workDir != "" {
		add(0, fmt.Sprintf("- Working directory: %s (paths below are relative to it).\n", x.workDir))
	}
	if x.hasPrev {
		add(0, "- Continues from an earlier checkpoint summary.\n")
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
		add(3, fmt.Sprintf("- Tools used: %s.\n", strings.Join(parts, ", ")))
	}
	if todo := x.todoList(); todo != "" {
		add(1, todo)
	} else {
		for _, e := range x.prevEntries(HeadingState) {
			if strings.HasPrefix(e.text, "- Task list") {
				add(1, e.text)
			}
		}
	}
	for _, v := range x.verified(2) {
		add(1, v)
	}
	if n := len(x.calls); n > 0 {
		c := x.calls[n-1]
		status := "no result recorded"
		if c.failed() {
			status = "failed"
		} else if c.done {
			status = "succeeded"
		}
		add(0, fmt.Sprintf("- Last tool call%s: %s — %s.\n", x.at(c.idx), x.rel(callSummary(c)), status))
	}
	if x.abandoned > 0 {
		add(1, fmt.Sprintf("- Abandoned tool calls (interrupted, no result): %d.\n", x.abandoned))
	}
	open := x.openCalls()
	if len(open) == 0 {
		add(0, "- Open tool rounds: none.\n")
	} else {
		var b strings.Builder
		fmt.Fprintf(&b, "- Open tool rounds: %d call(s) without a result:\n", len(open))
		for _, c := range open {
			fmt.Fprintf(&b, "  - %s [%s]%s\n", x.rel(callSummary(c)), c.id, x.at(c.idx))
		}
		add(0, b.String())
	}
	return items
}

// exVerifiedRe matches an assistant line reporting a verification.
var exVerifiedRe = regexp.MustCompile(`(?i)(\b\d+ (?:tests?|doctests?|specs?) (?:pass|passed|ok)|\ball (?:\d+ )?(?:\w+ )?tests? pass|\b0 failures\b|\btests? (?:now )?pass(?:es|ed)?\b|\bcompiles? clean|\bbuild (?:succeeds|passes|is green))`)

// verified returns up to n of the latest assistant lines that report a
// verification (tests passing, a clean build), latest last.
func (x *extraction) verified(n int) []string {
	var out []string
	for k := len(x.assistants) - 1; k >= 0 && len(out) < n; k-- {
		i := x.assistants[k]
		for _, l := range strings.Split(messageText(&x.msgs[i]), "\n") {
			if exVerifiedRe.MatchString(l) {
				out = append(out, fmt.Sprintf("- Verified%s: %s\n", x.at(i), oneLine(truncRunes(strings.TrimLeft(strings.TrimSpace(l), "-*# "), 200))))
				break
			}
		}
	}
	slices.Reverse(out)
	return out
}

// todoList renders the latest task list the agent kept (Claude Code's
// TodoWrite, any tool whose input holds a "todos" list), or "".
func (x *extraction) todoList() string {
	for k := len(x.calls) - 1; k >= 0; k-- {
		c := x.calls[k]
		todos, ok := c.input["todos"].([]any)
		if !ok || len(todos) == 0 {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "- Task list (%s%s):\n", c.name, x.at(c.idx))
		for _, t := range todos {
			m, _ := t.(map[string]any)
			content, _ := firstString(m, "content", "title", "text", "task")
			status, _ := firstString(m, "status", "state")
			mark := "[ ]"
			switch status {
			case "completed", "done":
				mark = "[x]"
			case "in_progress", "active":
				mark = "[~]"
			}
			fmt.Fprintf(&b, "  - %s %s\n", mark, oneLine(truncRunes(content, 160)))
		}
		return b.String()
	}
	return ""
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

func (x *extraction) files() []exItem {
	var items []exItem
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
	if len(modified) > 0 {
		label := fmt.Sprintf("Modified (%d, most recent first; + added, − removed, ~ changed):", len(modified))
		for k, f := range modified {
			if k == exModifiedFiles {
				break
			}
			prio := 1
			if k >= 20 {
				prio = 3
			}
			line := fmt.Sprintf("- %s (", x.rel(f.path))
			if f.created {
				line += "new, "
			}
			line += fmt.Sprintf("writes ×%d", f.write)
			if f.reads > 0 {
				line += fmt.Sprintf(", reads ×%d", f.reads)
			}
			line += ")"
			short := line + "\n"
			// The most recent files name everything they define; older
			// ones their first names.
			limit := exIdentsPerFile
			if k >= 5 {
				limit = 8
			}
			if ids := identList(f, limit); ids != "" {
				line += ": " + ids
			}
			for k, sn := range f.snippets {
				if k == 2 {
					break
				}
				line += fmt.Sprintf("; wrote `%s`", truncRunes(sn, 120))
			}
			items = append(items, exItem{sec: secFiles, order: k, rank: k, prio: prio, group: label, text: line + "\n", alt: short})
			if more := elided(f, limit); len(more) > 0 {
				// The names the line leaves out, where the budget has room
				// after everything else: a name no summary held cannot be
				// carried to the next one.
				items = append(items, exItem{sec: secFiles, order: k, rank: k, prio: 4, group: label,
					text: fmt.Sprintf("- also added to %s: %s\n", path.Base(f.path), strings.Join(more, " "))})
			}
		}
	}
	if len(read) > 0 {
		label := fmt.Sprintf("\nRead (%d, most recent first):", len(read))
		var names []string
		for k, f := range read {
			if k == exReadFiles {
				names = append(names, fmt.Sprintf("… %d more", len(read)-exReadFiles))
				break
			}
			n := x.rel(f.path)
			if f.reads > 1 {
				n += fmt.Sprintf(" (×%d)", f.reads)
			}
			names = append(names, n)
		}
		for k := 0; k < len(names); k += 10 {
			chunk := names[k:min(k+10, len(names))]
			prio := 2
			if k > 0 {
				prio = 3
			}
			items = append(items, exItem{sec: secFiles, order: 100 + k, prio: prio, group: label, text: "- " + strings.Join(chunk, ", ") + "\n"})
		}
	}
	items = append(items, x.commands(200)...)
	if len(x.artifacts) > 0 {
		arts := x.artifacts
		label := fmt.Sprintf("\nArtifacts referenced (%d", len(arts))
		if len(arts) > exArtifacts {
			label += fmt.Sprintf(", last %d", exArtifacts)
			arts = arts[len(arts)-exArtifacts:]
		}
		label += "):"
		for k, a := range arts {
			items = append(items, exItem{sec: secFiles, order: 400 + k, prio: 1, group: label, text: "- " + a + "\n"})
		}
	}
	items = append(items, x.carriedItems(HeadingFiles, secFiles, 2, 500, "Commands", exEarlier)...)
	return items
}

// identList renders the names an edit added (+), removed (−) and changed
// (~) in a file, at most exIdentsPerFile of them, added first.
// elided returns the names an edit added to f that identList(f, limit)
// leaves out (the middle of a long list).
func elided(f *exFile, limit int) []string {
	over := len(f.added) - limit
	if over <= 0 {
		return nil
	}
	head := min(6, limit/2)
	return f.added[head : head+over]
}

func identList(f *exFile, limit int) string {
	var parts []string
	added := f.added
	if over := len(added) - limit; over > 0 {
		// The first names (often the module or type) and the latest
		// (what the work is on now); the middle is left out.
		head := min(6, limit/2)
		added = append(append(slices.Clone(added[:head]), "…"), added[len(added)-(limit-head):]...)
	}
	n := 0
	for _, g := range []struct {
		mark  string
		names []string
	}{{"+", added}, {"−", f.removed}, {"~", f.changed}} {
		for _, name := range g.names {
			if name == "…" {
				parts = append(parts, name)
				continue
			}
			if n >= limit {
				parts = append(parts, "…")
				return strings.Join(parts, " ")
			}
			if g.mark == "~" && (slices.Contains(f.added, name) || slices.Contains(f.removed, name)) {
				continue
			}
			parts = append(parts, g.mark+name)
			n++
		}
	}
	return strings.Join(parts, " ")
}

// commands lists the commands worth carrying: the run's key commands
// (commits, pushes, issue updates) wherever they were, the distinct build
// and test commands, and the most recent ones, oldest first.
func (x *extraction) commands(order int) []exItem {
	type cmdRef struct {
		c    *exCall
		prio int
	}
	var all []*exCall
	for _, c := range x.calls {
		if c.cmd != "" {
			all = append(all, c)
		}
	}
	if len(all) == 0 {
		return nil
	}
	chosen := map[*exCall]int{}
	pick := func(c *exCall, prio int) {
		if p, ok := chosen[c]; !ok || prio < p {
			chosen[c] = prio
		}
	}
	// Failed key commands are in the errors section with their fix.
	var key []*exCall
	for _, c := range all {
		if exKeyCmdRe.MatchString(c.cmd) && !c.failed() {
			key = append(key, c)
		}
	}
	if len(key) > exKeyCommands {
		key = key[len(key)-exKeyCommands:]
	}
	for _, c := range key {
		pick(c, 1)
	}
	// Where the work lives (a branch, a worktree) is kept wherever it was.
	for _, c := range all {
		if exBranchCmdRe.MatchString(c.cmd) {
			pick(c, 1)
		}
	}
	// Distinct build/test commands, the latest of each.
	lastOf := map[string]*exCall{}
	var kinds []string
	for _, c := range all {
		if m := exTestCmdRe.FindString(c.cmd); m != "" {
			// One entry per command, whatever its output filter.
			k := stripCd(c.cmd)
			if i := strings.IndexAny(k, "|>"); i > 0 {
				k = k[:i]
			}
			k = truncRunes(strings.Join(strings.Fields(strings.TrimSuffix(strings.TrimSpace(k), "2")), " "), 60)
			if _, ok := lastOf[k]; !ok {
				kinds = append(kinds, k)
			}
			lastOf[k] = c
		}
	}
	for _, k := range kinds {
		pick(lastOf[k], 2)
	}
	seen := map[string]bool{}
	n := 0
	for k := len(all) - 1; k >= 0 && n < exRecentCommands; k-- {
		if exLookCmds[firstWord(stripCd(all[k].cmd))] && n >= 3 {
			continue // a look (ls, grep, cat) matters only among the very last
		}
		if !seen[all[k].cmd] {
			seen[all[k].cmd] = true
			pick(all[k], 2)
			n++
		}
	}
	var refs []cmdRef
	printed := map[string]bool{}
	for _, c := range all {
		if p, ok := chosen[c]; ok && !printed[c.cmd] {
			printed[c.cmd] = true
			refs = append(refs, cmdRef{c, p})
		}
	}
	label := fmt.Sprintf("\nCommands (%d run; key and recent ones, oldest first):", len(all))
	var items []exItem
	for k, r := range refs {
		status := ""
		if r.c.failed() {
			status = " — failed"
		} else if exTestCmdRe.MatchString(r.c.cmd) {
			if res := outcomeLine(r.c.resText); res != "" {
				status = " → " + res
			}
		}
		rank := len(refs) - 1 - k
		if exBranchCmdRe.MatchString(r.c.cmd) {
			rank = 0 // where the work lives comes first
		}
		items = append(items, exItem{sec: secFiles, order: order + k, rank: rank, prio: r.prio, group: label,
			text: fmt.Sprintf("- `%s`%s%s\n", truncRunes(x.rel(x.inWorkDir(r.c.cmd)), 110), x.at(r.c.idx), status)})
	}
	return items
}

// exOutcomeRe matches the line of a build or test output that states the
// outcome ("14 doctests, 410 tests, 0 failures", "ok  pkg 0.3s", "PASS").
var exOutcomeRe = regexp.MustCompile(`(?i)(\b\d+ (?:tests?|examples?|specs?|passed|failed|failures?|errors?)\b|^(?:ok|PASS|FAIL)\b|\bBUILD (?:SUCCESS|FAILED)\b)`)

// outcomeLine returns the last line of a command's output that states its
// outcome, bounded, or "".
func outcomeLine(out string) string {
	lines := strings.Split(out, "\n")
	for k := len(lines) - 1; k >= 0 && k >= len(lines)-40; k-- {
		if l := strings.TrimSpace(lines[k]); l != "" && exOutcomeRe.MatchString(l) {
			return oneLine(truncRunes(l, 100))
		}
	}
	return ""
}

// inWorkDir drops a leading "cd DIR &&" when DIR is the working
// directory: every command runs there unless it says otherwise.
func (x *extraction) inWorkDir(cmd string) string {
	if m := exCdPrefixRe.FindStringSubmatchIndex(cmd); m != nil && x.workDir != "" && cleanDir(cmd[m[4]:m[5]]) == x.workDir {
		return strings.TrimSpace(cmd[m[1]:])
	}
	return cmd
}

// firstWord returns the first word of s.
func firstWord(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return ""
}

// stripCd drops a leading "cd DIR &&" and environment assignments.
func stripCd(cmd string) string {
	if m := exCdPrefixRe.FindStringIndex(cmd); m != nil {
		cmd = cmd[m[1]:]
	}
	return strings.TrimSpace(cmd)
}

func (x *extraction) decisions() []exItem {
	var items []exItem
	// Answers the user gave to the agent's questions are decisions.
	for _, c := range x.calls {
		if !c.done || c.failed() {
			continue
		}
		if t := c.resText; strings.Contains(t, "User has answered") || strings.EqualFold(c.name, "AskUserQuestion") || strings.EqualFold(c.name, "request_user_input") {
			items = append(items, exItem{sec: secDecisions, order: c.idx, prio: 1,
				text: fmt.Sprintf("- The user answered%s: %s\n", x.at(c.resIdx), oneLine(truncRunes(t, exDecisionRunes)))})
		}
	}
	// What the user said that steers the work (constraints, preferences,
	// corrections), latest first; the first and latest requests are
	// quoted under Goal already.
	reqs := x.requests()
	nRule, nSteer := 0, 0
	for k := len(reqs) - 2; k >= 1; k-- {
		u := reqs[k]
		if !exSteerRe.MatchString(u.text) || len(u.text) < 16 {
			continue
		}
		// A standing rule (only, never, always, must …) holds however
		// old it is; other steering matters while it is recent.
		prio := 1
		if exRuleRe.MatchString(u.text) && nRule < 6 {
			nRule++
		} else if nSteer < 4 {
			nSteer++
			prio = 2
		} else {
			continue
		}
		items = append(items, exItem{sec: secDecisions, order: u.idx, prio: prio,
			text: fmt.Sprintf("- The user%s: %q\n", x.at(u.idx), oneLine(truncRunes(u.text, 200)))})
	}
	// Decision lines of the assistant's text, latest first.
	var lines []exItem
	seen := map[string]bool{}
	for k := len(x.assistants) - 1; k >= 0 && len(lines) < exDecisionLines; k-- {
		i := x.assistants[k]
		for _, l := range strings.Split(messageText(&x.msgs[i]), "\n") {
			l = strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(l), "-*#> "))
			if len(l) < 30 || !exDecisionRe.MatchString(l) {
				continue
			}
			l = oneLine(truncRunes(x.rel(l), exDecisionRunes))
			if seen[l] || len(lines) >= exDecisionLines {
				continue
			}
			seen[l] = true
			prio := 2
			if len(lines) >= 5 {
				prio = 3
			}
			lines = append(lines, exItem{sec: secDecisions, order: i*100 + len(lines), prio: prio, text: fmt.Sprintf("- %s%s\n", l, x.at(i))})
		}
	}
	items = append(items, lines...)
	items = append(items, x.carriedItems(HeadingDecisions, secDecisions, 2, len(x.msgs)*100+1)...)
	return items
}

// exFailure is a group of failures of the same action with the same
// message, and what made the action succeed afterwards.
type exFailure struct {
	first, last *exCall
	count       int
	msg         string
	fix         string // "" when no later attempt succeeded
}

// errorsAndFixes pairs every failed call with the change after which the
// same action (the same tool on the same file, or the same command)
// succeeded: the edits and commands applied in between and the succeeding
// call itself. It never quotes the assistant's plan: only applied changes
// count as a fix.
func (x *extraction) errorsAndFixes() []exItem {
	var groups []*exFailure
	byKey := map[string]*exFailure{}
	for k, c := range x.calls {
		if !c.failed() || exAbandonedRe.MatchString(c.resText) {
			continue
		}
		msg := errorLine(c.resText)
		key := c.name + "\x00" + actionKey(c) + "\x00" + msg
		g := byKey[key]
		if g == nil {
			g = &exFailure{first: c, msg: msg}
			byKey[key] = g
			groups = append(groups, g)
		}
		g.last = c
		g.count++
		g.fix = x.fixAfter(k)
	}
	var items []exItem
	if len(groups) > 0 {
		failed := 0
		for _, g := range groups {
			failed += g.count
		}
		items = append(items, exItem{sec: secErrors, order: -1, prio: 0,
			text: fmt.Sprintf("Failed tool calls: %d of %d (%d distinct).\n", failed, len(x.calls), len(groups))})
	}
	// Most recent first in priority; shown in history order.
	for k := len(groups) - 1; k >= 0; k-- {
		g := groups[k]
		rank := len(groups) - 1 - k
		prio := 1
		if rank >= exErrors {
			prio = 3
		} else if rank >= 5 {
			prio = 2
		}
		times := ""
		if g.count > 1 {
			times = fmt.Sprintf(" ×%d", g.count)
		}
		head := fmt.Sprintf("- %s%s failed%s: %s\n", x.short(g.last), x.at(g.last.resIdx), times, x.rel(oneLine(truncRunes(g.msg, exErrorRunes))))
		fix := "  - not resolved in the summarized messages.\n"
		if g.fix != "" {
			fix = "  - fixed: " + g.fix + "\n"
		}
		items = append(items, exItem{sec: secErrors, order: g.first.idx, rank: rank, prio: prio, text: head + fix})
	}
	if len(groups) == 0 && x.hasPrev {
		items = append(items, exItem{sec: secErrors, order: 0, prio: 0, text: exNoFailuresSince + "\n"})
	}
	items = append(items, x.carriedItems(HeadingErrors, secErrors, 2, len(x.msgs)+1, "Failed tool calls", exEarlier)...)
	if x.abandoned > 0 {
		items = append(items, exItem{sec: secErrors, order: len(x.msgs), prio: 1,
			text: fmt.Sprintf("- %d tool call(s) abandoned (interrupted, no result).\n", x.abandoned)})
	}
	return items
}

// errorLine is the message of a failed result: its first meaningful line,
// without Claude Code's <tool_use_error> tags.
func errorLine(s string) string {
	s = strings.ReplaceAll(strings.ReplaceAll(s, "<tool_use_error>", ""), "</tool_use_error>", "")
	lines := strings.Split(s, "\n")
	// A line that names the error beats a warning printed before it.
	for k, l := range lines {
		if k == 40 {
			break
		}
		if l = strings.TrimSpace(l); exErrorWordRe.MatchString(l) && !exWarnRe.MatchString(l) {
			return l
		}
	}
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "Exit code") || strings.HasPrefix(l, "{\"exit_code\"") {
			continue
		}
		return l
	}
	return strings.TrimSpace(s)
}

var (
	exErrorWordRe = regexp.MustCompile(`(?i)\b(error|failed|failure|fatal|exception|cannot|can't|not found|no such|denied|invalid|undefined|panic)\b`)
	exWarnRe      = regexp.MustCompile(`(?i)^(npm warn|warning\b|\[warn)`)
	// exLookCmds are commands that look rather than act: a later one is
	// another look, not the same action retried.
	exLookCmds = map[string]bool{"find": true, "grep": true, "rg": true, "ls": true, "cat": true, "head": true,
		"tail": true, "echo": true, "tree": true, "pwd": true, "wc": true, "sed": true, "awk": true, "which": true}
)

// actionKey identifies what a call acted on, to recognise a later attempt
// at the same action: its file, else its command's first two words, else
// nothing (the tool name alone).
func actionKey(c *exCall) string {
	if c.file != "" {
		return c.file
	}
	if c.cmd != "" {
		f := strings.Fields(stripCd(c.cmd))
		if len(f) > 0 && exLookCmds[f[0]] {
			return stripCd(c.cmd)
		}
		if len(f) > 2 {
			f = f[:2]
		}
		return strings.Join(f, " ")
	}
	return ""
}

// fixAfter describes what made the action of the failed call x.calls[k]
// succeed later: the first later successful call of the same tool on the
// same action, and the successful writes and commands in between. "" when
// the action never succeeded afterwards.
func (x *extraction) fixAfter(k int) string {
	f := x.calls[k]
	key := actionKey(f)
	var ok *exCall
	for _, c := range x.calls[k+1:] {
		if !c.done || c.failed() {
			continue
		}
		same := actionKey(c) == key && (c.name == f.name || (f.file != "" && isWrite(f) && isWrite(c)))
		if !same && f.cmd != "" && key != "" && c.cmd != "" && strings.Contains(c.cmd, key) {
			same = true // the command run again inside a longer one
		}
		if !same && f.file != "" && isWrite(f) && c.cmd != "" && redirectsTo(c.cmd, f.file) {
			same = true // the file written by a shell command instead
		}
		if same {
			ok = c
			break
		}
	}
	if ok == nil {
		return ""
	}
	var changes []string
	nWrites, nRan := 0, 0
	for _, c := range x.calls[k+1:] {
		if c == ok {
			break
		}
		if !c.done || c.failed() {
			continue
		}
		switch {
		case len(c.edits) > 0 || (c.file != "" && toolOp(c.name) == "write"):
			nWrites++
			if nWrites > 3 {
				continue
			}
			desc := "edited " + x.rel(editTarget(c))
			var ids []string
			for _, e := range c.edits {
				a, r, ch := identDeltaWith(x.ids.identifiers, e)
				for _, n := range a {
					ids = append(ids, "+"+n)
				}
				for _, n := range r {
					ids = append(ids, "−"+n)
				}
				for _, n := range ch {
					ids = append(ids, "~"+n)
				}
			}
			if len(ids) > 6 {
				ids = append(ids[:6], "…")
			}
			if len(ids) > 0 {
				desc += " (" + strings.Join(ids, " ") + ")"
			}
			changes = append(changes, desc)
		case c.file != "" && c.file == f.file && toolOp(c.name) == "read":
			changes = append(changes, "read "+x.rel(c.file)+" first")
		case c.cmd != "" && nRan < 2 && !strings.Contains(c.cmd, key):
			if exTestCmdRe.MatchString(c.cmd) || strings.Contains(c.cmd, "install") || strings.Contains(c.cmd, " get") || strings.Contains(c.cmd, "format") {
				nRan++
				changes = append(changes, "ran `"+x.rel(truncRunes(oneLine(stripCd(c.cmd)), 70))+"`")
			}
		}
	}
	if nWrites > 3 {
		changes = append(changes, fmt.Sprintf("%d more edits", nWrites-3))
	}
	var b strings.Builder
	if len(changes) > 0 {
		b.WriteString(strings.Join(dedupe(changes), "; ") + "; then ")
	}
	switch {
	case ok.cmd != "" && ok.cmd != f.cmd:
		fmt.Fprintf(&b, "`%s` succeeded%s", x.rel(truncRunes(stripCd(ok.cmd), 90)), x.at(ok.idx))
	case ok.cmd != "":
		fmt.Fprintf(&b, "the same command succeeded%s", x.at(ok.idx))
	default:
		fmt.Fprintf(&b, "%s succeeded%s", x.short(ok), x.at(ok.idx))
	}
	return b.String()
}

// isWrite reports whether a call writes a file.
func isWrite(c *exCall) bool {
	return len(c.edits) > 0 || (c.file != "" && toolOp(c.name) == "write")
}

// redirectsTo reports whether a shell command writes file p with a
// redirection ("cat > dir/p <<EOF", "tee p").
func redirectsTo(cmd, p string) bool {
	base := p[strings.LastIndexByte(p, '/')+1:]
	for _, op := range []string{">", "tee "} {
		for rest := cmd; ; {
			i := strings.Index(rest, op)
			if i < 0 {
				break
			}
			rest = rest[i+len(op):]
			f := strings.Fields(strings.TrimLeft(rest, "> "))
			if len(f) > 0 && (f[0] == p || strings.HasSuffix(f[0], "/"+base) || f[0] == base) {
				return true
			}
		}
	}
	return false
}

// short names a call briefly: its tool and command, or its tool and file.
func (x *extraction) short(c *exCall) string {
	switch {
	case c.cmd != "":
		return fmt.Sprintf("%s `%s`", c.name, x.rel(truncRunes(stripCd(c.cmd), 90)))
	case c.file != "":
		return c.name + " " + x.rel(c.file)
	}
	return x.rel(callSummary(c))
}

// editTarget names the file of an edit call.
func editTarget(c *exCall) string {
	for _, e := range c.edits {
		if e.path != "" {
			return e.path
		}
	}
	if c.file != "" {
		return c.file
	}
	return c.name
}

// dedupe removes repeated strings, keeping the first of each.
func dedupe(ss []string) []string {
	var out []string
	for _, s := range ss {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

func (x *extraction) reasoning() []exItem {
	var items []exItem
	// Reasoning lines of the recent assistant texts, oldest first.
	var lines []string
	seen := map[string]bool{}
	for k := len(x.assistants) - 1; k >= 0 && len(lines) < exReasonLines; k-- {
		text := messageText(&x.msgs[x.assistants[k]])
		var found []string
		for _, l := range strings.Split(text, "\n") {
			l = strings.TrimSpace(l)
			if len(l) < 20 || !exReasonRe.MatchString(l) {
				continue
			}
			l = truncRunes(x.rel(l), exLineRunes)
			if !seen[l] {
				seen[l] = true
				found = append(found, l)
			}
		}
		for j := len(found) - 1; j >= 0 && len(lines) < exReasonLines; j-- {
			lines = append(lines, found[j])
		}
	}
	for j := len(lines) - 1; j >= 0; j-- {
		items = append(items, exItem{sec: secReasoning, order: 100 + len(lines) - j, prio: 3,
			group: "Reasoning from the latest assistant messages (oldest first):", text: fmt.Sprintf("- %s\n", lines[j])})
	}
	if n := len(x.thinking); n > 0 {
		th := x.thinking[max(0, n-exThinking):]
		for k, t := range th {
			items = append(items, exItem{sec: secReasoning, order: k, prio: 4, group: "Latest thinking (oldest first):",
				text: quote(truncRunes(strings.TrimSpace(x.rel(t)), exThinkingRunes)) + "\n"})
		}
	}
	return items
}

func (x *extraction) nextSteps() []exItem {
	var items []exItem
	add := func(prio int, text, alt string) {
		items = append(items, exItem{sec: secNext, order: len(items), prio: prio, text: text, alt: alt})
	}
	lastReq, lastAsst := -1, -1
	if reqs := x.requests(); len(reqs) > 0 {
		lastReq = reqs[len(reqs)-1].idx
	}
	if n := len(x.assistants); n > 0 {
		lastAsst = x.assistants[n-1]
	}
	if lastReq > lastAsst && lastReq >= 0 {
		add(0, fmt.Sprintf("- Answer the latest user request%s (quoted under Goal).\n", x.at(lastReq)), "")
	}
	if open := x.openCalls(); len(open) > 0 {
		add(0, fmt.Sprintf("- %d tool call(s) have no result (see State): re-run them or treat them as abandoned.\n", len(open)), "")
	}
	if n := len(x.calls); n > 0 && x.calls[n-1].failed() {
		add(0, fmt.Sprintf("- The last tool call failed: %s — fix the cause before going on.\n", x.rel(callSummary(x.calls[n-1]))), "")
	}
	if lastAsst < 0 {
		// Nothing said since the earlier checkpoint: its next steps stand.
		items = append(items, x.carriedItems(HeadingNextSteps, secNext, 1, 1, "")...)
	}
	if lastAsst >= 0 {
		// The last assistant message in full: it usually states what was
		// just done and what comes next.
		text := x.rel(strings.TrimSpace(messageText(&x.msgs[lastAsst])))
		add(0, fmt.Sprintf("- Last assistant message%s:\n%s\n", x.at(lastAsst), quote(truncRunes(text, exLastMessageRunes))),
			fmt.Sprintf("- Last assistant message%s:\n%s\n", x.at(lastAsst), quote(truncRunes(text, 700))))
		// A short last message ("Done.", "👍") says little: the latest
		// substantive one comes with it.
		substantive := false
		if len(text) < 200 {
			for k := len(x.assistants) - 2; k >= 0 && !substantive; k-- {
				i := x.assistants[k]
				if t := x.rel(strings.TrimSpace(messageText(&x.msgs[i]))); len(t) >= 200 {
					add(1, fmt.Sprintf("- Latest substantive assistant message%s:\n%s\n", x.at(i), quote(truncRunes(t, 1000))),
						fmt.Sprintf("- Latest substantive assistant message%s:\n%s\n", x.at(i), quote(truncRunes(t, 400))))
					substantive = true
				}
			}
		}
		// A plan stated in an earlier message when the last one is short.
		if len(text) < 400 && !substantive {
			for k := len(x.assistants) - 2; k >= 0 && k >= len(x.assistants)-4; k-- {
				i := x.assistants[k]
				var plan []string
				for _, l := range strings.Split(messageText(&x.msgs[i]), "\n") {
					if exNextRe.MatchString(l) || strings.HasPrefix(strings.TrimSpace(l), "- ") || numbered(l) {
						plan = append(plan, truncRunes(strings.TrimSpace(x.rel(l)), exLineRunes))
					}
				}
				if len(plan) >= 2 && strings.TrimSpace(messageText(&x.msgs[i])) != strings.TrimSpace(messageText(&x.msgs[lastAsst])) {
					var b strings.Builder
					fmt.Fprintf(&b, "- Plan stated earlier%s:\n", x.at(i))
					for _, l := range plan {
						fmt.Fprintf(&b, "  - %s\n", strings.TrimLeft(l, "-* "))
					}
					add(1, b.String(), "")
					break
				}
			}
		}
	}
	return items
}

// numbered reports whether l starts a numbered list item.
func numbered(l string) bool {
	l = strings.TrimSpace(l)
	i := 0
	for i < len(l) && l[i] >= '0' && l[i] <= '9' {
		i++
	}
	return i > 0 && i < len(l) && (l[i] == '.' || l[i] == ')')
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

// exItem is one piece of the extractive summary: its section, its place
// in the section, its priority (0 is kept first) and its text; alt is a
// shorter form used when the full text does not fit. Items of one group
// are printed under the group's label.
type exItem struct {
	sec   int
	order int
	rank  int // within its section and priority, lower is taken first; ties by order
	prio  int
	group string
	text  string
	alt   string
}

// exTinyRoom is the least room, in bytes, the sections need beside their
// headings; a smaller budget gets the goal alone.
const exTinyRoom = 200

// exSmallBudget is the budget, in bytes, below which sections say
// "—" when empty and "[…]" when cut.
const exSmallBudget = 3000

// exCutMarker ends a section some of whose items were left out, or an
// item that was cut, to fit the byte budget.
const exCutMarker = "[… more left out to fit the summary budget]"

// fitItems builds the summary from items within maxBytes: items are taken
// by priority (then section, then place) while they fit, a shorter form
// when the full one does not; the kept items are printed in section order
// under every heading. A section that lost items says so.
func fitItems(title string, items []exItem, maxBytes int) string {
	fixed := len(title)
	for _, h := range exHeadings {
		fixed += len(h) + 3 // "\n" after the heading, "\n\n" after the body
	}
	if fixed+exTinyRoom >= maxBytes {
		// No room for the sections beside their headings: the goal alone,
		// the user's own words first (an empty section heading holds no
		// fact).
		var b strings.Builder
		b.WriteString(strings.TrimSuffix(title, "\n") + exHeadings[secGoal] + "\n")
		goal := make([]exItem, 0, len(items))
		for _, it := range items {
			if it.sec == secGoal {
				goal = append(goal, it)
			}
		}
		sort.SliceStable(goal, func(a, b int) bool { return goal[a].prio < goal[b].prio })
		for _, it := range goal {
			b.WriteString(strings.TrimPrefix(it.text, "\n"))
		}
		return truncateBytes(b.String(), maxBytes)
	}
	order := make([]int, len(items))
	for i := range order {
		order[i] = i
	}
	// Within a priority the sections take turns (the first item of each,
	// then the second of each …), so one long section cannot starve the
	// others at a small budget.
	sort.SliceStable(order, func(a, b int) bool {
		ia, ib := items[order[a]], items[order[b]]
		if ia.prio != ib.prio {
			return ia.prio < ib.prio
		}
		if ia.sec != ib.sec {
			return ia.sec < ib.sec
		}
		if ia.rank != ib.rank {
			return ia.rank < ib.rank
		}
		return ia.order < ib.order
	})
	turn := make([]int, len(items))
	count := map[[2]int]int{}
	for _, i := range order {
		k := [2]int{items[i].prio, items[i].sec}
		turn[i] = count[k]
		count[k]++
	}
	sort.SliceStable(order, func(a, b int) bool {
		ia, ib := items[order[a]], items[order[b]]
		if ia.prio != ib.prio {
			return ia.prio < ib.prio
		}
		if turn[order[a]] != turn[order[b]] {
			return turn[order[a]] < turn[order[b]]
		}
		return ia.sec < ib.sec
	})
	// Room for the empty-section lines and the cut markers; a small
	// budget gets short ones, so the room goes to what was said.
	empty, marker := exEmpty, exCutMarker
	if maxBytes < exSmallBudget {
		for s := range empty {
			empty[s] = "—"
		}
		marker = "[…]"
	}
	reserve := 0
	for s := range secCount {
		reserve += max(len(marker), len(empty[s])) + 2
	}
	budget := maxBytes - fixed - reserve
	if budget < 0 {
		budget = maxBytes - fixed
	}
	kept := make([]string, len(items))
	headed := map[string]bool{}
	dropped := [secCount]int{}
	used := 0
	for _, i := range order {
		it := items[i]
		gkey := fmt.Sprintf("%d\x00%s", it.sec, it.group)
		head := 0
		if it.group != "" && !headed[gkey] {
			head = len(it.group) + 1
		}
		switch {
		case used+head+len(it.text) <= budget:
			kept[i] = it.text
		case it.alt != "" && used+head+len(it.alt) <= budget:
			kept[i] = it.alt
			dropped[it.sec]++
		default:
			// A first request or a last message that fits in no form is
			// cut rather than lost.
			if it.prio == 0 && budget-used-head > 200 {
				t := it.alt
				if t == "" {
					t = it.text
				}
				kept[i] = cutText(t, budget-used-head)
				dropped[it.sec]++
			} else {
				dropped[it.sec]++
				continue
			}
		}
		used += head + len(kept[i])
		if it.group != "" {
			headed[gkey] = true
		}
	}
	// Print in section order, items in their place order.
	byPlace := make([]int, len(items))
	for i := range byPlace {
		byPlace[i] = i
	}
	sort.SliceStable(byPlace, func(a, b int) bool {
		ia, ib := items[byPlace[a]], items[byPlace[b]]
		if ia.sec != ib.sec {
			return ia.sec < ib.sec
		}
		return ia.order < ib.order
	})
	render := func() string {
		var bodies [secCount]strings.Builder
		printedGroup := map[string]bool{}
		for _, i := range byPlace {
			if kept[i] == "" {
				continue
			}
			it := items[i]
			b := &bodies[it.sec]
			gkey := fmt.Sprintf("%d\x00%s", it.sec, it.group)
			if it.group != "" && !printedGroup[gkey] {
				printedGroup[gkey] = true
				b.WriteString(it.group + "\n")
			}
			b.WriteString(kept[i])
		}
		var out strings.Builder
		out.WriteString(title)
		for s := range secCount {
			out.WriteString(exHeadings[s] + "\n")
			body := strings.Trim(bodies[s].String(), "\n")
			if body == "" {
				body = empty[s]
			}
			if dropped[s] > 0 {
				body += "\n" + marker
			}
			out.WriteString(body + "\n\n")
		}
		return strings.TrimRight(out.String(), "\n") + "\n"
	}
	res := render()
	// The reserve is an estimate: while the whole is too long, leave out
	// the least important item kept.
	for k := len(order) - 1; len(res) > maxBytes && k >= 0; k-- {
		if i := order[k]; kept[i] != "" {
			kept[i] = ""
			dropped[items[i].sec]++
			res = render()
		}
	}
	if len(res) > maxBytes { // never exceed the hard limit
		res = truncateBytes(res, maxBytes)
	}
	return res
}

// cutText cuts s to at most n bytes at a line end when one is near, else
// on a code-point boundary, and marks the cut with "…".
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	limit := n - len("…\n")
	if limit <= 0 {
		return ""
	}
	cut := strings.LastIndexByte(s[:limit], '\n')
	if cut < limit/2 {
		cut = len(truncateBytes(s, limit))
	}
	return s[:cut] + "…\n"
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

// What a section says when it has nothing.
const (
	exNoFailures      = "No failed tool calls."
	exNoFailuresSince = "No failed tool calls since the earlier checkpoint."
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

// sectionPart returns the block of a section body that starts with the
// line label (up to the next blank line that is followed by a line not
// starting with "-", ">" or a space), or "".
func sectionPart(body, label string) string {
	i := strings.Index(body, label)
	if i < 0 {
		return ""
	}
	lines := strings.Split(body[i:], "\n")
	out := []string{lines[0]}
	for _, l := range lines[1:] {
		if l == "" || !(strings.HasPrefix(l, "-") || strings.HasPrefix(l, ">") || strings.HasPrefix(l, " ")) {
			break
		}
		out = append(out, l)
	}
	return truncRunes(strings.Join(out, "\n"), exTaskRunes)
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
	if c := strings.TrimSpace(commandText(in)); c != "" {
		return oneLine(truncRunes(c, exCommandRunes))
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
