//go:build unix

package engine

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pagelog/pagelog/internal/testkit"
)

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
