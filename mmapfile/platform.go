package mmapfile

import (
	"os"
)

// The platform-independent halves of the system differences: each
// platform file supplies the calls, these decide what to do with their
// results, and are tested on Linux through the same functions.

// syncWithFallback runs full, the sync that reaches stable storage
// (F_FULLFSYNC on macOS), and, where it fails (some network and FUSE file
// systems refuse it), plain, which promises less (fsync: the data handed
// to the drive, perhaps still in its volatile cache). An error of plain
// is the result; full's error is dropped only when plain succeeds.
func syncWithFallback(full, plain func() error) error {
	if err := full(); err == nil {
		return nil
	}
	return plain()
}

// allocateWith reserves f[off:off+n] with reserve (F_PREALLOCATE,
// posix_fallocate), which need not extend the file's size, then extends
// the size to off+n if it is shorter. Where reserve is not supported it
// writes zeros instead (allocateByWrite). Either way a full disk is an
// error here, not a SIGBUS at a store through a mapping later.
func allocateWith(f *os.File, off, n int64, reserve func() (supported bool, err error)) error {
	if n <= 0 {
		return nil
	}
	supported, err := reserve()
	if !supported {
		return allocateByWrite(f, off, n)
	}
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Size() < off+n {
		return f.Truncate(off + n)
	}
	return nil
}
