package config

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// pos is a 1-based line and column (columns count bytes, as go-toml does).
type pos struct{ line, col int }

// doc is what one TOML source says, before layering: the positions of the
// keys it authors, which tables it authors, and the problems found while
// reading it.
//
// Reading happens twice. scan walks go-toml's unstable AST against the
// schema (the Go struct types) and records every unknown key and every type
// error with its position — go-toml's decoder stops at the first type error,
// and the operator wants all of them. decode then fills the struct with
// go-toml's strict decoder; its errors are kept only where scan missed them
// (duplicate keys, syntax errors), so nothing is reported twice.
type doc struct {
	file string
	data []byte
	root reflect.Type
	// lines holds the byte offset of each line start.
	lines []int
	// pos maps each authored key path (tables, keys, array elements) to the
	// position of its key.
	pos map[string]pos
	// tables is the set of authored top-level tables.
	tables map[string]bool
	// leaves maps each key given a value to its position, to catch
	// duplicates.
	leaves map[string]pos
	// models lists the authored [models."<id>"] entries in order.
	models []string
	// problems found while reading.
	problems []Problem
	// bad lists the key paths whose values cannot be decoded (wrong type,
	// out of range, duplicate); blanks are the byte ranges of the
	// expressions holding them, which decode replaces with spaces so that
	// go-toml decodes everything else. Their tables keep defaults for those
	// keys and are not rule-checked (no spurious follow-up problems).
	bad    []string
	blanks []unstable.Range
	// expr is the top-level key-value being scanned; valid when inExpr.
	expr   unstable.Range
	inExpr bool
	// broken is set when go-toml could not decode the document (a syntax
	// error, a header of the wrong type): nothing in it is rule-checked.
	broken bool
	// overlay: the document is a session overlay, which may set only the
	// keys of overlayKeys (docs/design.md §3).
	overlay bool
}

// markBad records that the value at path cannot be decoded.
func (d *doc) markBad(path string) {
	d.bad = append(d.bad, path)
	if d.inExpr {
		d.blanks = append(d.blanks, d.expr)
	} else {
		d.broken = true
	}
}

// reliable reports whether every key this document authored under path
// (a table or model entry) was decoded.
func (d *doc) reliable(path string) bool {
	if d.broken {
		return false
	}
	for _, k := range d.bad {
		if k == path || strings.HasPrefix(k, path+".") || strings.HasPrefix(k, path+"[") {
			return false
		}
	}
	return true
}

// newDoc scans data as a document whose schema is the struct type root;
// overlay restricts it to the keys a session overlay may set.
func newDoc(file string, data []byte, root reflect.Type, overlay bool) *doc {
	d := &doc{
		overlay: overlay,
		file:    file,
		data:    data,
		root:    root,
		lines:   []int{0},
		pos:     map[string]pos{},
		tables:  map[string]bool{},
		leaves:  map[string]pos{},
	}
	for i, b := range data {
		if b == '\n' {
			d.lines = append(d.lines, i+1)
		}
	}
	d.scan()
	return d
}

// at converts a byte offset into a position.
func (d *doc) at(offset int) pos {
	i := sort.Search(len(d.lines), func(i int) bool { return d.lines[i] > offset }) - 1
	if i < 0 {
		i = 0
	}
	return pos{line: i + 1, col: offset - d.lines[i] + 1}
}

// rangePos is the position of an AST node's raw bytes.
func (d *doc) rangePos(r unstable.Range) pos {
	return d.at(int(r.Offset))
}

func (d *doc) problem(p pos, key, format string, args ...any) {
	d.problems = append(d.problems, Problem{File: d.file, Line: p.line, Col: p.col, Key: key, Message: fmt.Sprintf(format, args...)})
}

func (d *doc) record(path string, p pos) {
	if _, ok := d.pos[path]; !ok {
		d.pos[path] = p
	}
}

// author notes which top-level table (and model entry) a key path from the
// root belongs to.
func (d *doc) author(segs []string) {
	if len(segs) == 0 || d.root != reflect.TypeFor[Config]() {
		return
	}
	d.tables[segs[0]] = true
	if segs[0] == "models" && len(segs) >= 2 {
		for _, m := range d.models {
			if m == segs[1] {
				return
			}
		}
		d.models = append(d.models, segs[1])
	}
}

// scope is the table that key-values are currently read into.
type scope struct {
	t    reflect.Type // nil: an unknown table, already reported
	path string
	segs []string
}

func (d *doc) scan() {
	var p unstable.Parser
	p.Reset(d.data)
	cur := scope{t: d.root}
	arrays := map[string]int{}
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.KeyValue:
			d.expr, d.inExpr = e.Raw, true
			d.keyValue(cur, e)
			d.inExpr = false
		case unstable.Table, unstable.ArrayTable:
			cur = d.header(e, arrays)
		}
	}
	if p.Error() != nil {
		// decode reports the syntax error with go-toml's position; keys
		// after it were never seen, so nothing in this file is checked.
		d.broken = true
	}
}

// header resolves a [table] or [[array.table]] header against the schema.
func (d *doc) header(e *unstable.Node, arrays map[string]int) scope {
	t := d.root
	path := ""
	var segs []string
	it := e.Key()
	var first pos
	n := 0
	for it.Next() {
		k := it.Node()
		kp := d.rangePos(k.Raw)
		if n == 0 {
			first = kp
		}
		n++
		seg := string(k.Data)
		segs = append(segs, seg)
		path = childPath(path, seg)
		if t == nil {
			continue
		}
		last := it.IsLast()
		ft, ok := field(t, seg)
		if !ok {
			d.problem(first, path, "unknown table%s", suggest(t, seg))
			t = nil
			continue
		}
		d.record(path, kp)
		t = ft
		if isTableArray(t) {
			switch {
			case last && e.Kind == unstable.ArrayTable:
				i := arrays[path]
				arrays[path] = i + 1
				path = indexPath(path, i)
				d.record(path, kp)
				t = t.Elem()
			case last:
				d.problem(first, path, "is an array of tables: write [[%s]]", path)
				d.broken = true
				t = nil
			case arrays[path] == 0:
				d.problem(first, path, "no [[%s]] entry precedes this table", path)
				d.broken = true
				t = nil
			default:
				path = indexPath(path, arrays[path]-1)
				t = t.Elem()
			}
			continue
		}
		if last && e.Kind == unstable.ArrayTable {
			d.problem(first, path, "is not an array of tables: write [%s]", path)
			d.broken = true
			t = nil
			continue
		}
		if !isTable(t) {
			d.problem(first, path, "expected %s, got a table", typeName(t))
			d.broken = true
			t = nil
		}
	}
	if t != nil && d.refuseInOverlay(segs, d.headerPos(first)) {
		// Reported once here; the keys inside are not looked at.
		return scope{}
	}
	d.author(segs)
	return scope{t: t, path: path, segs: segs}
}

// headerPos is where the header whose first key is at `at` starts: its
// "[" or "[[" (the parser gives no range for a header).
func (d *doc) headerPos(at pos) pos {
	if at.line < 1 || at.line > len(d.lines) {
		return at
	}
	start := d.lines[at.line-1]
	off := start + at.col - 1
	for off > start && off <= len(d.data) && (d.data[off-1] == '[' || d.data[off-1] == ' ' || d.data[off-1] == '\t') {
		off--
	}
	return d.at(off)
}

// keyValue checks one key = value inside scope sc.
func (d *doc) keyValue(sc scope, e *unstable.Node) {
	if sc.t == nil {
		return // inside an unknown table: reported once, at its header
	}
	t := sc.t
	path := sc.path
	segs := append([]string(nil), sc.segs...)
	it := e.Key()
	var first pos
	n := 0
	for it.Next() {
		k := it.Node()
		kp := d.rangePos(k.Raw)
		if n == 0 {
			first = kp
		}
		n++
		seg := string(k.Data)
		segs = append(segs, seg)
		path = childPath(path, seg)
		ft, ok := field(t, seg)
		if !ok {
			d.problem(first, path, "unknown key%s", suggest(t, seg))
			d.author(segs[:1])
			return
		}
		d.record(path, kp)
		t = ft
		if !it.IsLast() && !isTable(t) {
			d.problem(first, path, "expected %s, got a table", typeName(t))
			d.markBad(path)
			d.author(segs)
			return
		}
	}
	if d.refuseInOverlay(segs, first) {
		d.markBad(path)
		return
	}
	d.author(segs)
	if prev, dup := d.leaves[path]; dup {
		d.problem(first, path, "already set on line %d: a key may appear once", prev.line)
		d.markBad(path)
		return
	}
	d.leaves[path] = first
	d.value(t, e.Value(), path, segs, first)
}

// value checks that v can be decoded into t; segs are the key segments
// from the root and kp is the position of the key that owns v.
func (d *doc) value(t reflect.Type, v *unstable.Node, path string, segs []string, kp pos) {
	if v.Raw.Length > 0 {
		kp = d.rangePos(v.Raw)
	}
	mismatch := func() {
		d.problem(kp, path, "expected %s, got %s", typeName(t), kindName(v.Kind))
		d.markBad(path)
	}
	switch t.Kind() {
	case reflect.Bool:
		if v.Kind != unstable.Bool {
			mismatch()
		}
	case reflect.String:
		if v.Kind != unstable.String {
			mismatch()
		}
	case reflect.Uint64, reflect.Uint32:
		if v.Kind != unstable.Integer {
			mismatch()
			return
		}
		n, err := strconv.ParseInt(string(v.Data), 0, 64)
		switch {
		case err != nil:
			d.problem(kp, path, "integer out of range")
			d.markBad(path)
		case n < 0:
			d.problem(kp, path, "must not be negative (got %d)", n)
			d.markBad(path)
		case t.Kind() == reflect.Uint32 && n > math.MaxUint32:
			d.problem(kp, path, "out of range: at most %d", uint64(math.MaxUint32))
			d.markBad(path)
		}
	case reflect.Float64:
		if v.Kind != unstable.Float && v.Kind != unstable.Integer {
			mismatch()
		}
	case reflect.Slice:
		if v.Kind != unstable.Array {
			mismatch()
			return
		}
		i := 0
		for c := v.Children(); c.Next(); {
			if c.Node().Kind == unstable.Comment {
				continue
			}
			ip := indexPath(path, i)
			d.record(ip, kp)
			d.value(t.Elem(), c.Node(), ip, segs, kp)
			i++
		}
	case reflect.Struct, reflect.Map:
		if v.Kind != unstable.InlineTable {
			mismatch()
			return
		}
		for c := v.Children(); c.Next(); {
			if c.Node().Kind != unstable.KeyValue {
				continue
			}
			d.keyValue(scope{t: t, path: path, segs: segs}, c.Node())
		}
	}
}

// decode fills into (a pointer to a struct of type d.root) with go-toml's
// strict decoder and keeps the problems scan did not already report.
func (d *doc) decode(into any) {
	data := d.data
	if len(d.blanks) > 0 {
		data = bytes.Clone(d.data)
		for _, r := range d.blanks {
			for i := r.Offset; i < r.Offset+r.Length && int(i) < len(data); i++ {
				if data[i] != '\n' && data[i] != '\r' {
					data[i] = ' '
				}
			}
		}
	}
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(into)
	if err == nil {
		return
	}
	seen := map[pos]bool{}
	seenLine := map[int]bool{}
	for _, p := range d.problems {
		seen[pos{p.Line, p.Col}] = true
		seenLine[p.Line] = true
	}
	var strict *toml.StrictMissingError
	var de *toml.DecodeError
	switch {
	case errors.As(err, &strict):
		for _, e := range strict.Errors {
			l, c := e.Position()
			if seen[pos{l, c}] {
				continue
			}
			d.problem(pos{l, c}, keyPath(e.Key()...), "unknown key")
		}
	case errors.As(err, &de):
		l, c := de.Position()
		d.broken = true
		if seenLine[l] {
			return
		}
		d.problem(pos{l, c}, keyPath(de.Key()...), "%s", strings.TrimPrefix(de.Error(), "toml: "))
	default:
		d.broken = true
		if len(d.problems) == 0 {
			d.problem(pos{1, 1}, "", "%v", err)
		}
	}
}

// field resolves key seg inside table type t: a struct field by its toml
// tag, or a map element.
func field(t reflect.Type, seg string) (reflect.Type, bool) {
	switch t.Kind() {
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if tagName(f) == seg {
				if f.Type.Kind() == reflect.Pointer && f.Type.Elem().Kind() == reflect.Struct {
					// An optional table ([models."<id>".price]).
					return f.Type.Elem(), true
				}
				return f.Type, true
			}
		}
	case reflect.Map:
		return t.Elem(), true
	}
	return nil, false
}

func tagName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
	if name == "-" || !f.IsExported() {
		return ""
	}
	return name
}

func isTable(t reflect.Type) bool {
	return t.Kind() == reflect.Struct || t.Kind() == reflect.Map
}

func isTableArray(t reflect.Type) bool {
	return t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct
}

// typeName names what a Go type accepts, for messages.
func typeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "a boolean (true or false)"
	case reflect.String:
		return "a string"
	case reflect.Uint64, reflect.Uint32:
		return "a non-negative integer"
	case reflect.Float64:
		return "a number"
	case reflect.Slice:
		if isTableArray(t) {
			return "an array of tables"
		}
		return "an array of " + strings.TrimPrefix(strings.TrimPrefix(typeName(t.Elem()), "a "), "an ") + "s"
	case reflect.Struct, reflect.Map:
		return "a table"
	}
	return t.String()
}

// kindName names what a TOML value is, for messages.
func kindName(k unstable.Kind) string {
	switch k {
	case unstable.String:
		return "a string"
	case unstable.Bool:
		return "a boolean"
	case unstable.Integer:
		return "an integer"
	case unstable.Float:
		return "a float"
	case unstable.Array:
		return "an array"
	case unstable.InlineTable:
		return "an inline table"
	case unstable.LocalDate, unstable.LocalTime, unstable.LocalDateTime, unstable.DateTime:
		return "a date-time"
	}
	return k.String()
}

// suggest proposes the closest known key of table type t, if one is close.
func suggest(t reflect.Type, seg string) string {
	if t.Kind() != reflect.Struct {
		return ""
	}
	best, bestD := "", 3
	for i := 0; i < t.NumField(); i++ {
		name := tagName(t.Field(i))
		if name == "" {
			continue
		}
		dist := editDistance(seg, name)
		if len(seg) >= 4 && (strings.HasPrefix(name, seg) || strings.HasPrefix(seg, name)) {
			dist = min(dist, 2) // "timeout" for "timeout_ms"
		}
		if dist < bestD {
			best, bestD = name, dist
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}

// editDistance is the Levenshtein distance of a and b in bytes.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
