package main

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// releaseMappedFiles tells the kernel that the daemon no longer needs the pages
// it has mapped from files under dir (badger's memory-mapped tables, value log
// and write-ahead logs): madvise(MADV_DONTNEED) on each such mapping. The
// mappings are shared, so nothing is lost: the data stays in the page cache
// (and on disk) and is faulted back in when read. It only stops the idle
// daemon's resident set from counting every table compaction ever wrote
// (docs/decisions.md "Memory per stored session"). It returns the bytes of
// mappings advised.
func releaseMappedFiles(dir string) uint64 {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return 0
	}
	prefix := strings.TrimSuffix(dir, "/") + "/"
	var released uint64
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		// start-end perms offset dev inode path
		f := strings.Fields(sc.Text())
		if len(f) < 6 || !strings.HasPrefix(f[5], prefix) || !strings.Contains(f[1], "s") {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, uintptr(start), uintptr(end-start), syscall.MADV_DONTNEED); e == 0 {
			released += end - start
		}
	}
	return released
}
