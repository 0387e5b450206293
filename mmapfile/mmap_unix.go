//go:build unix

package mmapfile

import (
	"errors"
	"fmt"
	"os"
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
	if errors.Is(err, unix.ENOMEM) {
		// No room in the address space for it (a 32-bit process, or an
		// emulator's), or the process has as many mappings as the system
		// allows (vm.max_map_count).
		return nil, fmt.Errorf("%w: mmap %s (%d bytes): %w (the address space, or the count of mappings, is exhausted)", ErrAddressSpace, f.Name(), size, err)
	}
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
		// Not made by unix.Mmap (x/sys keeps a table of its mappings).
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

// OpenRead opens path read-only, as os.Open does, without trying to add
// the descriptor to the runtime's poller: for a regular file os.Open makes
// five system calls besides the open (two fcntl pairs around an epoll_ctl
// that fails), OpenRead one (an fcntl). A lazily mapped segment opens up to three
// files each time it is mapped again. Errors are *os.PathError, as from
// os.Open.
func OpenRead(path string) (*os.File, error) {
	for {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: path, Err: err}
		}
		return os.NewFile(uintptr(fd), path), nil
	}
}
