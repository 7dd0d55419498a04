//go:build !unix

package api

// checkSocket has nothing to check where sockets have no owner.
func checkSocket(string, []uint32) error { return nil }

func trustedOwners(func(string) string) []uint32 { return nil }
