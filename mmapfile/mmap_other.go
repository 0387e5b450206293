//go:build unix && !linux

package mmapfile

import (
	"os"
	"sync/atomic"
	"unsafe"
)

// Portable fallbacks for Unix systems other than Linux: no huge-page
// advice, no FALLOC_FL_ZERO_RANGE. They keep the same promises, more
// slowly. Allocate, Datasync and DsyncFlag are in mmap_darwin.go,
// mmap_freebsd.go and mmap_fallback.go.

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

// ZeroRange writes zeros over f[off:off+n].
func ZeroRange(f *os.File, off, n int64) error { return writeZeros(f, off, n) }
