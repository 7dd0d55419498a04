package offload

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ctxd/ctxd/artifacts"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/store"
)

var bg = context.Background()

// newArtifacts opens a real artifact store on disk: the in-memory badger
// caps one transaction near 1 MiB, below the 5 MB result tested here, while
// on disk large values go to the value log as in the daemon.
func newArtifacts(t testing.TB) *artifacts.Store {
	t.Helper()
	db, err := store.Open(t.TempDir(), store.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := artifacts.Open(db, bytes.Repeat([]byte{7}, artifacts.SecretSize))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		db.Close()
	})
	return s
}

// logCounter is a slog handler counting records per level.
type logCounter struct{ warn, debug, other *int }

func newLogCounter() (*slog.Logger, *logCounter) {
	c := &logCounter{new(int), new(int), new(int)}
	return slog.New(c), c
}

func (c *logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *logCounter) Handle(_ context.Context, r slog.Record) error {
	switch r.Level {
	case slog.LevelWarn:
		*c.warn++
	case slog.LevelDebug:
		*c.debug++
	default:
		*c.other++
	}
	return nil
}
func (c *logCounter) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *logCounter) WithGroup(string) slog.Handler      { return c }

func toolMsg(id, tool, text string) history.Message {
	return history.Message{
		Seq:        7,
		Role:       history.RoleTool,
		ToolCallID: id,
		ToolName:   tool,
		IsError:    true,
		Time:       time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC),
		Content:    []history.Block{{Type: history.BlockText, Text: text}},
		Tokens:     1234,
	}
}

func smallCfg() config.Offload {
	return config.Offload{Enabled: true, MaxChars: 100, KeepHead: 40, KeepTail: 10, Exclude: []string{"read"}}
}

// stubParts splits a stub into its header line, head and tail, relying on
// the layout Stub documents (the test texts hold no "\n[… ").
func stubParts(t *testing.T, stub string) (header, head, tail string) {
	t.Helper()
	nl := strings.IndexByte(stub, '\n')
	mid := strings.Index(stub, "\n[… ")
	midEnd := strings.Index(stub, " omitted …]\n")
	last := strings.LastIndex(stub, "\n[To see the omitted part")
	if nl < 0 || mid < nl || midEnd < mid || last < midEnd {
		t.Fatalf("stub layout not recognised:\n%.300s", stub)
	}
	return stub[:nl], stub[nl+1 : mid], stub[midEnd+len(" omitted …]\n") : last]
}

func TestOffloadLimits(t *testing.T) {
	var emoji strings.Builder
	for i := range 5000 {
		emoji.WriteRune(rune(0x1F600 + i%80)) // 4 bytes each, all different within 80
	}
	var cjk strings.Builder
	for i := range 3001 {
		if i%3 == 0 {
			cjk.WriteByte('a' + byte(i%26))
		} else {
			cjk.WriteRune(rune(0x4E00 + i)) // 3 bytes
		}
	}
	var logs strings.Builder
	for i := 0; logs.Len() < 5<<20; i++ {
		fmt.Fprintf(&logs, "2025-01-02T03:04:05Z INFO line %d: request handled in %dms - ok\n", i, i%997)
	}
	big := logs.String()[:5<<20] // exactly 5 MiB of ASCII, cut mid-line

	mixed := strings.Repeat("é", 60) + strings.Repeat("👩‍💻", 30) + strings.Repeat("中", 60)

	cases := []struct {
		name string
		cfg  config.Offload
		text string
	}{
		{"5MB log, defaults", config.Offload{Enabled: true, MaxChars: config.DefaultOffloadMaxChars, KeepHead: config.DefaultOffloadKeepHead, KeepTail: config.DefaultOffloadKeepTail}, big},
		{"4-byte emoji", smallCfg(), emoji.String()},
		{"CJK and ASCII", config.Offload{Enabled: true, MaxChars: 1000, KeepHead: 333, KeepTail: 77}, cjk.String()},
		{"combining sequences", config.Offload{Enabled: true, MaxChars: 100, KeepHead: 61, KeepTail: 61 - 3}, mixed},
		{"one over the limit", smallCfg(), strings.Repeat("ß", 101)},
		{"no head", config.Offload{Enabled: true, MaxChars: 10, KeepHead: 0, KeepTail: 5}, strings.Repeat("🙂", 11)},
		{"no tail", config.Offload{Enabled: true, MaxChars: 10, KeepHead: 5, KeepTail: 0}, strings.Repeat("🙂", 11) + "\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			arts := newArtifacts(t)
			dir := t.TempDir()
			o := New(tc.cfg, dir, arts, nil)
			in := toolMsg("toolu_01ABC", "bash", tc.text)
			out, rec := o.Offload(bg, "sess-1", in)
			if rec == nil {
				t.Fatal("not offloaded")
			}
			chars := uint64(utf8.RuneCountInString(tc.text))
			if rec.Bytes != uint64(len(tc.text)) || rec.Chars != chars || rec.Lines != CountLines(tc.text) {
				t.Errorf("record sizes %d bytes %d chars %d lines, want %d %d %d", rec.Bytes, rec.Chars, rec.Lines, len(tc.text), chars, CountLines(tc.text))
			}
			if rec.ToolCallID != "toolu_01ABC" || rec.ToolName != "bash" {
				t.Errorf("record ids: %+v", rec)
			}
			// The file and the artifact hold the original, byte for byte.
			got, err := os.ReadFile(rec.Path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, []byte(tc.text)) {
				t.Errorf("file differs from the original (%d vs %d bytes)", len(got), len(tc.text))
			}
			id, err := artifacts.ParseURI(rec.Artifact)
			if err != nil {
				t.Fatal(err)
			}
			content, format, err := arts.Get(bg, id)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(content, []byte(tc.text)) || format != artifacts.FormatText {
				t.Errorf("artifact differs from the original (format %s)", format)
			}
			if filepath.Dir(filepath.Dir(rec.Path)) != dir || filepath.Base(filepath.Dir(rec.Path)) != "sess-1" {
				t.Errorf("path %s not under %s/sess-1", rec.Path, dir)
			}

			// The message keeps its metadata; only the content changes.
			if len(out.Content) != 1 || out.Content[0].Type != history.BlockText {
				t.Fatalf("stub content: %+v", out.Content)
			}
			if out.Role != in.Role || out.ToolCallID != in.ToolCallID || out.ToolName != in.ToolName ||
				out.IsError != in.IsError || !out.Time.Equal(in.Time) || out.Seq != in.Seq || out.Tokens != 0 {
				t.Errorf("metadata changed: %+v", out)
			}
			if in.Content[0].Text != tc.text {
				t.Error("input message modified")
			}

			stub := out.Content[0].Text
			if !utf8.ValidString(stub) {
				t.Fatal("stub is not valid UTF-8")
			}
			header, head, tail := stubParts(t, stub)
			if n := uint64(utf8.RuneCountInString(head)); n != tc.cfg.KeepHead {
				t.Errorf("head has %d code points, want %d", n, tc.cfg.KeepHead)
			}
			if n := uint64(utf8.RuneCountInString(tail)); n != tc.cfg.KeepTail {
				t.Errorf("tail has %d code points, want %d", n, tc.cfg.KeepTail)
			}
			if !strings.HasPrefix(tc.text, head) || !strings.HasSuffix(tc.text, tail) {
				t.Error("head or tail is not the original's")
			}
			for _, want := range []string{
				fmt.Sprintf("%d bytes, %d lines, %d characters", len(tc.text), rec.Lines, chars),
				rec.Path, rec.Artifact,
			} {
				if !strings.Contains(header, want) {
					t.Errorf("header lacks %q: %s", want, header)
				}
			}
			if !strings.Contains(stub, fmt.Sprintf("[… %d characters (%d bytes) omitted …]", chars-tc.cfg.KeepHead-tc.cfg.KeepTail, len(tc.text)-len(head)-len(tail))) {
				t.Error("omitted counts missing or wrong")
			}
			lastLine := stub[strings.LastIndexByte(stub, '\n')+1:]
			if lastLine != "[To see the omitted part, read or grep "+rec.Path+" instead of running the tool again.]" {
				t.Errorf("last line: %q", lastLine)
			}
			if uint64(utf8.RuneCountInString(stub)) >= chars && chars > 20000 {
				t.Error("stub is not smaller than the original")
			}
		})
	}
}

func TestCountLines(t *testing.T) {
	for s, want := range map[string]uint64{"": 0, "a": 1, "a\n": 1, "a\nb": 2, "\n\n": 2, "a\n\nb\n": 3} {
		if got := CountLines(s); got != want {
			t.Errorf("CountLines(%q) = %d, want %d", s, got, want)
		}
	}
}

func TestHeadTailBoundaries(t *testing.T) {
	s := "a中😀é"
	for n, want := range []string{"", "a", "a中", "a中😀", s, s} {
		if got := Head(s, uint64(n)); got != want {
			t.Errorf("Head(%d) = %q, want %q", n, got, want)
		}
	}
	for n, want := range []string{"", "é", "😀é", "中😀é", s, s} {
		if got := Tail(s, uint64(n)); got != want {
			t.Errorf("Tail(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestOffloadUntouched(t *testing.T) {
	long := strings.Repeat("x", 101)
	image := history.Block{Type: history.BlockImage, MediaType: "image/png", Data: "iVBORw0KGgo="}
	withImage := toolMsg("c1", "screenshot", "short text")
	withImage.Content = append(withImage.Content, image)
	withJSON := toolMsg("c1", "api", long)
	withJSON.Content = []history.Block{{Type: history.BlockJSON, JSON: []byte(`"` + long + `"`)}}
	disabled := smallCfg()
	disabled.Enabled = false
	authored := smallCfg()
	authored.Exclude = []string{"grep"}
	user := toolMsg("", "", long)
	user.Role = history.RoleUser
	user.IsError = false

	cases := []struct {
		name string
		cfg  config.Offload
		m    history.Message
	}{
		{"at the limit", smallCfg(), toolMsg("c1", "bash", strings.Repeat("😀", 100))},
		{"under the limit", smallCfg(), toolMsg("c1", "bash", "short")},
		{"200 bytes but 100 characters", smallCfg(), toolMsg("c1", "bash", strings.Repeat("é", 100))},
		{"excluded tool", smallCfg(), toolMsg("c1", "read", long)},
		{"authored exclude list", authored, toolMsg("c1", "grep", long)},
		{"disabled", disabled, toolMsg("c1", "bash", long)},
		{"image beside short text", smallCfg(), withImage},
		{"json block", smallCfg(), withJSON},
		{"not a tool message", smallCfg(), user},
		{"invalid UTF-8", smallCfg(), toolMsg("c1", "bash", long+"\xff")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "offload")
			logger, logs := newLogCounter()
			o := New(tc.cfg, dir, newArtifacts(t), logger)
			out, rec := o.Offload(bg, "s", tc.m)
			if rec != nil {
				t.Fatalf("offloaded: %+v", rec)
			}
			a, _ := history.Encode(tc.m)
			b, _ := history.Encode(out)
			if !bytes.Equal(a, b) {
				t.Error("message changed")
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("directory created without an offload: %v", err)
			}
			if *logs.warn+*logs.debug+*logs.other != 0 {
				t.Error("logged")
			}
		})
	}
	// The authored exclude list replaces the default: "read" is offloaded.
	o := New(authored, t.TempDir(), nil, nil)
	if _, rec := o.Offload(bg, "s", toolMsg("c1", "read", long)); rec == nil {
		t.Error(`"read" not offloaded under exclude = ["grep"]`)
	}
}

func TestOffloadMultipleTextBlocks(t *testing.T) {
	m := toolMsg("c1", "bash", strings.Repeat("a", 60))
	m.Content = append(m.Content, history.Block{Type: history.BlockText, Text: strings.Repeat("b", 60)})
	o := New(smallCfg(), t.TempDir(), nil, nil)
	_, rec := o.Offload(bg, "s", m)
	if rec == nil {
		t.Fatal("not offloaded")
	}
	got, _ := os.ReadFile(rec.Path)
	if want := strings.Repeat("a", 60) + BlockSeparator + strings.Repeat("b", 60); string(got) != want {
		t.Errorf("file = %q", got)
	}
	if rec.Chars != 121 || rec.Lines != 2 || rec.Artifact != "" {
		t.Errorf("record %+v", rec)
	}
}

func TestOffloadDeterministic(t *testing.T) {
	dir := t.TempDir()
	arts := newArtifacts(t)
	m := toolMsg("toolu_01", "bash", strings.Repeat("line of output 中文 😀\n", 50))
	a, recA := New(smallCfg(), dir, arts, nil).Offload(bg, "s", m)
	b, recB := New(smallCfg(), dir, arts, nil).Offload(bg, "s", m)
	c, _ := New(smallCfg(), dir, arts, nil).Offload(bg, "s", m)
	if recA == nil || recB == nil || *recA != *recB {
		t.Fatalf("records differ: %+v %+v", recA, recB)
	}
	ea, _ := history.Encode(a)
	eb, _ := history.Encode(b)
	ec, _ := history.Encode(c)
	if !bytes.Equal(ea, eb) || !bytes.Equal(eb, ec) {
		t.Error("stub bytes differ between calls")
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "s"))
	if len(entries) != 1 {
		t.Errorf("%d files after three offloads of one call, want 1 (no temporary left)", len(entries))
	}
}

func TestOffloadModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "offload")
	o := New(smallCfg(), dir, nil, nil)
	_, rec := o.Offload(bg, "s", toolMsg("c1", "bash", strings.Repeat("x", 200)))
	if rec == nil {
		t.Fatal("not offloaded")
	}
	for path, want := range map[string]os.FileMode{dir: DirMode, filepath.Join(dir, "s"): DirMode, rec.Path: FileMode} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s mode %v, want %v", path, fi.Mode().Perm(), want)
		}
	}
}

func TestPathNames(t *testing.T) {
	o := New(smallCfg(), "/var/lib/ctxd/offload", nil, nil)
	seen := map[string]string{}
	for _, id := range []string{"toolu_01ABC", "a/b", "a_b", "../../etc/passwd", "", ".", "x\ny", strings.Repeat("z", 300), strings.Repeat("z", 301)} {
		p, err := o.Path("sess", id)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Dir(p) != "/var/lib/ctxd/offload/sess" || !strings.HasSuffix(p, FileExt) {
			t.Errorf("Path(%q) = %s escapes the session directory", id, p)
		}
		if base := filepath.Base(p); strings.HasPrefix(base, ".") || len(base) > 100 {
			t.Errorf("Path(%q) base %q", id, base)
		}
		if prev, ok := seen[p]; ok {
			t.Errorf("ids %q and %q share %s", prev, id, p)
		}
		seen[p] = id
	}
	for _, sess := range []string{"..", "a/b", "", "."} {
		p, _ := o.Path(sess, "c")
		if filepath.Dir(filepath.Dir(p)) != "/var/lib/ctxd/offload" {
			t.Errorf("session %q: %s escapes the offload directory", sess, p)
		}
	}
	if _, err := New(smallCfg(), "", nil, nil).Path("s", "c"); err == nil {
		t.Error("no error without a directory")
	}
}

// failingStore refuses every Retain.
type failingStore struct{}

func (failingStore) Retain(context.Context, []byte, artifacts.Format) (artifacts.ID, error) {
	return "", errors.New("disk full")
}

// Tests run as root, which ignores permission bits, so unwritable places are
// built from what even root cannot do: a directory under a regular file, a
// file name taken by a directory, a store that refuses.
func TestOffloadWriteFailures(t *testing.T) {
	long := strings.Repeat("x", 500)
	cases := []struct {
		name  string
		setup func(t *testing.T) (dir string, store Retainer)
	}{
		{"directory under a regular file", func(t *testing.T) (string, Retainer) {
			f := filepath.Join(t.TempDir(), "afile")
			if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(f, "sub"), nil
		}},
		{"session directory is a file", func(t *testing.T) (string, Retainer) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "s"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return dir, nil
		}},
		{"file name taken by a directory", func(t *testing.T) (string, Retainer) {
			dir := t.TempDir()
			for _, id := range []string{"c", "d"} {
				p, _ := New(smallCfg(), dir, nil, nil).Path("s", id)
				if err := os.MkdirAll(filepath.Join(p, "keep"), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			return dir, nil
		}},
		{"read-only directory", func(t *testing.T) (string, Retainer) {
			if os.Geteuid() == 0 {
				t.Skip("root ignores permission bits; covered by the cases above")
			}
			dir := t.TempDir()
			if err := os.Chmod(dir, 0o500); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Chmod(dir, 0o700) })
			return dir, nil
		}},
		{"store refuses", func(t *testing.T) (string, Retainer) { return t.TempDir(), failingStore{} }},
		{"no directory", func(t *testing.T) (string, Retainer) { return "", nil }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir, st := tc.setup(t)
			logger, logs := newLogCounter()
			o := New(smallCfg(), dir, st, logger)
			for _, id := range []string{"c", "d", "c"} {
				in := toolMsg(id, "bash", long)
				out, rec := o.Offload(bg, "s", in)
				if rec != nil {
					t.Fatalf("offloaded to %s", rec.Path)
				}
				a, _ := history.Encode(in)
				b, _ := history.Encode(out)
				if !bytes.Equal(a, b) {
					t.Fatal("message changed")
				}
			}
			if *logs.warn != 1 || *logs.other != 0 {
				t.Errorf("%d warnings and %d other records, want exactly one warning", *logs.warn, *logs.other)
			}
			if *logs.debug != 2 {
				t.Errorf("%d debug records for the later failures, want 2", *logs.debug)
			}
		})
	}
}

func TestOffloadCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(bg)
	cancel()
	logger, logs := newLogCounter()
	o := New(smallCfg(), t.TempDir(), newArtifacts(t), logger)
	if _, rec := o.Offload(ctx, "s", toolMsg("c", "bash", strings.Repeat("x", 500))); rec != nil {
		t.Fatal("offloaded with a cancelled context")
	}
	if *logs.warn != 0 {
		t.Error("a cancellation used up the warning")
	}
}

func TestOffloadConcurrent(t *testing.T) {
	o := New(smallCfg(), t.TempDir(), newArtifacts(t), nil)
	done := make(chan *Record)
	for i := range 8 {
		go func() {
			_, rec := o.Offload(bg, fmt.Sprintf("s%d", i%2), toolMsg("c", "bash", strings.Repeat("y", 300)))
			done <- rec
		}()
	}
	for range 8 {
		if rec := <-done; rec == nil {
			t.Error("concurrent offload failed")
		}
	}
}

func TestExcludeMatchesToolNamesWithoutCase(t *testing.T) {
	o := New(config.Offload{Enabled: true, MaxChars: 10, KeepHead: 2, KeepTail: 2, Exclude: []string{"read"}}, t.TempDir(), nil, nil)
	for _, name := range []string{"read", "Read", "READ"} {
		if !o.Excluded(name) {
			t.Errorf("%q is not excluded by [\"read\"]", name)
		}
	}
	if o.Excluded("reader") {
		t.Error("\"reader\" is excluded by [\"read\"]")
	}
}

func TestExcludedToolOffloadedOnlyOverItsOwnLimit(t *testing.T) {
	dir := t.TempDir()
	o := New(config.Offload{Enabled: true, MaxChars: 100, KeepHead: 10, KeepTail: 10, Exclude: []string{"read"}}, dir, nil, nil)
	o.ExcludedMaxChars = 1000
	msg := func(n int) history.Message {
		return history.Message{Role: history.RoleTool, ToolCallID: "r1", ToolName: "Read", Content: []history.Block{{Type: history.BlockText, Text: strings.Repeat("x", n)}}}
	}
	if _, rec := o.Offload(context.Background(), "s", msg(500)); rec != nil {
		t.Fatal("an excluded result under ExcludedMaxChars was offloaded")
	}
	out, rec := o.Offload(context.Background(), "s", msg(5000))
	if rec == nil || !rec.Excluded || len(out.Content[0].Text) >= 5000 {
		t.Fatalf("an excluded result over ExcludedMaxChars was not offloaded: %+v", rec)
	}
}

// A tool result with an image beside 940k characters of text (in two text
// blocks) is measured and offloaded by its text: the text blocks become one
// stub where the first was, the image stays, in place (docs/design.md §6).
func TestOffloadMixedResultByItsText(t *testing.T) {
	image := history.Block{Type: history.BlockImage, MediaType: "image/png", Data: "iVBORw0KGgo="}
	part1 := strings.Repeat("line of build output with a path /src/x.go:12\n", 10000)
	part2 := strings.Repeat("y", 940000-utf8.RuneCountInString(part1))
	m := toolMsg("c1", "screenshot", part1)
	m.Content = []history.Block{image, {Type: history.BlockText, Text: part1}, {Type: history.BlockText, Text: part2}}
	dir := filepath.Join(t.TempDir(), "offload")
	o := New(config.Offload{Enabled: true, MaxChars: 16000, KeepHead: 4000, KeepTail: 1000}, dir, newArtifacts(t), nil)
	out, rec := o.Offload(bg, "s", m)
	if rec == nil {
		t.Fatal("a result with an image and 940k characters of text was not offloaded")
	}
	whole := part1 + BlockSeparator + part2
	if rec.Chars != uint64(utf8.RuneCountInString(whole)) || rec.Bytes != uint64(len(whole)) {
		t.Fatalf("record %+v does not measure the text", rec)
	}
	if len(out.Content) != 2 || out.Content[0].Type != history.BlockImage || out.Content[0].Data != image.Data || out.Content[1].Type != history.BlockText {
		t.Fatalf("content = %d blocks, want the image then the stub", len(out.Content))
	}
	if !strings.HasPrefix(out.Content[1].Text, "[ctxd offloaded this tool result") || utf8.RuneCountInString(out.Content[1].Text) > 6000 {
		t.Fatalf("stub of %d characters: %.80q", utf8.RuneCountInString(out.Content[1].Text), out.Content[1].Text)
	}
	got, err := os.ReadFile(rec.Path)
	if err != nil || string(got) != whole {
		t.Fatalf("offload file holds %d bytes (%v), want the whole text", len(got), err)
	}
}
