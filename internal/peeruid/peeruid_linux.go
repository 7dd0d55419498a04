//go:build linux

package peeruid

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// TCP returns the uid owning the client end of a loopback TCP
// connection (client is its address, server the listener's side), read
// from /proc/net/tcp or tcp6: the local user whose agent sent the request.
// ok is false when it is not found.
func TCP(client, server *net.TCPAddr) (uid uint32, ok bool) {
	file, want := "/proc/net/tcp", procAddr(client)+" "+procAddr(server)
	if client.IP.To4() == nil {
		file = "/proc/net/tcp6"
	}
	f, err := os.Open(file)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 8 || fs[1]+" "+fs[2] != want {
			continue
		}
		n, err := strconv.ParseUint(fs[7], 10, 32)
		return uint32(n), err == nil
	}
	return 0, false
}

// procAddr is a in /proc/net/tcp's form: the address as 32-bit words in
// host (little-endian) order, hex, then the port.
func procAddr(a *net.TCPAddr) string {
	var b strings.Builder
	ip := a.IP.To4()
	if ip == nil {
		ip = a.IP.To16()
	}
	for i := 0; i+4 <= len(ip); i += 4 {
		fmt.Fprintf(&b, "%08X", binary.LittleEndian.Uint32(ip[i:i+4]))
	}
	fmt.Fprintf(&b, ":%04X", a.Port)
	return b.String()
}
