//go:build unix

package engine

import (
	"os"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pagelog/pagelog/internal/testkit"
)

// mkfifo makes a FIFO at path.
func mkfifo(path string) error { return syscall.Mkfifo(path, 0o600) }

// inodeNumber is a file's inode number.
func inodeNumber(fi os.FileInfo) uint64 { return uint64(fi.Sys().(*syscall.Stat_t).Ino) }

// blocksOf is the disk a file takes: its allocated blocks.
func blocksOf(fi os.FileInfo) int64 { return int64(fi.Sys().(*syscall.Stat_t).Blocks) * 512 }

// killSelf ends this process at once, as kill -9 does.
func killSelf() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) }

// residentPages counts the pages of the mappings of path in this process
// that are in memory (mincore), and the pages of those mappings.
func residentPages(t *testing.T, path string) (in, all int) {
	t.Helper()
	for _, m := range testkit.Maps(t) {
		if m.Path != path || m.Deleted {
			continue
		}
		n := int(m.End-m.Start) / unix.Getpagesize()
		vec := make([]byte, n)
		_, _, errno := unix.Syscall(unix.SYS_MINCORE, m.Start, m.End-m.Start, uintptr(unsafe.Pointer(&vec[0])))
		if errno != 0 {
			t.Fatal(errno)
		}
		for _, v := range vec {
			in += int(v & 1)
		}
		all += n
	}
	return in, all
}
