//go:build unix

package api

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// serveSocket serves a minimal status answer on a unix socket at path.
func serveSocket(t *testing.T, path string) {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", ContentTypeJSON)
		_, _ = w.Write([]byte(`{"version":"test"}`))
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// TestClientChecksTheSocket: the Client talks to a socket of its own user
// in a directory only that user can write; it refuses a socket whose
// directory others can write (someone could have replaced it), a path
// that is not a socket, and — when the test runs as root and can give the
// socket away — a socket of another user unless that uid is trusted.
func TestClientChecksTheSocket(t *testing.T) {
	dir := t.TempDir()
	_ = os.Chmod(dir, 0o700)
	sock := filepath.Join(dir, "ctxd.sock")
	serveSocket(t, sock)
	ctx := context.Background()
	if _, err := (&Client{Socket: sock}).Status(ctx); err != nil {
		t.Fatalf("own socket: %v", err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	_, err := (&Client{Socket: sock}).Status(ctx)
	if ErrorCode(err) != Forbidden || strings.Contains(err.Error(), "is ctxd running") || !strings.Contains(err.Error(), "others can replace") {
		t.Fatalf("a directory others can write: %v", err)
	}
	if _, err := (&Client{Socket: sock, SkipSocketCheck: true}).Status(ctx); err != nil {
		t.Fatalf("check off: %v", err)
	}
	_ = os.Chmod(dir, 0o700)
	file := filepath.Join(dir, "plain")
	_ = os.WriteFile(file, nil, 0o600)
	if _, err := (&Client{Socket: file}).Status(ctx); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("a plain file: %v", err)
	}
	if os.Getuid() != 0 {
		return
	}
	if err := os.Chown(sock, 12345, 12345); err != nil {
		t.Fatal(err)
	}
	if _, err := (&Client{Socket: sock}).Status(ctx); err == nil || !strings.Contains(err.Error(), "belongs to uid 12345") {
		// root trusts every owner? No: root is trusted as an owner, not
		// as a reader of other users' sockets.
		t.Fatalf("another user's socket: %v", err)
	}
	if _, err := (&Client{Socket: sock, TrustedUIDs: []uint32{12345}}).Status(ctx); err != nil {
		t.Fatalf("a trusted uid's socket: %v", err)
	}
}

// TestClientPermissionDeniedIsNotUnavailable: a socket the kernel refuses
// (another user's, as a user without root sees it) is not "is ctxd
// running?": the daemon runs, and the message says whose it is and how to
// be let in.
func TestClientPermissionDeniedIsNotUnavailable(t *testing.T) {
	sock := "/tmp/ctxd-1000/ctxd.sock"
	denied := &url.Error{Op: "Get", URL: "http://ctxd/v1/status", Err: &net.OpError{Op: "dial", Net: "unix",
		Err: os.NewSyscallError("connect", syscall.EACCES)}}
	e := dialError("socket: "+sock, denied)
	if e.Code != Forbidden || strings.Contains(e.Message, "is ctxd running") ||
		!strings.Contains(e.Message, "socket: "+sock+": connect: permission denied") || !strings.Contains(e.Message, "daemon.allowed_uids") {
		t.Errorf("permission denied: code %q, message %q", e.Code, e.Message)
	}
	absent := &url.Error{Op: "Get", URL: "http://ctxd/v1/status", Err: &net.OpError{Op: "dial", Net: "unix",
		Err: os.NewSyscallError("connect", syscall.ENOENT)}}
	if e := dialError("socket: "+sock, absent); e.Code != Unavailable || !strings.HasPrefix(e.Message, "is ctxd running? socket: "+sock+": ") {
		t.Errorf("no socket: code %q, message %q", e.Code, e.Message)
	}
}
