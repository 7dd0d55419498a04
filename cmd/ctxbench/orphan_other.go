//go:build !linux

package main

import "os/exec"

// orphanGuard does nothing where the kernel has no parent-death signal.
func orphanGuard(*exec.Cmd) {}
