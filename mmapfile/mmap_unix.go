//go:build unix

package mmapfile

import (
	"fmt"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// PageSize is the system's memory page size.
var PageSize = os.Getpagesize()

// Map maps size bytes of f, shared with the page cache. A writable mapping
// may be written through; a read-only one faults on a write, which protects
// the file from a caller that writes into a returned slice. A size of 0
// returns an empty, non-nil slice without calling mmap.
func Map(f *os.File, size int, writable bool) ([]byte, error) {
	if size < 0 {
		return nil, fmt.Errorf("mmapfile: negative size %d", size)
	}
	if size == 0 {
		return []byte{}, nil
	}
	prot := unix.PROT_READ
	if writable {
		prot |= unix.PROT_WRITE
	}
	b, err := unix.Mmap(int(f.Fd()), 0, size, prot, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmapfile: mmap %s (%d bytes): %w", f.Name(), size, err)
	}
	return b, nil
}

// Unmap releases a mapping made by Map. Unmapping an empty slice is a no-op.
func Unmap(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	err := unix.Munmap(b)
	if err == unix.EINVAL {
		// Not made by unix.Mmap (MapRetirable reuses ranges with MmapPtr).
		err = unix.MunmapPtr(unsafe.Pointer(&b[0]), uintptr(len(b)))
	}
	if err != nil {
		return fmt.Errorf("mmapfile: munmap: %w", err)
	}
	return nil
}

// pageRange widens [off, off+n) of b to whole pages, as msync and madvise
// require a page-aligned start. b must itself start on a page boundary (every
// mapping does).
func pageRange(b []byte, off, n int) []byte {
	if off < 0 {
		n += off
		off = 0
	}
	if off+n > len(b) {
		n = len(b) - off
	}
	if n <= 0 {
		return nil
	}
	start := off &^ (PageSize - 1)
	return b[start : off+n]
}

// SyncRange writes the dirty pages of b[off:off+n] to the disk and waits
// (msync MS_SYNC). It is the mapped-file form of fdatasync for one range.
func SyncRange(b []byte, off, n int) error {
	r := pageRange(b, off, n)
	if len(r) == 0 {
		return nil
	}
	if err := unix.Msync(r, unix.MS_SYNC); err != nil {
		return fmt.Errorf("mmapfile: msync: %w", err)
	}
	return nil
}

// Advice names the madvise hints pagelog uses.
type Advice int

const (
	Normal     Advice = unix.MADV_NORMAL
	Random     Advice = unix.MADV_RANDOM
	Sequential Advice = unix.MADV_SEQUENTIAL
	WillNeed   Advice = unix.MADV_WILLNEED
	DontNeed   Advice = unix.MADV_DONTNEED
)

// Advise applies an madvise hint to b[off:off+n]. Hints are advice: callers
// may ignore the error.
func Advise(b []byte, off, n int, a Advice) error {
	r := pageRange(b, off, n)
	if len(r) == 0 {
		return nil
	}
	if a < 0 {
		return nil // not supported on this system
	}
	if err := unix.Madvise(r, int(a)); err != nil {
		return fmt.Errorf("mmapfile: madvise: %w", err)
	}
	return nil
}

// Retire replaces a read-only mapping with anonymous, read-only zero pages
// at the same addresses, and so lets go of the file without leaving the
// addresses unmapped: a slice of b that a caller keeps by mistake reads
// zeros (or, once the range is reused by MapRetirable, another segment's
// bytes) instead of crashing the process, and writing into it still faults.
// The range goes to a pool that MapRetirable reuses, so that a process that
// retires mappings for ever holds no more address ranges than it had mapped
// at its peak.
func Retire(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	addr := unsafe.Pointer(&b[0])
	if err := overlayZeros(addr, len(b)); err != nil {
		return err
	}
	retired.Lock()
	defer retired.Unlock()
	if retired.free == nil {
		retired.free = make(map[int][]unsafe.Pointer)
	}
	retired.free[len(b)] = append(retired.free[len(b)], addr)
	return nil
}

// overlayZeros maps anonymous read-only zero pages over [addr, addr+n).
func overlayZeros(addr unsafe.Pointer, n int) error {
	_, err := unix.MmapPtr(-1, 0, addr, uintptr(n), unix.PROT_READ,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED)
	if err != nil {
		return fmt.Errorf("mmapfile: retire mapping: %w", err)
	}
	return nil
}

// retired holds the address ranges of retired mappings, by length.
var retired struct {
	sync.Mutex
	free map[int][]unsafe.Pointer
}

// MapRetirable maps size bytes of f read-only, like Map, for a mapping that
// will be given back with Retire (never Unmap'd while callers may hold
// slices of it). It reuses a retired range of the same length when there is
// one. Only such mappings may reuse retired ranges: a range that could later
// be unmapped would turn a stale slice into a crash.
func MapRetirable(f *os.File, size int) ([]byte, error) {
	if size > 0 {
		retired.Lock()
		var addr unsafe.Pointer
		if l := retired.free[size]; len(l) > 0 {
			addr = l[len(l)-1]
			retired.free[size] = l[:len(l)-1]
		}
		retired.Unlock()
		if addr != nil {
			p, err := unix.MmapPtr(int(f.Fd()), 0, addr, uintptr(size), unix.PROT_READ, unix.MAP_SHARED|unix.MAP_FIXED)
			if err == nil {
				return unsafe.Slice((*byte)(p), size), nil
			}
			// A failed MAP_FIXED may have left a hole: put zeros back
			// and keep the range retired.
			if overlayZeros(addr, size) == nil {
				retired.Lock()
				retired.free[size] = append(retired.free[size], addr)
				retired.Unlock()
			}
		}
	}
	return Map(f, size, false)
}
