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
// with freed neighbours. For returns the pool of a key, so that a queue
// closed and opened again in the same process reuses its own ranges, and
// counts a user of it until Done.
//
// A pool no one uses (its log is closed) keeps its ranges for its next
// user while the idle pools hold at most a budget for the whole process
// (SetIdleBudget: 256 MiB on 32-bit platforms, 16 GiB on 64-bit ones).
// Past it, the pools closed longest ago give their freed ranges, and
// later the ranges their held records give back, to the process's spare
// ranges, which any pool takes before it maps a new range. So a process
// that opens and closes queue after queue holds the peak of what it maps
// at once plus the budget, not the sum of every pool it ever made (a
// 32-bit process ran out of address space after a few dozen queues). The
// price, past the budget only: a slice used after its queue was closed,
// long enough ago, may read bytes of a log opened later, once its range
// is taken again; it still never faults. While a pool is in use, or
// within the budget, its ranges stay its own.
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
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

var pageSize = uintptr(os.Getpagesize())

// A Pool owns address ranges. It is safe for concurrent use.
type Pool struct {
	key      string
	mu       sync.Mutex
	users    int             // For calls not yet matched by Done
	idle     bool            // on pools.idle (under pools' lock)
	spilled  bool            // no user, its ranges given to the spares
	free     []span          // freed ranges, by address
	used     map[uintptr]int // start of each range in use -> its length
	reserved int             // bytes of address space held, used or free
}

type span struct {
	p unsafe.Pointer
	n int
}

func (s span) addr() uintptr { return uintptr(s.p) }

// pools are the process's pools. Lock order: pools, a Pool's mu, spare.
var pools struct {
	sync.Mutex
	m    map[string]*Pool
	idle []*Pool // pools no one uses that keep their ranges, the longest unused first
}

// idleBudget is the address space the idle pools may keep.
var idleBudget atomic.Int64

func init() {
	if unsafe.Sizeof(uintptr(0)) < 8 {
		idleBudget.Store(256 << 20)
	} else {
		idleBudget.Store(16 << 30)
	}
}

// SetIdleBudget sets the address space the pools no one uses may keep
// (see the package doc) and returns the one it replaces. Tests lower it.
func SetIdleBudget(n int) (old int) {
	old = int(idleBudget.Swap(int64(n)))
	pools.Lock()
	spillIdle()
	pools.Unlock()
	return old
}

// spare holds the freed ranges of pools no one uses: zero pages, taken
// by any pool before it maps a new range.
var spare struct {
	sync.Mutex
	free     []span // by address
	reserved int
}

// For returns the pool of key, making it on first use, and counts one
// more user of it: each call is matched by one Done.
func For(key string) *Pool {
	pools.Lock()
	defer pools.Unlock()
	if pools.m == nil {
		pools.m = make(map[string]*Pool)
	}
	p := pools.m[key]
	if p == nil {
		p = &Pool{key: key, used: make(map[uintptr]int)}
		pools.m[key] = p
	}
	p.mu.Lock()
	p.users++
	p.spilled = false
	p.mu.Unlock()
	if p.idle {
		p.idle = false
		pools.idle = slices.DeleteFunc(pools.idle, func(q *Pool) bool { return q == p })
	}
	return p
}

// Done ends one use of the pool that For began. A pool no one uses keeps
// its ranges for its next user within the idle budget (see the package
// doc).
func (p *Pool) Done() {
	pools.Lock()
	defer pools.Unlock()
	p.mu.Lock()
	if p.users <= 0 {
		p.mu.Unlock()
		return
	}
	p.users--
	idle := p.users == 0
	p.mu.Unlock()
	if idle && !p.idle {
		p.idle = true
		pools.idle = append(pools.idle, p)
	}
	spillIdle()
}

// spillIdle makes the idle pools closed longest ago give their ranges to
// the spares until the idle pools keep no more than the budget. Called
// with pools locked.
func spillIdle() {
	held, budget := 0, int(idleBudget.Load())
	for _, p := range pools.idle {
		held += p.Reserved()
	}
	for len(pools.idle) > 0 && held > budget {
		p := pools.idle[0]
		pools.idle = pools.idle[1:]
		p.idle = false
		// All it held leaves the idle pools' count: its freed ranges
		// now, the ranges its records still hold when they are retired.
		held -= p.Reserved()
		p.spill()
		if p.Reserved() == 0 && pools.m[p.key] == p {
			delete(pools.m, p.key)
		}
	}
}

// spill gives the pool's freed ranges to the spares, and marks it so that
// the ranges still in use follow when they are retired.
func (p *Pool) spill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.spilled = true
	given := 0
	spare.Lock()
	for _, s := range p.free {
		spare.free = insertFree(spare.free, s)
		spare.reserved += s.n
		given += s.n
	}
	spare.Unlock()
	p.reserved -= given
	p.free = nil
}

// Spare returns the bytes of address space the process's spare ranges
// hold.
func Spare() int {
	spare.Lock()
	defer spare.Unlock()
	return spare.reserved
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
	if b, ok, err := p.mapSpare(f, size, n); ok || err != nil {
		return b, err
	}
	b, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("addrspace: mmap %s: %w", f.Name(), err)
	}
	p.used[uintptr(unsafe.Pointer(&b[0]))] = n
	p.reserved += n
	return b, nil
}

// mapSpare maps size bytes (n rounded up to pages) of f in a spare range,
// which becomes the pool's; ok is false when no spare range is large
// enough. p.mu is held.
func (p *Pool) mapSpare(f *os.File, size, n int) (b []byte, ok bool, err error) {
	spare.Lock()
	defer spare.Unlock()
	i := fit(spare.free, n)
	if i < 0 {
		return nil, false, nil
	}
	s := spare.free[i]
	if s.n == n {
		spare.free = slices.Delete(spare.free, i, i+1)
	} else {
		spare.free[i] = span{unsafe.Add(s.p, n), s.n - n}
	}
	spare.reserved -= n
	ptr, err := unix.MmapPtr(int(f.Fd()), 0, s.p, uintptr(size), unix.PROT_READ, unix.MAP_SHARED|unix.MAP_FIXED)
	if err != nil {
		// A failed MAP_FIXED may have left a hole: zeros go back.
		if overlayZeros(s.p, n) == nil {
			spare.free = insertFree(spare.free, span{s.p, n})
			spare.reserved += n
		}
		return nil, true, fmt.Errorf("addrspace: mmap %s: %w", f.Name(), err)
	}
	p.used[uintptr(ptr)] = n
	p.reserved += n
	return unsafe.Slice((*byte)(ptr), size), true, nil
}

// fit returns the smallest free range of at least n bytes (the one freed
// longest ago among equals: the lowest address), or -1.
func (p *Pool) fit(n int) int { return fit(p.free, n) }

func fit(free []span, n int) int {
	best := -1
	for i, s := range free {
		if s.n >= n && (best < 0 || s.n < free[best].n) {
			best = i
		}
	}
	return best
}

// insertFree inserts s into free, sorted by address, and coalesces it
// with its neighbours.
func insertFree(free []span, s span) []span {
	addr := s.addr()
	i, _ := slices.BinarySearchFunc(free, addr, func(s span, a uintptr) int {
		switch {
		case s.addr() < a:
			return -1
		case s.addr() > a:
			return 1
		}
		return 0
	})
	free = slices.Insert(free, i, s)
	if i+1 < len(free) && free[i].addr()+uintptr(free[i].n) == free[i+1].addr() {
		free[i].n += free[i+1].n
		free = slices.Delete(free, i+1, i+2)
	}
	if i > 0 && free[i-1].addr()+uintptr(free[i-1].n) == free[i].addr() {
		free[i-1].n += free[i].n
		free = slices.Delete(free, i, i+1)
	}
	return free
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
	if p.spilled {
		// No one uses the pool any more, and its ranges went to the
		// spares: so does this one.
		p.reserved -= n
		spare.Lock()
		spare.free = insertFree(spare.free, span{ptr, n})
		spare.reserved += n
		spare.Unlock()
		return nil
	}
	p.free = insertFree(p.free, span{ptr, n})
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
