//go:build linux

package mmapfile

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Populate faults in the pages of a writable mapping b[off:off+n] ahead of
// the writer (MADV_POPULATE_WRITE, Linux 5.14 and later), so that the page
// faults of a freshly allocated file are not paid on the append path. Where
// the kernel lacks it, the pages are touched one by one with a read, which
// at least maps them. It never changes the bytes.
func Populate(b []byte, off, n int) error {
	r := pageRange(b, off, n)
	if len(r) == 0 {
		return nil
	}
	err := unix.Madvise(r, unix.MADV_POPULATE_WRITE)
	if err == nil {
		return nil
	}
	if errors.Is(err, unix.EINVAL) {
		var sink byte
		for i := 0; i < len(r); i += PageSize {
			sink += r[i]
		}
		_ = sink
		return nil
	}
	return fmt.Errorf("mmapfile: populate: %w", err)
}

// Allocate reserves disk blocks for f[off:off+n] and extends the file size to
// cover them (fallocate mode 0), so that a later write through a mapping
// cannot fail for lack of space with a SIGBUS: a full disk is an error here,
// at allocation time.
func Allocate(f *os.File, off, n int64) error {
	if n <= 0 {
		return nil
	}
	for {
		err := unix.Fallocate(int(f.Fd()), 0, off, n)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EOPNOTSUPP {
			return allocateByWrite(f, off, n)
		}
		if err != nil {
			return fmt.Errorf("mmapfile: fallocate %s [%d,+%d): %w", f.Name(), off, n, err)
		}
		return nil
	}
}

// ZeroRange makes f[off:off+n] read as zeros while keeping the blocks
// allocated and the file size unchanged (FALLOC_FL_ZERO_RANGE), a metadata
// operation on extent filesystems. It falls back to writing zeros.
func ZeroRange(f *os.File, off, n int64) error {
	if n <= 0 {
		return nil
	}
	for {
		err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_ZERO_RANGE|unix.FALLOC_FL_KEEP_SIZE, off, n)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EOPNOTSUPP || err == unix.EINVAL {
			return writeZeros(f, off, n)
		}
		if err != nil {
			return fmt.Errorf("mmapfile: zero range %s [%d,+%d): %w", f.Name(), off, n, err)
		}
		return nil
	}
}

// Datasync flushes f's data and the metadata needed to read it back
// (fdatasync).
func Datasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("mmapfile: fdatasync %s: %w", f.Name(), err)
		}
		return nil
	}
}
