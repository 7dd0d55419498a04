//go:build unix

package api

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
)

// checkSocket verifies, before the Client sends anything to the unix
// socket at path, that it is a socket owned by the user (or root, or one
// of trusted), and that its directory belongs to the same and is not
// writable by others unless sticky — as ssh checks its agent socket. A
// socket another user put there (a fake daemon in a shared directory)
// would otherwise receive whole transcripts.
func checkSocket(path string, trusted []uint32) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil // the dial reports it
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	me := uint32(os.Getuid())
	okOwner := func(uid uint32) bool { return uid == me || uid == 0 || slices.Contains(trusted, uid) }
	if fi.Mode()&os.ModeSocket == 0 {
		return socketRefusalf("%s is not a socket (mode %s): refusing to use it", path, fi.Mode())
	}
	if !okOwner(st.Uid) {
		return socketRefusalf("socket %s belongs to uid %d, not to you (uid %d): refusing to send to it; if that user's daemon is the one to use (daemon.allowed_uids), set %s=%d", path, st.Uid, me, EnvSocketOwner, st.Uid)
	}
	dir := filepath.Dir(path)
	di, err := os.Stat(dir)
	if err != nil {
		return nil
	}
	ds, ok := di.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if !okOwner(ds.Uid) {
		return socketRefusalf("the socket's directory %s belongs to uid %d, not to you (uid %d): refusing to use %s", dir, ds.Uid, me, path)
	}
	if di.Mode().Perm()&0o022 != 0 && di.Mode()&os.ModeSticky == 0 {
		return socketRefusalf("the socket's directory %s is mode %#o: others can replace %s; refusing to use it (chmod go-w %s)", dir, di.Mode().Perm(), path, dir)
	}
	return nil
}

// trustedOwners reads EnvSocketOwner: uids, comma-separated.
func trustedOwners(getenv func(string) string) []uint32 {
	var out []uint32
	for _, f := range splitComma(getenv(EnvSocketOwner)) {
		if n, err := strconv.ParseUint(f, 10, 32); err == nil {
			out = append(out, uint32(n))
		}
	}
	return out
}
