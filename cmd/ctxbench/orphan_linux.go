//go:build linux

package main

import (
	"os/exec"
	"syscall"
)

// orphanGuard has the kernel send the ctxd that cmd starts SIGTERM when
// ctxbench dies without stopping it (SIGKILL, the out-of-memory killer):
// a load run never leaves a daemon behind.
func orphanGuard(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
