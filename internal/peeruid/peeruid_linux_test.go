//go:build linux

package peeruid

import (
	"net"
	"os"
	"testing"
)

// TestTCPFindsOwnConnection: a loopback connection this process opened
// belongs to this process's user; a connection that does not exist is not
// found.
func TestTCPFindsOwnConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	client, server := c.LocalAddr().(*net.TCPAddr), s.LocalAddr().(*net.TCPAddr)
	uid, ok := TCP(client, server)
	if !ok || uid != uint32(os.Getuid()) {
		t.Fatalf("TCP(%v, %v) = %d, %v; want %d, true", client, server, uid, ok, os.Getuid())
	}
	gone := &net.TCPAddr{IP: client.IP, Port: 1}
	if _, ok := TCP(gone, server); ok {
		t.Fatalf("TCP found a connection from port 1")
	}
}
