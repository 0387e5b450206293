//go:build linux

package segment

import (
	"os"

	"golang.org/x/sys/unix"
)

// fileHasDataAfter reports whether f has a data extent (written blocks, or
// pages in the page cache) at or after off, using SEEK_DATA. Unwritten
// preallocated extents count as holes. On any error it answers true, the
// safe answer for a caller that zeroes what may hold data.
func fileHasDataAfter(f *os.File, off int64) bool {
	_, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
	return err != unix.ENXIO
}
