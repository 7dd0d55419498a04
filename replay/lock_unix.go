//go:build unix

package replay

import (
	"os"
	"path/filepath"
	"syscall"
)

// lockName is the file a replay holds an exclusive flock on while it uses
// its directory; a directory whose lock nobody holds was left by a replay
// that was killed, and is reused.
const lockName = ".lock"

// lockNew takes the lock of a directory just made: the lock file is locked
// under a temporary name, then renamed into place, so that no other replay
// finds it unlocked in between.
func lockNew(dir string) (*os.File, error) {
	f, err := os.CreateTemp(dir, lockName+"-*")
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	if err := os.Rename(f.Name(), filepath.Join(dir, lockName)); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// reclaim takes over a directory a killed replay left: its lock file
// exists and nobody holds it. It empties the directory and returns the
// held lock, or nil when the directory is in use, another user's, or not
// a replay's.
func reclaim(dir string) *os.File {
	if !ownPrivateDir(dir) {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		f.Close()
		return nil
	}
	for _, e := range entries {
		if e.Name() == lockName {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			f.Close()
			return nil
		}
	}
	return f
}

// ownPrivateDir reports whether dir is a directory itself (not a symbolic
// link to one), this user's, and closed to group and others (0700), as a
// replay makes it: a name in a shared temporary directory that someone
// else made, or pointed elsewhere, is never emptied and used.
func ownPrivateDir(dir string) bool {
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm()&0o077 != 0 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Uid == uint32(os.Getuid())
}
