package summarizer

import (
	"fmt"
	"path"
	"regexp"
	"strings"
)

// Carrying an earlier summary forward. ctxd compacts again and again: the
// history of the second compaction starts with the first one's summary.
// What that summary kept is carried entry by entry — its files merged with
// the files written since, its commands, decisions, errors and artifacts
// as items of lower priority than what happened since — so a fact survives
// as long as the budget has room for it, and nothing nests.

// exPrevEntry is one entry of an earlier summary's section: a "- " line
// with its continuation lines, and the label of the group it was under.
type exPrevEntry struct {
	group string
	text  string
}

// prevEntries splits the body of section heading of the earlier summary
// into entries. Labels, markers and empty-section lines are not entries.
func (x *extraction) prevEntries(heading string) []exPrevEntry {
	if !x.hasPrev {
		return nil
	}
	var out []exPrevEntry
	group := ""
	for _, l := range strings.Split(sectionBody(x.prev, heading), "\n") {
		t := strings.TrimSpace(l)
		switch {
		case t == "" || t == exCutMarker || t == "[…]" || t == "—":
		case strings.HasPrefix(l, "- "):
			out = append(out, exPrevEntry{group: group, text: l + "\n"})
		case (strings.HasPrefix(l, "  ") || strings.HasPrefix(l, ">")) && len(out) > 0:
			out[len(out)-1].text += l + "\n"
		default:
			group = t
		}
	}
	return out
}

// in reports whether an entry's group label starts with prefix.
func (e exPrevEntry) in(prefix string) bool { return strings.HasPrefix(e.group, prefix) }

var (
	exPrevWorkDirRe  = regexp.MustCompile(`(?m)^- Working directory: (\S+) \(`)
	exPrevModifiedRe = regexp.MustCompile(`^- (\S+) \(([^)]*)\)(?:(: |; )(.*))?$`)
	exPrevSnippetRe  = regexp.MustCompile("wrote `([^`]*)`")
	exPrevWritesRe   = regexp.MustCompile(`writes ×(\d+)`)
	exPrevReadsRe    = regexp.MustCompile(`reads ×(\d+)`)
)

// prevWorkDir is the working directory the earlier summary named.
func (x *extraction) prevWorkDir() string {
	if m := exPrevWorkDirRe.FindStringSubmatch(sectionBody(x.prev, HeadingState)); m != nil {
		return m[1]
	}
	return ""
}

// carryFiles merges the earlier summary's modified files into fileMap
// (before any call of this history, so recent files still sort first) and
// its artifacts into the artifact list.
func (x *extraction) carryFiles() {
	if !x.hasPrev {
		return
	}
	wd := x.prevWorkDir()
	if x.workDir == "" {
		x.workDir = wd
	}
	var arts []string
	for _, e := range x.prevEntries(HeadingFiles) {
		line := strings.TrimSpace(strings.SplitN(e.text, "\n", 2)[0])
		switch {
		case e.in("Modified"):
			m := exPrevModifiedRe.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			p := m[1]
			if wd != "" && !strings.HasPrefix(p, "/") {
				p = path.Join(wd, p)
			}
			f := x.fileMap[p]
			if f == nil {
				f = &exFile{path: p, last: -1}
				x.fileMap[p] = f
			}
			if w := exPrevWritesRe.FindStringSubmatch(m[2]); w != nil {
				var n int
				fmt.Sscan(w[1], &n)
				f.write += n
			}
			if r := exPrevReadsRe.FindStringSubmatch(m[2]); r != nil {
				var n int
				fmt.Sscan(r[1], &n)
				f.reads += n
			}
			f.created = f.created || strings.Contains(m[2], "new")
			var added, removed, changed, snippets []string
			// "- p (…): names; wrote `…`", or "- p (…); wrote `…`" for a
			// file whose edits added no name.
			ids, wrote, _ := strings.Cut(m[4], "; wrote ")
			if m[3] == "; " {
				ids, wrote = "", m[4]
			}
			for _, sm := range exPrevSnippetRe.FindAllStringSubmatch("wrote "+wrote, -1) {
				snippets = append(snippets, sm[1])
			}
			for _, tok := range strings.Fields(ids) {
				switch {
				case strings.HasPrefix(tok, "+"):
					added = append(added, tok[1:])
				case strings.HasPrefix(tok, "−"):
					removed = append(removed, strings.TrimPrefix(tok, "−"))
				case strings.HasPrefix(tok, "~"):
					changed = append(changed, tok[1:])
				}
			}
			// Earlier names first: the ones written since follow.
			f.added = appendNew(added, f.added...)
			f.removed = appendNew(removed, f.removed...)
			f.changed = appendNew(changed, f.changed...)
			// What a small edit wrote (a one-line fix) is the fact itself.
			f.snippets = appendNew(snippets, f.snippets...)
		case e.in("Artifacts"):
			if u := exArtifactRe.FindString(line); u != "" && !x.seenArt[u] {
				x.seenArt[u] = true
				arts = append(arts, u)
			}
		}
	}
	x.artifacts = append(arts, x.artifacts...)
}

// carriedItems returns the earlier summary's entries of a section as items
// of section sec under the label exEarlier: the groups named by keep (by
// label prefix; all when empty), latest first in priority, at priority
// prio.
func (x *extraction) carriedItems(heading string, sec, prio, order int, keep ...string) []exItem {
	entries := x.prevEntries(heading)
	var picked []exPrevEntry
	for _, e := range entries {
		if sec == secNext && !strings.HasPrefix(e.text, "- Last assistant message") && !strings.HasPrefix(e.text, "- Latest substantive") && !strings.HasPrefix(e.text, "- Plan stated") {
			continue // the rest of the earlier next steps named its own positions
		}
		ok := len(keep) == 0
		for _, k := range keep {
			ok = ok || e.in(k)
		}
		if ok {
			picked = append(picked, e)
		}
	}
	var items []exItem
	for k, e := range picked {
		p, rank := prio, len(picked)-k
		// What holds however old it is keeps its priority: where the work
		// lives, the user's answers and standing rules.
		switch {
		case exBranchCmdRe.MatchString(e.text):
			p, rank = min(p, 1), 0
		case sec == secFiles && exKeyCmdRe.MatchString(e.text):
			// Milestones of the run (commits, closes) after the ones since.
			p, rank = min(p, 1), rank+exKeyCommands
		}
		if strings.HasPrefix(e.text, "- The user answered") || (strings.HasPrefix(e.text, "- The user") && exRuleRe.MatchString(e.text)) {
			p = min(p, 1)
		}
		items = append(items, exItem{sec: sec, order: order + k, rank: rank, prio: p,
			group: "\n" + exEarlier, text: e.text})
	}
	return items
}
