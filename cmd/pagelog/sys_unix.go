//go:build unix

package main

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// oNoFollow makes an open fail on a symbolic link.
const oNoFollow = unix.O_NOFOLLOW

// mapShared maps n bytes of f, shared and writable.
func mapShared(f *os.File, n int) ([]byte, error) {
	return unix.Mmap(int(f.Fd()), 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}

// unmap releases a mapping of mapShared.
func unmap(b []byte) error { return unix.Munmap(b) }

// freeBytes is the space an unprivileged user may still take in dir's
// file system.
func freeBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// isTerminalFile reports whether f is a terminal.
func isTerminalFile(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), ioctlReadTermios)
	return err == nil
}

// fileID names a file by device and inode.
func fileID(fi os.FileInfo) [2]uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return [2]uint64{uint64(st.Dev), uint64(st.Ino)}
	}
	return [2]uint64{}
}

// allocatedBytes is the disk a file takes: its allocated blocks, which a
// sparse file has fewer of than its size says.
func allocatedBytes(fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int64(st.Blocks) * 512
	}
	return fi.Size()
}
