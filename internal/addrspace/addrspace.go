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
// A pool no one uses (Done as often as For was called: its log is closed)
// keeps its ranges for its next open, up to a budget for the whole
// process (SetIdleBudget: 256 MiB on 32-bit platforms, 64 GiB on 64-bit
// ones). Past it, the pools closed longest ago give back to the system
// the parts of their ranges no slice can point into: the pages past what
// each retired mapping held (Retire's written), most of a segment mapped
// at its full size and barely written. They keep the pages that held
// records, as zero pages, for the stale slices that may still point
// there. A process opening queue after queue then does not run out of
// address space (a 32-bit one did after a few dozen), and a stale body
// still never reads another pool's bytes.
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
	mu       sync.Mutex
	free     []span          // freed ranges, by address
	used     map[uintptr]int // start of each range in use -> its length
	reserved int             // bytes of address space held, used or free
	// blank are the parts of free ranges that no mapping ever wrote
	// into (past Retire's written): no slice points there, so they go
	// back to the system once the pool has no user.
	blank []span
	users int  // For calls not yet matched by Done
	idle  bool // on pools.idle
}

type span struct {
	p unsafe.Pointer
	n int
}

func (s span) addr() uintptr { return uintptr(s.p) }

// pools are the process's pools. Lock order: pools, then a Pool's mu.
var pools struct {
	sync.Mutex
	m    map[string]*Pool
	idle []*Pool // pools no one uses, the longest unused first
}

// idleBudget is the address space the pools no one uses may hold before
// the longest unused give back what no slice can point into.
var idleBudget atomic.Int64

func init() {
	if unsafe.Sizeof(uintptr(0)) < 8 {
		idleBudget.Store(256 << 20)
	} else {
		idleBudget.Store(64 << 30)
	}
}

// SetIdleBudget sets the address space the pools no one uses may hold
// (see the package doc) and returns the one it replaces. Tests lower it.
func SetIdleBudget(n int) (old int) { return int(idleBudget.Swap(int64(n))) }

// For returns the pool of key, making it on first use, and counts one more
// user of it: each call is matched by a Done.
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
	p.mu.Lock()
	p.users++
	p.mu.Unlock()
	if p.idle {
		p.idle = false
		pools.idle = slices.DeleteFunc(pools.idle, func(q *Pool) bool { return q == p })
	}
	return p
}

// Done ends a use of the pool For counted. A pool no user is left to
// keeps its ranges for its next user, within the idle budget (see the
// package doc).
func (p *Pool) Done() {
	pools.Lock()
	defer pools.Unlock()
	p.mu.Lock()
	if p.users > 0 {
		p.users--
	}
	done := p.users == 0 && !p.idle
	p.mu.Unlock()
	if done {
		p.idle = true
		pools.idle = append(pools.idle, p)
	}
	trimIdle()
}

// trimIdle makes the pools no one uses give back their blank parts, the
// longest unused first, until they hold no more than the idle budget. Called
// with pools locked.
func trimIdle() {
	held, budget := 0, int(idleBudget.Load())
	for _, p := range pools.idle {
		held += p.Reserved()
	}
	for _, p := range pools.idle {
		if held <= budget {
			return
		}
		held -= p.trim()
	}
}

// trim gives back the blank parts of the pool's freed ranges and returns
// the bytes given back.
func (p *Pool) trim() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	before := p.reserved
	kept := p.blank[:0]
	for _, b := range p.blank {
		if err := unmap(b); err != nil {
			kept = append(kept, b) // still zeros, still the pool's
			continue
		}
		p.cut(b)
	}
	p.blank = kept
	return before - p.reserved
}

// cut takes b, which lies in one free range, out of the free ranges and
// out of the pool's reservation.
func (p *Pool) cut(b span) {
	for i, f := range p.free {
		if b.addr() < f.addr() || b.addr()+uintptr(b.n) > f.addr()+uintptr(f.n) {
			continue
		}
		var parts []span
		if lo := int(b.addr() - f.addr()); lo > 0 {
			parts = append(parts, span{f.p, lo})
		}
		if hi := int(f.addr() + uintptr(f.n) - b.addr() - uintptr(b.n)); hi > 0 {
			parts = append(parts, span{unsafe.Add(b.p, b.n), hi})
		}
		p.free = slices.Replace(p.free, i, i+1, parts...)
		p.reserved -= b.n
		return
	}
}

// unblank forgets the blank parts of [a, a+n), a free range taken by a
// mapping again.
func (p *Pool) unblank(a uintptr, n int) {
	end := a + uintptr(n)
	out := p.blank[:0]
	for _, b := range p.blank {
		bend := b.addr() + uintptr(b.n)
		if bend <= a || b.addr() >= end {
			out = append(out, b)
			continue
		}
		if b.addr() < a {
			out = append(out, span{b.p, int(a - b.addr())})
		}
		if bend > end {
			out = append(out, span{unsafe.Add(b.p, int(end-b.addr())), int(bend - end)})
		}
	}
	p.blank = out
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
				// The range is lost to the pool: none of it may be
				// unmapped as blank later.
				p.free = slices.Delete(p.free, i, i+1)
				p.reserved -= s.n
				p.unblank(s.addr(), s.n)
			}
			return nil, fmt.Errorf("addrspace: mmap %s: %w", f.Name(), err)
		}
		if s.n == n {
			p.free = slices.Delete(p.free, i, i+1)
		} else {
			p.free[i] = span{unsafe.Add(s.p, n), s.n - n}
		}
		p.unblank(s.addr(), n)
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
// the same address). written bounds what slices of the mapping may point
// into (the bytes of its records): the pages past it are blank, given back
// to the system once the pool has no user (Done), at once if it has none
// already.
func (p *Pool) Retire(b []byte, written int) error {
	idle, err := p.retire(b, written)
	if idle {
		// A held mapping of a closed log: its blank part may be over the
		// budget.
		pools.Lock()
		trimIdle()
		pools.Unlock()
	}
	return err
}

// retire is Retire under p.mu; idle says the pool has no user.
func (p *Pool) retire(b []byte, written int) (idle bool, err error) {
	if len(b) == 0 {
		return false, nil
	}
	ptr := unsafe.Pointer(&b[0])
	addr := uintptr(ptr)
	p.mu.Lock()
	defer p.mu.Unlock()
	n, ok := p.used[addr]
	if !ok {
		return false, fmt.Errorf("addrspace: retire of a range this pool did not map")
	}
	if err := overlayZeros(ptr, n); err != nil {
		return false, err
	}
	delete(p.used, addr)
	keep := roundUp(min(max(written, 0), n))
	if keep < n {
		p.blank = append(p.blank, span{unsafe.Add(ptr, keep), n - keep})
	}
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
	return p.users == 0 && keep < n, nil
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

// unmap gives the pages of s back to the system.
func unmap(s span) error {
	return unix.MunmapPtr(s.p, uintptr(s.n))
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
