// Package peeruid finds the local user at the other end of a loopback TCP
// connection (on Linux from /proc/net/tcp; elsewhere it is not known).
package peeruid
