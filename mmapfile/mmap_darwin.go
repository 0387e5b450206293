package mmapfile

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// macOS: what differs from Linux, each a named function.

// DsyncFlag is O_SYNC. It is not used for durability on macOS: an O_SYNC
// write, like fsync, may still sit in the drive's write cache; SyncAlways
// and Sync call Datasync (F_FULLFSYNC) after it.
const DsyncFlag = os.O_SYNC

// Datasync promises that f's data and size are on stable storage when it
// returns: F_FULLFSYNC, which also makes the drive flush its write cache
// (fsync on macOS does not: a synced record could be lost on power
// failure). Where F_FULLFSYNC fails (some network and FUSE file systems)
// it falls back to fsync, which promises less. As SQLite's fullfsync
// and bbolt's darwin path do.
func Datasync(f *os.File) error {
	fd := int(f.Fd())
	err := syncWithFallback(
		func() error {
			return retryEINTR(func() error { _, err := unix.FcntlInt(uintptr(fd), unix.F_FULLFSYNC, 0); return err })
		},
		func() error { return retryEINTR(func() error { return unix.Fsync(fd) }) })
	if err != nil {
		return fmt.Errorf("mmapfile: sync %s: %w", f.Name(), err)
	}
	return nil
}

// Allocate reserves disk blocks for f[off:off+n] with F_PREALLOCATE (a
// contiguous allocation first, then any) and extends the size to cover
// them, so that a full disk is an error here rather than a SIGBUS at a
// store through a mapping. A file system without F_PREALLOCATE gets zeros
// written.
func Allocate(f *os.File, off, n int64) error {
	err := allocateWith(f, off, n, func() (bool, error) {
		st := unix.Fstore_t{Flags: unix.F_ALLOCATECONTIG | unix.F_ALLOCATEALL, Posmode: unix.F_PEOFPOSMODE, Length: off + n}
		fi, err := f.Stat()
		if err != nil {
			return true, err
		}
		if fi.Size() >= off+n {
			return true, nil
		}
		st.Length = off + n - fi.Size()
		err = unix.FcntlFstore(f.Fd(), unix.F_PREALLOCATE, &st)
		if err != nil {
			st.Flags = unix.F_ALLOCATEALL
			err = unix.FcntlFstore(f.Fd(), unix.F_PREALLOCATE, &st)
		}
		if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EINVAL) {
			return false, nil
		}
		return true, err
	})
	if err != nil {
		return fmt.Errorf("mmapfile: preallocate %s [%d,+%d): %w", f.Name(), off, n, err)
	}
	return nil
}

func retryEINTR(f func() error) error {
	for {
		if err := f(); err != unix.EINTR {
			return err
		}
	}
}
