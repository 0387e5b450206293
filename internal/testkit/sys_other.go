//go:build !unix

package testkit

import (
	"errors"
	"os"
)

// Mkfifo makes a FIFO at path: not here.
func Mkfifo(path string) error { return errors.ErrUnsupported }

// Inode is a file's inode number: 0, the system does not say.
func Inode(fi os.FileInfo) uint64 { return 0 }

// DiskBytes is the disk a file takes: its size, the system does not say
// how many blocks it takes.
func DiskBytes(fi os.FileInfo) int64 { return fi.Size() }

// KillSelf ends this process at once, as kill -9 does.
func KillSelf() { os.Exit(137) }
