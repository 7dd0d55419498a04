package main

import (
	"log/slog"

	"github.com/dgraph-io/badger/v4"

	"github.com/ctxd/ctxd/internal/store"
)

// closeNeedsBytes is the free space badger's Close may write into, in
// bytes: it flushes the memtable into one new table of at most about
// store.MemTableSize, written through a memory-mapped file; twice that
// covers the table's index and the MANIFEST record.
const closeNeedsBytes = 2 * store.MemTableSize

// closeStore closes badger unless the data directory's file system has
// less than closeNeedsBytes free (another process filled it): then the
// memtable flush would write pages of a memory-mapped file that the file
// system cannot back, and the kernel kills the daemon with SIGBUS. The
// store is left as a crash would leave it: every acknowledged write is in
// badger's write-ahead log, replayed at the next start (docs/operating.md
// "Disk full"). free reads the free bytes of dir (store.FreeBytes).
func closeStore(db *badger.DB, dir string, free func(string) (uint64, error), log *slog.Logger) error {
	if n, err := free(dir); err == nil && n < closeNeedsBytes {
		log.Warn("store left unclosed: the data directory's file system is full, and badger's memtable flush would be killed by SIGBUS; every acknowledged write is in its write-ahead log, replayed at the next start",
			attrDataDir, dir, "free", store.FormatBytes(n), "needed", store.FormatBytes(closeNeedsBytes))
		return nil
	}
	return db.Close()
}
