//go:build unix && !linux

package mmapfile

import (
	"os"
	"sync/atomic"
	"unsafe"
)

// Portable fallbacks for Unix systems other than Linux: no fallocate, no
// FALLOC_FL_ZERO_RANGE, no fdatasync. They keep the same promises, more
// slowly.

// HugePage is not available here; Advise ignores it.
const HugePage Advice = -1

// Populate touches each page of a writable mapping with a no-op CAS.
func Populate(b []byte, off, n int) error {
	r := pageRange(b, off, n)
	for i := 0; i+4 <= len(r); i += PageSize {
		atomic.CompareAndSwapUint32((*uint32)(unsafe.Pointer(&r[i])), 0, 0)
	}
	return nil
}

// Allocate extends f with zeros written to the disk.
func Allocate(f *os.File, off, n int64) error { return allocateByWrite(f, off, n) }

// ZeroRange writes zeros over f[off:off+n].
func ZeroRange(f *os.File, off, n int64) error { return writeZeros(f, off, n) }

// Datasync flushes f with fsync.
func Datasync(f *os.File) error { return f.Sync() }

// DsyncFlag is O_SYNC here (not every system has O_DSYNC): it promises
// more than O_DSYNC, the written range durable when the write returns.
const DsyncFlag = os.O_SYNC
