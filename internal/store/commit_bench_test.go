package store

import (
	"bytes"
	"context"
	"fmt"
	"testing"
)

// BenchmarkCommitValueLog: one synced commit (sync_writes = true, on disk) of a
// 1 KiB event, which stays inline in the write-ahead log, against one of a 6
// KiB event, which goes to the value log, so that badger syncs two files with
// new data instead of one (docs/performance.md: in the 500-agent run a group
// carrying a value-log value took ~4× as long as one without, p50). Same run,
// same database; ns/op is the commit's latency with no other writer.
func BenchmarkCommitValueLog(b *testing.B) {
	db, err := Open(b.TempDir(), Options{SyncWrites: true})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	c := NewCommitter(db)
	defer c.Close()
	for _, size := range []int{1 << 10, 6 << 10} {
		value := bytes.Repeat([]byte("v"), size)
		name := "inline-1KiB"
		if int64(size) >= c.threshold {
			name = "value-log-6KiB"
		}
		b.Run(name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				i++
				key := fmt.Appendf(nil, "bench/%s/%d", name, i)
				if err := c.Commit(context.Background(), []Write{{Key: key, Value: value}}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
