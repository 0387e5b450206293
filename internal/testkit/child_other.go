//go:build !linux

package testkit

import "os/exec"

// dieWithParent: only Linux kills a child when its parent dies.
func dieWithParent(cmd *exec.Cmd) {}
