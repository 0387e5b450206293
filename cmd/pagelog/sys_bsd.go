//go:build darwin || dragonfly || freebsd || netbsd || openbsd

package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// ioctlReadTermios reads a terminal's settings (isTerminal).
const ioctlReadTermios = unix.TIOCGETA

// fdatasync flushes f's data: fsync, where there is no fdatasync.
func fdatasync(f *os.File) error { return f.Sync() }
