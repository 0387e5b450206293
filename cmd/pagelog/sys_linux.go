package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// ioctlReadTermios reads a terminal's settings (isTerminal).
const ioctlReadTermios = unix.TCGETS

// fdatasync flushes f's data (the machine-limit figures of bench).
func fdatasync(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }
