//go:build unix

package testkit

import (
	"os"
	"syscall"
)

// Mkfifo makes a FIFO at path.
func Mkfifo(path string) error { return syscall.Mkfifo(path, 0o600) }

// Inode is a file's inode number (0 where the system does not say).
func Inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino)
	}
	return 0
}

// DiskBytes is the disk a file takes: its allocated blocks, in bytes (its
// size where the system does not say).
func DiskBytes(fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int64(st.Blocks) * 512
	}
	return fi.Size()
}

// KillSelf ends this process at once, as kill -9 does.
func KillSelf() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) }
