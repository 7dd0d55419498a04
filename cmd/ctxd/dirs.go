package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// errOpenDir marks privateDir's refusals of a directory other users can
// reach (too open, or someone else's), as opposed to one that cannot be
// created or read at all.
var errOpenDir = errors.New("directory open to other users")

// privateDirMode is the mode of every directory ctxd keeps data in
// (docs/design.md §8b): sessions, offloaded tool results and the artifact secret
// are the owner's alone.
const privateDirMode = 0o700

// privateDir makes sure dir is a directory that only this user can enter
// (docs/decisions.md "No unauthenticated TCP; directory modes; event
// resume points"): a missing one is created 0700 (with its missing parents); an
// existing one must belong to this user, and must grant nothing to group
// or others. One that does is tightened to 0700 when ours is true (a
// directory ctxd itself creates and owns, such as <data_dir>/offload),
// else refused with the command that fixes it. what names the directory in
// errors ("data directory"). It returns whether it changed the mode.
func privateDir(dir, what string, ours bool) (tightened bool, err error) {
	if dir, err = filepath.Abs(dir); err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, privateDirMode); err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	if !fi.IsDir() {
		return false, fmt.Errorf("%s %s is not a directory", what, dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != uint32(os.Getuid()) {
		return false, fmt.Errorf("%w: %s %s belongs to uid %d, not to the user running ctxd (%d): other users must not hold ctxd's data; choose a directory of your own or run: chown %d %s", errOpenDir, what, dir, st.Uid, os.Getuid(), os.Getuid(), dir)
	}
	perm := fi.Mode().Perm()
	if perm&0o077 == 0 {
		return false, nil
	}
	if ours {
		if err := os.Chmod(dir, privateDirMode); err != nil {
			return false, fmt.Errorf("%s %s is mode %04o and cannot be made 0700: %w", what, dir, perm, err)
		}
		return true, nil
	}
	return false, &openDirError{fmt.Sprintf("%s %s is mode %04o: other users could read what ctxd keeps there (sessions, tool results); run: chmod 700 %s", what, dir, perm, dir)}
}

// openDirError is a too-open directory's refusal; it matches errOpenDir.
type openDirError struct{ msg string }

func (e *openDirError) Error() string        { return e.msg }
func (e *openDirError) Is(target error) bool { return target == errOpenDir }
