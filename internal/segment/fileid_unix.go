//go:build unix

package segment

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// fileIdentity names a file by device and inode, so that a view can tell
// its file from one renamed over it.
func fileIdentity(st os.FileInfo) [2]uint64 {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return [2]uint64{uint64(sys.Dev), uint64(sys.Ino)}
	}
	return [2]uint64{}
}

// renamed returns f under a new name: a duplicate of its descriptor, named
// name, with f closed. When the descriptor cannot be duplicated, f keeps its
// old name.
func renamed(f *os.File, name string) *os.File {
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		return f
	}
	_ = f.Close()
	return os.NewFile(uintptr(fd), name)
}
