//go:build linux

package peeruid

import (
	"net"
	"os"
	"testing"
)

// loopbackPair opens a loopback connection on network ("tcp4" or "tcp6")
// and returns its client and server addresses as the proxy sees them.
func loopbackPair(t *testing.T, network, addr string) (client, server *net.TCPAddr) {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Skipf("no %s loopback here: %v", network, err)
	}
	t.Cleanup(func() { ln.Close() })
	c, err := net.Dial(network, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return c.LocalAddr().(*net.TCPAddr), s.LocalAddr().(*net.TCPAddr)
}

// TestTCPFindsOwnConnection: a loopback connection this process opened
// belongs to this process's user; a connection that does not exist is not
// found. On IPv4 and IPv6, by TCP and by each of its two ways (netlink's
// sock_diag and /proc/net/tcp), which agree.
func TestTCPFindsOwnConnection(t *testing.T) {
	for _, tc := range []struct{ network, addr string }{{"tcp4", "127.0.0.1:0"}, {"tcp6", "[::1]:0"}} {
		t.Run(tc.network, func(t *testing.T) {
			client, server := loopbackPair(t, tc.network, tc.addr)
			uid, ok := TCP(client, server)
			if !ok || uid != uint32(os.Getuid()) {
				t.Fatalf("TCP(%v, %v) = %d, %v; want %d, true", client, server, uid, ok, os.Getuid())
			}
			if uid, ok := procTCP(client, server); !ok || uid != uint32(os.Getuid()) {
				t.Fatalf("procTCP(%v, %v) = %d, %v; want %d, true", client, server, uid, ok, os.Getuid())
			}
			uid, found, err := diagTCP(client, server)
			if err != nil {
				t.Logf("sock_diag not usable here (TCP reads /proc): %v", err)
			} else if !found || uid != uint32(os.Getuid()) {
				t.Fatalf("diagTCP(%v, %v) = %d, %v; want %d, true", client, server, uid, found, os.Getuid())
			}
			// A port nobody uses names no socket.
			gone := &net.TCPAddr{IP: client.IP, Port: 1}
			if _, ok := TCP(gone, server); ok {
				t.Fatalf("TCP found a connection from port 1")
			}
			if _, found, err := diagTCP(gone, server); err == nil && found {
				t.Fatalf("diagTCP found a connection from port 1")
			}
		})
	}
}

// BenchmarkTCP: one lookup of a loopback connection's peer, by sock_diag
// and by reading /proc/net/tcp (whose cost grows with every socket of the
// machine).
func BenchmarkTCP(b *testing.B) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	client, server := c.LocalAddr().(*net.TCPAddr), s.LocalAddr().(*net.TCPAddr)
	b.Run("diag", func(b *testing.B) {
		for b.Loop() {
			if _, found, err := diagTCP(client, server); err != nil || !found {
				b.Fatal(found, err)
			}
		}
	})
	b.Run("proc", func(b *testing.B) {
		for b.Loop() {
			if _, ok := procTCP(client, server); !ok {
				b.Fatal("not found")
			}
		}
	})
}
