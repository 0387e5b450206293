package testkit

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill cmd's process when this one dies.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
