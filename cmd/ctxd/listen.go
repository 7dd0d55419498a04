package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// probeTimeout bounds the dial that tells a live daemon from a stale socket
// file.
const probeTimeout = time.Second

// listenUnix creates the unix socket at path (docs/design.md §8b): the parent
// directory is created 0700 (an existing one must belong to this user or
// root and not be writable by others); an existing socket file is dialled
// first, and a live daemon answering it stops this one; a stale file is
// removed; the socket is born 0600 (umask around listen, never chmod after,
// so there is no window in which others could connect).
func listenUnix(path string) (*net.UnixListener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("socket directory: %w", err)
	}
	if err := checkSocketDir(dir); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket; refusing to replace it", path)
		}
		c, err := net.DialTimeout("unix", path, probeTimeout)
		if err == nil {
			_ = c.Close()
			return nil, fmt.Errorf("another ctxd is already serving on %s; stop it first or use --socket", path)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("probe existing socket %s: %w", path, err)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	old := syscall.Umask(0o177)
	l, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	return l.(*net.UnixListener), nil
}

// checkSocketDir refuses a directory someone else could use to replace or
// intercept the socket: owned by another user (other than root), or
// writable by group or others.
func checkSocketDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("socket directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("socket directory %s is not a directory", dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != uint32(os.Getuid()) && st.Uid != 0 {
		return fmt.Errorf("socket directory %s belongs to uid %d, not to this user (%d); choose another --socket", dir, st.Uid, os.Getuid())
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("socket directory %s is mode %04o: others could replace the socket; use a 0700 directory (docs/design.md §8b), e.g. run: chmod 700 %s", dir, fi.Mode().Perm(), dir)
	}
	return nil
}

// Environment of systemd socket activation (sd_listen_fds(3)).
const (
	envListenPID     = "LISTEN_PID"
	envListenFDs     = "LISTEN_FDS"
	envListenFDNames = "LISTEN_FDNAMES"
	listenFDsStart   = 3
)

// activationListener returns the unix socket systemd passed (fd 3) when
// LISTEN_PID is this process and LISTEN_FDS ≥ 1, else nil. The variables
// are removed so that no child inherits them.
func activationListener(getenv func(string) string) (*net.UnixListener, int, error) {
	pid, fds := getenv(envListenPID), getenv(envListenFDs)
	if pid == "" || pid != strconv.Itoa(os.Getpid()) {
		return nil, 0, nil
	}
	n, err := strconv.Atoi(fds)
	if err != nil || n < 1 {
		return nil, 0, nil
	}
	for _, k := range []string{envListenPID, envListenFDs, envListenFDNames} {
		_ = os.Unsetenv(k)
	}
	syscall.CloseOnExec(listenFDsStart)
	f := os.NewFile(uintptr(listenFDsStart), "systemd-socket")
	l, err := net.FileListener(f)
	_ = f.Close() // FileListener dup'ed it
	if err != nil {
		return nil, n, fmt.Errorf("socket activation: fd %d: %w", listenFDsStart, err)
	}
	ul, ok := l.(*net.UnixListener)
	if !ok {
		_ = l.Close()
		return nil, n, fmt.Errorf("socket activation: fd %d is a %s socket, not a unix socket (ctxd.socket must use ListenStream=%%t/ctxd.sock)", listenFDsStart, l.Addr().Network())
	}
	// systemd owns the file: never unlink it at exit.
	ul.SetUnlinkOnClose(false)
	return ul, n, nil
}

// isLoopback reports whether a listen address's host is loopback
// ("localhost", 127.0.0.0/8, ::1). An empty host (all interfaces) is not.
func isLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("listen address %q: %w", addr, err)
	}
	if host == "localhost" {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}
