package mmapfile

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// FreeBSD: what differs from Linux, each a named function.

// DsyncFlag is O_SYNC (the written range durable when the write returns).
const DsyncFlag = os.O_SYNC

// Datasync flushes f with fsync, which on FreeBSD also flushes the
// drive's write cache (as fdatasync does on Linux).
func Datasync(f *os.File) error { return f.Sync() }

// Allocate reserves disk blocks for f[off:off+n] with posix_fallocate,
// which also extends the size, so that a full disk is an error here.
// File systems that refuse it (ZFS: EINVAL) get zeros written.
func Allocate(f *os.File, off, n int64) error {
	err := allocateWith(f, off, n, func() (bool, error) {
		if strconv.IntSize != 64 {
			return false, nil // the 64-bit arguments take two words each there
		}
		for {
			// The kernel returns posix_fallocate's error number as the
			// result (kern_posix_error), not as errno.
			var err error
			r, _, e := unix.Syscall(unix.SYS_POSIX_FALLOCATE, f.Fd(), uintptr(off), uintptr(n))
			if e != 0 {
				err = e
			} else if r != 0 {
				err = unix.Errno(r)
			}
			if err == unix.EINTR {
				continue
			}
			if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
				return false, nil
			}
			return true, err
		}
	})
	if err != nil {
		return fmt.Errorf("mmapfile: posix_fallocate %s [%d,+%d): %w", f.Name(), off, n, err)
	}
	return nil
}
