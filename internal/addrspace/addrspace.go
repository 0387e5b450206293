//go:build unix

// Package addrspace keeps the address ranges of read-only file mappings
// whose slices may be used, by mistake, after the mapping was given back:
// the message bodies of a queue. A given-back mapping is never unmapped
// (a stale slice would then crash the process); its range is overlaid with
// read-only zero pages and kept in its Pool, which reuses it for a later
// mapping of the same pool. So a stale slice reads its own bytes, zeros,
// or, once its range is reused, bytes of a later mapping of the same pool;
// never another pool's, and it never faults. Writing through any of them
// faults: every mapping and overlay is read-only.
//
// A Pool holds at most the address space of its peak of mapped bytes, plus
// fragmentation: freed ranges are reused first-fit by size and coalesced
// with freed neighbours. Pools live as long as the process; For returns
// the pool of a key, so that a queue closed and opened again in the same
// process reuses its own ranges.
//
// These are unsafe operations (mappings at fixed addresses over memory a
// caller may still reference); the package is internal so that only the
// engine, which keeps the rules above, uses them.
package addrspace

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

var pageSize = uintptr(os.Getpagesize())

// A Pool owns address ranges. It is safe for concurrent use.
type Pool struct {
	mu       sync.Mutex
	free     []span          // freed ranges, by address
	used     map[uintptr]int // start of each range in use -> its length
	reserved int             // bytes of address space held, used or free
}

type span struct {
	p unsafe.Pointer
	n int
}

func (s span) addr() uintptr { return uintptr(s.p) }

var pools struct {
	sync.Mutex
	m map[string]*Pool
}

// For returns the pool of key, making it on first use.
func For(key string) *Pool {
	pools.Lock()
	defer pools.Unlock()
	if pools.m == nil {
		pools.m = make(map[string]*Pool)
	}
	p := pools.m[key]
	if p == nil {
		p = &Pool{used: make(map[uintptr]int)}
		pools.m[key] = p
	}
	return p
}

func roundUp(n int) int { return (n + int(pageSize) - 1) &^ (int(pageSize) - 1) }

// Map maps size bytes of f read-only and shared, in a range of the pool:
// a freed one when one is large enough, else a new one. A size of 0
// returns an empty slice.
func (p *Pool) Map(f *os.File, size int) ([]byte, error) {
	if size <= 0 {
		return []byte{}, nil
	}
	n := roundUp(size)
	p.mu.Lock()
	defer p.mu.Unlock()
	if i := p.fit(n); i >= 0 {
		s := p.free[i]
		ptr, err := unix.MmapPtr(int(f.Fd()), 0, s.p, uintptr(size), unix.PROT_READ, unix.MAP_SHARED|unix.MAP_FIXED)
		if err != nil {
			// A failed MAP_FIXED may have left a hole: zeros go back.
			if overlayZeros(s.p, n) != nil {
				p.free = slices.Delete(p.free, i, i+1)
				p.reserved -= s.n
			}
			return nil, fmt.Errorf("addrspace: mmap %s: %w", f.Name(), err)
		}
		if s.n == n {
			p.free = slices.Delete(p.free, i, i+1)
		} else {
			p.free[i] = span{unsafe.Add(s.p, n), s.n - n}
		}
		p.used[uintptr(ptr)] = n
		return unsafe.Slice((*byte)(ptr), size), nil
	}
	b, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("addrspace: mmap %s: %w", f.Name(), err)
	}
	p.used[uintptr(unsafe.Pointer(&b[0]))] = n
	p.reserved += n
	return b, nil
}

// fit returns the smallest free range of at least n bytes (the one freed
// longest ago among equals: the lowest address), or -1.
func (p *Pool) fit(n int) int {
	best := -1
	for i, s := range p.free {
		if s.n >= n && (best < 0 || s.n < p.free[best].n) {
			best = i
		}
	}
	return best
}

// Retire gives a mapping made by Map back: its range reads as zeros from
// now on, and a later Map of this pool may reuse it. It must be called
// once per mapping, with the slice Map returned (or a reslice starting at
// the same address).
func (p *Pool) Retire(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	ptr := unsafe.Pointer(&b[0])
	addr := uintptr(ptr)
	p.mu.Lock()
	defer p.mu.Unlock()
	n, ok := p.used[addr]
	if !ok {
		return fmt.Errorf("addrspace: retire of a range this pool did not map")
	}
	if err := overlayZeros(ptr, n); err != nil {
		return err
	}
	delete(p.used, addr)
	i, _ := slices.BinarySearchFunc(p.free, addr, func(s span, a uintptr) int {
		switch {
		case s.addr() < a:
			return -1
		case s.addr() > a:
			return 1
		}
		return 0
	})
	p.free = slices.Insert(p.free, i, span{ptr, n})
	// Coalesce with the neighbours this pool freed.
	if i+1 < len(p.free) && p.free[i].addr()+uintptr(p.free[i].n) == p.free[i+1].addr() {
		p.free[i].n += p.free[i+1].n
		p.free = slices.Delete(p.free, i+1, i+2)
	}
	if i > 0 && p.free[i-1].addr()+uintptr(p.free[i-1].n) == p.free[i].addr() {
		p.free[i-1].n += p.free[i].n
		p.free = slices.Delete(p.free, i, i+1)
	}
	return nil
}

// ZeroFrom overlays read-only zero pages over the pages of a mapping made
// by Map that lie wholly at or past from, before the file under it is cut
// there: a stale slice into that part then reads zeros instead of faulting
// past the end of the file. The range stays the mapping's for Retire.
func (p *Pool) ZeroFrom(b []byte, from int) error {
	if len(b) == 0 {
		return nil
	}
	start := roundUp(max(from, 0))
	p.mu.Lock()
	defer p.mu.Unlock()
	n, ok := p.used[uintptr(unsafe.Pointer(&b[0]))]
	if !ok {
		return fmt.Errorf("addrspace: zero of a range this pool did not map")
	}
	if start >= n {
		return nil
	}
	return overlayZeros(unsafe.Add(unsafe.Pointer(&b[0]), start), n-start)
}

// MapFrom maps the file f again over the pages of a mapping made by Map
// that lie wholly in [from, to) (offsets in the mapping and in f), undoing
// ZeroFrom there once f has grown past them.
func (p *Pool) MapFrom(b []byte, f *os.File, from, to int) error {
	if len(b) == 0 {
		return nil
	}
	start, end := roundUp(max(from, 0)), roundUp(min(to, len(b)))
	if start >= end {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.used[uintptr(unsafe.Pointer(&b[0]))]; !ok {
		return fmt.Errorf("addrspace: remap of a range this pool did not map")
	}
	_, err := unix.MmapPtr(int(f.Fd()), int64(start), unsafe.Add(unsafe.Pointer(&b[0]), start), uintptr(end-start),
		unix.PROT_READ, unix.MAP_SHARED|unix.MAP_FIXED)
	if err != nil {
		return fmt.Errorf("addrspace: remap %s: %w", f.Name(), err)
	}
	return nil
}

// Reserved returns the bytes of address space the pool holds, in use or
// freed.
func (p *Pool) Reserved() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reserved
}

// overlayZeros maps anonymous read-only zero pages over [addr, addr+n).
func overlayZeros(addr unsafe.Pointer, n int) error {
	_, err := unix.MmapPtr(-1, 0, addr, uintptr(n), unix.PROT_READ,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED)
	if err != nil {
		return fmt.Errorf("addrspace: zero overlay: %w", err)
	}
	return nil
}
