//go:build !linux

package server

import (
	"errors"
	"net"
)

// peerUID fails closed where SO_PEERCRED is not available: every request
// on the unix socket is refused (docs/design.md §8b requires the check).
func peerUID(*net.UnixConn) (uint32, error) {
	return 0, errors.New("peer credentials are only implemented on Linux")
}
