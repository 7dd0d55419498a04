// Package store opens ctxd's embedded badger database with the small-memory
// profile of docs/design.md §8 and routes badger's logging to slog. It also
// provides the group committer that turns many concurrent writers into one
// badger commit and one sync (docs/design.md §8 "group-committed"). It knows
// nothing about sessions or artifacts: checkpoint/ and artifacts/ own their
// keys.
package store

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// The small-memory profile (docs/design.md §8). Badger's defaults hold ~86 MiB of
// Go heap for an empty store, mostly a 64 MiB memtable arena and a 256 MiB
// block cache budget; a daemon holding thousands of mostly idle sessions needs
// far less. Each figure below is the reason it was chosen.
const (
	// MemTableSize is the size of one memtable arena, allocated on the Go
	// heap up front. 8 MiB keeps an empty store small; the largest single
	// transaction badger accepts is 15 % of it (~1.2 MiB of inline values),
	// which bounds one Append (checkpoint.ErrTooLarge).
	MemTableSize = 8 << 20
	// NumMemtables is one active memtable plus one being flushed: writes do
	// not stall on a flush, and at most two arenas are live.
	NumMemtables = 2
	// BlockCacheSize bounds the cache of decompressed SSTable blocks. Event
	// scans are sequential and read each block once, so a large cache buys
	// little.
	BlockCacheSize = 16 << 20
	// IndexCacheSize bounds the cache of table indexes and bloom filters.
	// Without it (badger's default of 0) every table's index stays on the
	// heap, so memory would grow with the amount of data stored.
	IndexCacheSize = 8 << 20
	// NumCompactors is badger's minimum (L0 compactor plus one other): two
	// cores are shared with the daemon's own work.
	NumCompactors = 2
	// ValueThreshold is the size from which a value goes to the value log
	// instead of inline in the LSM tree. Events (a message, usage, a pass
	// record) are almost always smaller and stay inline, so a Range is one
	// sequential LSM scan; artifacts and big tool results go to the value log
	// and are point reads.
	ValueThreshold = 4 << 10
	// ValueLogFileSize is 256 MiB instead of 1 GiB: value-log GC rewrites
	// whole files, and smaller files reclaim deleted sessions' space sooner.
	ValueLogFileSize = 256 << 20
	// BaseTableSize is the target size of an SSTable, 1 MiB instead of
	// 2 MiB. Compaction builds tables in Go-heap buffers that badger pools
	// and releases only after seconds of idleness; smaller tables measured
	// a transient peak of ~100 MiB instead of ~160–190 MiB right after
	// writing 100 MB (BenchmarkHeap), at the price of more table files.
	BaseTableSize = 1 << 20
	// NumLevelZeroTables and NumLevelZeroTablesStall are badger's defaults,
	// set explicitly because they matter with small memtables: L0 holds at
	// most 15 tables of ≤ 8 MiB before writes stall, so a burst of appends
	// waits for compaction rather than growing L0 without bound.
	NumLevelZeroTables      = 5
	NumLevelZeroTablesStall = 15
)

// Options are the settings of Open that come from configuration.
type Options struct {
	// SyncWrites makes every commit durable before it is acknowledged
	// ([storage] sync_writes, default true). With false, a crash of the
	// machine (not of the process) can lose recent acknowledged writes.
	SyncWrites bool
	// Logger receives badger's warnings and errors; nil means slog.Default().
	Logger *slog.Logger
	// Space guards the file system of the database: Open refuses to open
	// below its reserve, and every Committer of the database checks it
	// before each write. nil: no guard.
	Space *Space
}

// BadgerOptions returns the badger options of the small-memory profile for
// the directory dir. Open uses them; benchmarks use them to compare with bare
// badger on equal terms.
func BadgerOptions(dir string, opts Options) badger.Options {
	return badger.DefaultOptions(dir).
		WithSyncWrites(opts.SyncWrites).
		WithLogger(NewLogger(opts.Logger)).
		WithMemTableSize(MemTableSize).
		WithNumMemtables(NumMemtables).
		WithBlockCacheSize(BlockCacheSize).
		WithIndexCacheSize(IndexCacheSize).
		WithNumCompactors(NumCompactors).
		WithValueThreshold(ValueThreshold).
		WithValueLogFileSize(ValueLogFileSize).
		WithBaseTableSize(BaseTableSize).
		WithNumLevelZeroTables(NumLevelZeroTables).
		WithNumLevelZeroTablesStall(NumLevelZeroTablesStall).
		// Snappy: event JSON compresses well and snappy is cheap.
		WithCompression(options.Snappy).
		// Badger's metrics go to the process-global expvar map keyed by
		// directory; ctxd exports its own Prometheus metrics instead.
		WithMetricsEnabled(false).
		// Writers of one session are serialized by checkpoint/, artifacts
		// are content-addressed (a concurrent duplicate write is the same
		// bytes): no transaction can conflict, so badger's conflict
		// tracking is pure overhead.
		WithDetectConflicts(false)
}

// Open opens (creating if needed) the badger database in dir with the
// small-memory profile. A store left by a killed process opens without any
// repair step: badger replays its write-ahead log and discards a torn tail.
// Errors are badger's, wrapped with the directory.
//
// With opts.Space, Open first checks the free space: below the reserve it
// returns a *SpaceError (ErrNoSpace) without touching badger, whose start-up
// replay writes through memory maps and would die of SIGBUS on a full file
// system.
func Open(dir string, opts Options) (*badger.DB, error) {
	if err := opts.Space.Check(0); err != nil {
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	db, err := badger.Open(BadgerOptions(dir, opts))
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	registerSpace(db.Opts().Dir, opts.Space)
	return db, nil
}

// OpenInMemory opens an in-memory badger database with the same profile and
// badger's logger off, for tests. In memory there is no value log: every
// value is inline and badger caps a value at the value threshold, which is
// raised to badger's maximum (1 MiB) here.
func OpenInMemory() (*badger.DB, error) {
	o := BadgerOptions("", Options{}).WithInMemory(true).WithLogger(nil).WithValueThreshold(1 << 20)
	db, err := badger.Open(o)
	if err != nil {
		return nil, fmt.Errorf("open in-memory store: %w", err)
	}
	return db, nil
}

// NewLogger adapts l (nil: slog.Default()) to badger's Logger. Only warnings
// and errors are passed on: badger's info and debug lines (compaction chatter,
// every table flush) are noise for an operator.
func NewLogger(l *slog.Logger) badger.Logger {
	return slogLogger{l: l}
}

type slogLogger struct{ l *slog.Logger }

func (s slogLogger) logger() *slog.Logger {
	if s.l == nil {
		return slog.Default()
	}
	return s.l
}

func (s slogLogger) Errorf(format string, args ...any) {
	s.logger().Log(context.Background(), slog.LevelError, trim(format, args), "component", "badger")
}

func (s slogLogger) Warningf(format string, args ...any) {
	s.logger().Log(context.Background(), slog.LevelWarn, trim(format, args), "component", "badger")
}

func (slogLogger) Infof(string, ...any)  {}
func (slogLogger) Debugf(string, ...any) {}

// trim formats a badger log line, which often ends with a newline.
func trim(format string, args []any) string {
	return strings.TrimRight(fmt.Sprintf(format, args...), "\n")
}
