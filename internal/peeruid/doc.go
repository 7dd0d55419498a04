// Package peeruid finds the local user at the other end of a loopback TCP
// connection (on Linux from the kernel's sock_diag, else /proc/net/tcp;
// elsewhere it is not known).
package peeruid
