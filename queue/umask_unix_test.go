//go:build unix

package queue

import "golang.org/x/sys/unix"

func unixUmask(m int) int { return unix.Umask(m) }
