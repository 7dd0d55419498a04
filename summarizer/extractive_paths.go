package summarizer

import (
	"path"
	"regexp"
	"sort"
	"strings"
)

// Paths in the extractive summary are written relative to the session's
// working directory, named once in State: 35–45 % of a summary used to be
// file lists with full absolute paths. The directory is the one
// the history states (a Codex <environment_context> <cwd>, a SWE-agent
// "(Current directory: …)" line, a tool call's workdir/cwd input, a leading
// "cd DIR &&"), else the deepest directory holding the files the agent
// wrote and most of those it read.

var (
	exCwdTagRe   = regexp.MustCompile(`<cwd>\s*([^<\n]+?)\s*</cwd>`)
	exCurDirRe   = regexp.MustCompile(`\(Current directory: (/[^)\n]*)\)`)
	exCdPrefixRe = regexp.MustCompile(`^\s*cd\s+("?)(/[^"&;|\s]+)("?)\s*(?:&&|;)`)
)

// exScratchDirs are directories whose files never decide the working
// directory (temporary files, agent state).
var exScratchDirs = []string{"/tmp/", "/var/", "/private/", "/dev/", "/proc/"}

// statedWorkDir returns the working directory the history states, the
// most frequent one when several are stated, or "".
func (x *extraction) statedWorkDir() string {
	count := map[string]int{}
	for i := range x.msgs {
		m := &x.msgs[i]
		for _, b := range m.Content {
			if b.Type != "text" {
				continue
			}
			if m.Role == "user" {
				for _, s := range exCwdTagRe.FindAllStringSubmatch(b.Text, -1) {
					count[cleanDir(s[1])] += 10
				}
			}
			if m.Role == "tool" {
				for _, s := range exCurDirRe.FindAllStringSubmatch(b.Text, -1) {
					count[cleanDir(s[1])]++
				}
			}
		}
	}
	for _, c := range x.calls {
		for _, k := range []string{"workdir", "cwd", "working_directory"} {
			if s, ok := c.input[k].(string); ok && strings.HasPrefix(s, "/") {
				count[cleanDir(s)]++
			}
		}
		if m := exCdPrefixRe.FindStringSubmatch(commandText(c.input)); m != nil {
			count[cleanDir(m[2])]++
		}
	}
	best, n := "", 0
	for d, c := range count {
		if d == "/" || d == "" {
			continue
		}
		if c > n || (c == n && d < best) {
			best, n = d, c
		}
	}
	return best
}

func cleanDir(d string) string {
	d = path.Clean(strings.TrimSpace(d))
	if d == "." {
		return ""
	}
	return d
}

// inferWorkDir returns the deepest directory that holds every file the
// agent wrote and at least 60 % of the absolute paths named, scratch
// directories aside; "" when no such directory at least three levels deep
// exists.
func inferWorkDir(written, all []string) string {
	keep := func(ps []string) []string {
		var out []string
		for _, p := range ps {
			if !strings.HasPrefix(p, "/") {
				continue
			}
			scratch := false
			for _, s := range exScratchDirs {
				if strings.HasPrefix(p, s) {
					scratch = true
				}
			}
			if !scratch {
				out = append(out, path.Clean(p))
			}
		}
		return out
	}
	written, all = keep(written), keep(all)
	if len(all) == 0 {
		return ""
	}
	// Candidates: every ancestor directory of every path.
	counts := map[string]int{}
	for _, p := range all {
		for d := path.Dir(p); d != "/" && d != "."; d = path.Dir(d) {
			counts[d]++
		}
	}
	cands := make([]string, 0, len(counts))
	for d := range counts {
		cands = append(cands, d)
	}
	// Deepest first, then by name, so the choice is deterministic.
	sort.Slice(cands, func(i, j int) bool {
		di, dj := strings.Count(cands[i], "/"), strings.Count(cands[j], "/")
		if di != dj {
			return di > dj
		}
		return cands[i] < cands[j]
	})
	for _, d := range cands {
		if strings.Count(d, "/") < 3 || counts[d]*10 < len(all)*6 {
			continue
		}
		holdsWrites := true
		for _, w := range written {
			if !strings.HasPrefix(w, d+"/") {
				holdsWrites = false
				break
			}
		}
		// Two distinct entries under it, so one file's own folder is not
		// taken for the project.
		if holdsWrites && distinctChildren(d, all) >= 2 {
			return d
		}
	}
	return ""
}

// distinctChildren counts the distinct entries directly under d that paths
// lie in.
func distinctChildren(d string, paths []string) int {
	seen := map[string]bool{}
	for _, p := range paths {
		if rest, ok := strings.CutPrefix(p, d+"/"); ok {
			seen[strings.SplitN(rest, "/", 2)[0]] = true
		}
	}
	return len(seen)
}

// rel rewrites absolute paths under the working directory as relative
// ones, in any text (a path, a command, an error line).
func (x *extraction) rel(s string) string {
	if x.workDir == "" || !strings.Contains(s, x.workDir) {
		return s
	}
	if s == x.workDir {
		return "."
	}
	s = strings.ReplaceAll(s, x.workDir+"/", "")
	return s
}
