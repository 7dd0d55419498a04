// Package offload is ctxd's first context layer (docs/design.md §6 "Offload"):
// a tool result whose text is longer than [offload] max_chars is stored whole,
// as an artifact and as a file under <dir>/<session>/, and the model sees a
// stub instead — the head and tail of the text, its exact size, where the rest
// is, and a line asking the model to read or grep the file rather than re-run
// the tool. It calls no summarizer and never deletes a file.
//
// Units (docs/design.md §2 "Units"): limits count characters, that is Unicode code
// points; byte counts are exact; every cut falls on a code-point boundary, so
// every stub is valid UTF-8.
package offload

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unicode/utf8"

	"github.com/ctxd/ctxd/artifacts"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/store"
)

// File and directory modes (docs/design.md §8b): tool output may hold secrets, so
// only the daemon's user reads it.
const (
	DirMode  os.FileMode = 0o700
	FileMode os.FileMode = 0o600
)

// FileExt is the extension of every offload file: the content is the tool
// result's text as the tool produced it.
const FileExt = ".txt"

// BlockSeparator joins the text blocks of one tool result into the text that
// is measured, cut and stored. Separate blocks are separate content items
// (MCP results, for instance); a newline keeps the last line of one from
// running into the first line of the next, in the file and in line counts.
const BlockSeparator = "\n"

// maxNameBytes caps the part of a file or directory name taken from an id,
// in bytes, far below any file system's 255-byte name limit.
const maxNameBytes = 64

// Log attribute keys.
const (
	logKeySession = "session"
	logKeyTool    = "tool"
	logKeyBytes   = "bytes"
	logKeyError   = "error"
)

// Retainer is what offload needs of the artifact store; *artifacts.Store
// satisfies it.
type Retainer interface {
	// Retain stores content and returns its id (see artifacts.Store.Retain).
	Retain(ctx context.Context, content []byte, format artifacts.Format) (artifacts.ID, error)
}

// Record describes one offloaded tool result: the Data of the engine's
// offload event. Bytes, Lines and Chars describe the original text, not the
// stub.
type Record struct {
	// ToolCallID and ToolName are the tool message's.
	ToolCallID string `json:"tool_call_id"`
	ToolName   string `json:"tool_name,omitempty"`
	// Artifact is the "artifact://<id>" URI of the stored text; "" when the
	// Offloader has no store.
	Artifact string `json:"artifact,omitempty"`
	// Path is the absolute path of the file holding the text.
	Path string `json:"path"`
	// Bytes is the text's exact size in bytes.
	Bytes uint64 `json:"bytes"`
	// Lines is its number of lines: newline characters, plus one when the
	// text does not end with a newline (what an editor shows; `wc -l`
	// counts one less for such text).
	Lines uint64 `json:"lines"`
	// Chars is its number of characters (Unicode code points).
	Chars uint64 `json:"chars"`
	// Excluded marks the result of an excluded tool offloaded anyway
	// because it alone exceeded ExcludedMaxChars.
	Excluded bool `json:"excluded,omitempty"`
}

// Failure describes a tool result that should have been offloaded and was
// kept whole because the write failed (docs/design.md §6): the Data of the
// engine's offload_failed event. Reason is one line without the file's
// path beyond the offload directory (a full disk, a directory that cannot
// be created, the artifact store's refusal).
type Failure struct {
	ToolCallID string `json:"tool_call_id"`
	ToolName   string `json:"tool_name,omitempty"`
	// Bytes is the size of the result kept whole.
	Bytes uint64 `json:"bytes"`
	// Dir is the offload directory.
	Dir string `json:"dir"`
	// Reason says why, in one line.
	Reason string `json:"reason"`
	// NoSpace marks a refusal of the free-space guard (or ENOSPC).
	NoSpace bool `json:"no_space,omitempty"`
}

// Offloader offloads oversized tool results of every session of a daemon.
// It is safe for concurrent use.
type Offloader struct {
	// ExcludedMaxChars, when not 0, is a size in characters above which a
	// result of an excluded tool is offloaded all the same: exclude keeps
	// file reads whole because the model asked to see them, but a result
	// that alone cannot fit the context window is only ever compacted away,
	// and the model asks for it again. Set it before use.
	ExcludedMaxChars uint64
	// Space, when set, guards the file system of the offload directory
	// (storage.min_free_bytes): a file that would leave less free space is
	// not written and the result is kept whole (a Failure). Set it before
	// use.
	Space *store.Space

	cfg    config.Offload
	dir    string
	store  Retainer
	logger *slog.Logger
	// warned makes the first failed write a warning and later ones debug
	// lines: a full disk fails every offload, and one warning says it.
	warned sync.Once
}

// New returns an Offloader with the [offload] settings cfg, writing files
// under dir (the resolved [offload] dir: "" is the caller's to resolve, and
// an Offloader with dir "" fails every write). A relative dir is made
// absolute now, so stubs carry absolute paths. store may be nil: results are
// then written to files only and stubs name no artifact. logger nil discards
// the log. New does no I/O: the directory is created on first use.
func New(cfg config.Offload, dir string, store Retainer, logger *slog.Logger) *Offloader {
	if dir != "" {
		if abs, err := filepath.Abs(dir); err == nil {
			dir = abs
		}
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg.Exclude = slices.Clone(cfg.Exclude)
	return &Offloader{cfg: cfg, dir: dir, store: store, logger: logger}
}

// Offload returns m unchanged, and a nil Record, unless offloading is
// enabled, m is a tool message whose tool is not excluded, it has at least
// one text block, and its text — its text blocks joined with BlockSeparator
// — is valid UTF-8 longer than max_chars characters. A result with non-text
// blocks (an image beside text) is measured and offloaded by its text; the
// non-text blocks stay as they are (docs/design.md §6).
//
// Otherwise it stores the text whole as an artifact (format text) and as the
// file Path(session, m.ToolCallID), creating <dir>/<session>/ (mode DirMode)
// on first use, and returns a copy of m whose text blocks are replaced by
// one text block holding Stub(...), where the first of them was, its other
// blocks kept in order, with Tokens reset to 0 (the estimate counted the
// original), and the Record. Role, tool_call_id, tool_name, is_error, time
// and seq are kept.
//
// A failed write — the directory cannot be created, the file cannot be
// written, the store refuses — returns m unchanged and a nil Record; the
// first failure of an Offloader is logged at warning level, later ones at
// debug level. A cancelled ctx also returns m unchanged, without a warning.
// Try says why.
func (o *Offloader) Offload(ctx context.Context, session string, m history.Message) (history.Message, *Record) {
	out, rec, _ := o.Try(ctx, session, m)
	return out, rec
}

// Try is Offload that also reports a failed write: a non-nil *Failure when
// m should have been offloaded and was kept whole (never with a cancelled
// ctx, whose result is kept whole silently).
func (o *Offloader) Try(ctx context.Context, session string, m history.Message) (history.Message, *Record, *Failure) {
	out, rec, fail, _ := o.try(ctx, session, m, false)
	return out, rec, fail
}

// Stage is Try with the durable half left to the caller (docs/decisions.md
// "Offload writes after the upstream accepts"): the file is written
// whole under its name (a reader finds the text at once) but not synced,
// the artifact is not stored, and the returned Pending makes both
// durable. An offload event may refer to the Record only once its
// Pending's Finish returned nil; a result that is not offloaded returns a
// nil Pending. With a store that cannot name an artifact before storing it
// (no IDOf method) Stage is Try, and its Pending has nothing left to do.
func (o *Offloader) Stage(ctx context.Context, session string, m history.Message) (history.Message, *Record, *Failure, *Pending) {
	return o.try(ctx, session, m, true)
}

// Pending is the durable half of a result Stage offloaded: the file's sync
// and the artifact's store.
type Pending struct {
	o    *Offloader
	path string // "" when the file is durable already
	text string // the artifact's content; "" when none is left to store
}

// Finish syncs the file Stage wrote and stores the artifact it named, and
// returns once both are durable (the store's Retain). Errors: the file
// system's (the file is gone: Discarded, or removed), the store's.
func (p *Pending) Finish(ctx context.Context) error {
	if p == nil {
		return nil
	}
	if p.path != "" {
		if err := syncFile(p.path); err != nil {
			return err
		}
	}
	if p.text != "" && p.o.store != nil {
		if _, err := p.o.store.Retain(ctx, []byte(p.text), artifacts.FormatText); err != nil {
			return fmt.Errorf("retain offloaded result: %w", err)
		}
	}
	// The next staged write's file, made here, after the upstream
	// accepted, rather than on its request's path (spare_linux.go).
	refillSpare(p.o.dir)
	return nil
}

// syncFile makes the file at path durable.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("sync offload file: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync offload file: %w", err)
	}
	return nil
}

// namer is a store that names an artifact before storing it
// (artifacts.Store, natsstore.Artifacts).
type namer interface {
	IDOf(content []byte) artifacts.ID
}

// try is Try, or Stage when staged.
func (o *Offloader) try(ctx context.Context, session string, m history.Message, staged bool) (history.Message, *Record, *Failure, *Pending) {
	if !o.cfg.Enabled || m.Role != history.RoleTool || len(m.Content) == 0 {
		return m, nil, nil, nil
	}
	text, ok := joinText(m.Content)
	if !ok {
		return m, nil, nil, nil // no text to measure
	}
	chars := uint64(utf8.RuneCountInString(text))
	if chars <= o.cfg.MaxChars || !utf8.ValidString(text) {
		// Invalid UTF-8 cannot be cut into a valid stub; validation
		// rejects such a message anyway.
		return m, nil, nil, nil
	}
	excluded := o.Excluded(m.ToolName)
	if excluded && (o.ExcludedMaxChars == 0 || chars <= o.ExcludedMaxChars) {
		return m, nil, nil, nil
	}
	// Staged, with a store that names an artifact before storing it (or
	// none): the durable half is the caller's.
	var pending *Pending
	if _, ok := o.store.(namer); staged && (ok || o.store == nil) {
		pending = &Pending{o: o}
	}

	path, err := o.Path(session, m.ToolCallID)
	if err == nil {
		// The file and the artifact each hold the text once.
		err = o.Space.Check(2 * uint64(len(text)))
	}
	if err == nil {
		err = o.write(path, text, pending == nil)
	}
	var uri string
	switch {
	case err != nil || o.store == nil:
	case pending != nil:
		uri = o.store.(namer).IDOf([]byte(text)).URI()
	default:
		var id artifacts.ID
		id, err = o.store.Retain(ctx, []byte(text), artifacts.FormatText)
		uri = id.URI()
	}
	if err != nil {
		if ctx.Err() != nil {
			return m, nil, nil, nil
		}
		o.logFailure(session, m.ToolName, len(text), err)
		return m, nil, &Failure{ToolCallID: m.ToolCallID, ToolName: m.ToolName, Bytes: uint64(len(text)), Dir: o.dir,
			Reason: err.Error(), NoSpace: errors.Is(err, store.ErrNoSpace) || errors.Is(err, syscall.ENOSPC)}, nil
	}
	if pending != nil {
		pending.path = path
		if o.store != nil {
			pending.text = text
		}
	}

	rec := &Record{
		ToolCallID: m.ToolCallID,
		ToolName:   m.ToolName,
		Artifact:   uri,
		Path:       path,
		Bytes:      uint64(len(text)),
		Lines:      CountLines(text),
		Chars:      chars,
		Excluded:   excluded,
	}
	out := m
	stub := history.Block{Type: history.BlockText, Text: Stub(text, o.cfg.KeepHead, o.cfg.KeepTail, rec)}
	out.Content = make([]history.Block, 0, len(m.Content))
	placed := false
	for _, b := range m.Content {
		switch {
		case b.Type != history.BlockText:
			out.Content = append(out.Content, b)
		case !placed:
			out.Content = append(out.Content, stub)
			placed = true
		}
	}
	out.Tokens = 0
	if pending == nil && staged {
		pending = &Pending{o: o}
	}
	return out, rec, nil, pending
}

// joinText returns the text of a result's text blocks, joined with
// BlockSeparator, and false when it has none.
func joinText(blocks []history.Block) (string, bool) {
	if len(blocks) == 1 {
		return blocks[0].Text, blocks[0].Type == history.BlockText
	}
	parts := make([]string, 0, len(blocks))
	for _, b := range blocks {
		if b.Type == history.BlockText {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, BlockSeparator), len(parts) > 0
}

func (o *Offloader) logFailure(session, tool string, size int, err error) {
	attrs := []any{slog.String(logKeySession, session), slog.String(logKeyTool, tool),
		slog.Int(logKeyBytes, size), slog.Any(logKeyError, err)}
	first := false
	o.warned.Do(func() {
		first = true
		o.logger.Warn("offload failed: the tool result is kept whole in the context; later failures are logged at debug level", attrs...)
	})
	if !first {
		o.logger.Debug("offload failed: the tool result is kept whole in the context", attrs...)
	}
}

// errNoDir is the failure of an Offloader given no directory.
var errNoDir = errors.New("offload directory not set")

// Path returns the file an offloaded result of call toolCallID in session is
// written to: <dir>/<session>/<name>.txt. It is deterministic, so a stub
// names the same file whenever it is built. The session is used as the
// directory name when it is a safe path component (letters, digits, '.', '_',
// '-', not "." or ".."); otherwise, and for every file name, unsafe bytes
// become '_', the name is cut to 64 bytes and "-" plus 12 hex digits of the
// id's SHA-256 are appended, so ids differing only in unsafe bytes get
// distinct names. Errors: none beyond an Offloader with no directory.
func (o *Offloader) Path(session, toolCallID string) (string, error) {
	dir, err := o.SessionDir(session)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, hashedName(toolCallID)+FileExt), nil
}

// SessionDir returns the directory of session's offloaded results,
// <dir>/<session>/, named as Path names it. Errors: none beyond an
// Offloader with no directory.
func (o *Offloader) SessionDir(session string) (string, error) {
	if o.dir == "" {
		return "", errNoDir
	}
	if !safeComponent(session) {
		return filepath.Join(o.dir, hashedName(session)), nil
	}
	return filepath.Join(o.dir, session), nil
}

// WriteFile writes text to the file name in SessionDir(session) as an
// offloaded result is written (mode FileMode, synced, renamed into place,
// behind the free-space guard) and returns its path: the recall file of a
// checkpoint lies beside the session's offloaded results (docs/design.md
// §5.6). name must be a plain file name. Errors: no directory, a name with a
// separator, the space guard's refusal, the file system's.
func (o *Offloader) WriteFile(session, name, text string) (string, error) {
	dir, err := o.SessionDir(session)
	if err != nil {
		return "", err
	}
	if name == "" || name != filepath.Base(name) || name == "." || name == ".." {
		return "", fmt.Errorf("offload file name %q is not a plain file name", name)
	}
	path := filepath.Join(dir, name)
	if err := o.Space.Check(uint64(len(text))); err != nil {
		return "", err
	}
	if err := o.writeFile(path, text); err != nil {
		return "", err
	}
	return path, nil
}

// safeComponent reports whether s is usable as a path component as is.
func safeComponent(s string) bool {
	if s == "" || s == "." || s == ".." || len(s) > maxNameBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !safeByte(s[i]) && s[i] != '.' {
			return false
		}
	}
	return true
}

// safeByte: letters, digits, '_' and '-'. '.' is left out of file names so
// a name never starts a hidden file or spells "..".
func safeByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

// hashedName returns s with unsafe bytes replaced by '_', cut to
// maxNameBytes, plus "-" and 12 hex digits of SHA-256(s).
func hashedName(s string) string {
	var b strings.Builder
	for i := 0; i < len(s) && i < maxNameBytes; i++ {
		if safeByte(s[i]) {
			b.WriteByte(s[i])
		} else {
			b.WriteByte('_')
		}
	}
	sum := sha256.Sum256([]byte(s))
	if b.Len() == 0 {
		b.WriteString("result")
	}
	b.WriteByte('-')
	b.WriteString(hex.EncodeToString(sum[:6]))
	return b.String()
}

// writeFile writes text to path through a temporary file in the same
// directory, synced and renamed into place, so a crash never leaves a
// partial file under the name a stub gives. The same call id always has the
// same content (ids are never reused in a session), so replacing an existing
// file changes nothing.
func (o *Offloader) writeFile(path, text string) error { return o.write(path, text, true) }

// write is writeFile, without the sync when sync is false (Stage: the
// Pending syncs it).
func (o *Offloader) write(path, text string, sync bool) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, DirMode); err != nil {
		return fmt.Errorf("create offload directory: %w", err)
	}
	if !sync {
		// A spare file made ahead, filled and named here.
		if done, err := o.writeSpare(path, text); done {
			if err != nil {
				return fmt.Errorf("write offload file: %w", err)
			}
			return nil
		}
	}
	f, err := os.CreateTemp(dir, ".offload-*.tmp")
	if err != nil {
		return fmt.Errorf("create offload file: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name()) // only our own temporary file
		}
	}()
	if err := f.Chmod(FileMode); err != nil {
		return fmt.Errorf("offload file mode: %w", err)
	}
	if _, err := f.WriteString(text); err != nil {
		return fmt.Errorf("write offload file: %w", err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("sync offload file: %w", err)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close offload file: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("rename offload file: %w", err)
	}
	return nil
}

// CountLines returns the number of lines of s: its newline characters, plus
// one when s is not empty and does not end with a newline.
func CountLines(s string) uint64 {
	n := uint64(strings.Count(s, "\n"))
	if s != "" && !strings.HasSuffix(s, "\n") {
		n++
	}
	return n
}

// Head returns the first n characters (code points) of s, or s when it has
// no more than n.
func Head(s string, n uint64) string {
	if n == 0 {
		return ""
	}
	var i uint64
	for off := range s {
		if i == n {
			return s[:off]
		}
		i++
	}
	return s
}

// Tail returns the last n characters (code points) of s, or s when it has
// no more than n.
func Tail(s string, n uint64) string {
	end := len(s)
	for ; n > 0 && end > 0; n-- {
		_, size := utf8.DecodeLastRuneInString(s[:end])
		end -= size
	}
	return s[end:]
}

// Stub returns the text a model sees in place of an offloaded result: a
// header line with the exact size and where the whole text is, the first
// keepHead characters, a line saying how many characters were left out, the
// last keepTail characters, and one line asking the model to read or grep
// the file rather than re-run the tool. rec gives the sizes, path and
// artifact URI of text. The head and tail are each preceded by a newline, so
// they start and end exactly where the cut fell. Same input, same bytes.
func Stub(text string, keepHead, keepTail uint64, rec *Record) string {
	// Configuration guarantees keepHead + keepTail < max_chars < Chars;
	// clamp anyway so the counts below never underflow.
	keepHead = min(keepHead, rec.Chars)
	keepTail = min(keepTail, rec.Chars-keepHead)
	head, tail := Head(text, keepHead), Tail(text, keepTail)
	omitted := rec.Chars - keepHead - keepTail
	omittedBytes := len(text) - len(head) - len(tail)

	where := rec.Path
	if rec.Artifact != "" {
		where += " (also " + rec.Artifact + ")"
	}
	var b strings.Builder
	b.Grow(len(head) + len(tail) + 512)
	b.WriteString("[ctxd offloaded this tool result: ")
	b.WriteString(strconv.FormatUint(rec.Bytes, 10) + " bytes, ")
	b.WriteString(strconv.FormatUint(rec.Lines, 10) + " lines, ")
	b.WriteString(strconv.FormatUint(rec.Chars, 10) + " characters. The whole result is in ")
	b.WriteString(where + ". Shown: the first ")
	b.WriteString(strconv.FormatUint(keepHead, 10) + " and the last ")
	b.WriteString(strconv.FormatUint(keepTail, 10) + " characters.]\n")
	b.WriteString(head)
	b.WriteString("\n[… ")
	b.WriteString(strconv.FormatUint(omitted, 10) + " characters (")
	b.WriteString(strconv.Itoa(omittedBytes) + " bytes) omitted …]\n")
	b.WriteString(tail)
	b.WriteString("\n[To see the omitted part, read or grep " + rec.Path + " instead of running the tool again.]")
	return b.String()
}

// Excluded reports whether results of tool are never offloaded.
func (o *Offloader) Excluded(tool string) bool {
	return slices.ContainsFunc(o.cfg.Exclude, func(name string) bool { return strings.EqualFold(name, tool) })
}
