package segment

import (
	"runtime/debug"
	"testing"

	"github.com/pagelog/pagelog/internal/addrspace"
)

// A slice into a closed segment's read-only mapping may be read after its
// lifetime (README: a stale slice reads old or zero bytes, never crashes).
// When a new active segment's mapping takes over that address range, its
// file covers only its first allocation step, and the stale slice points
// past it: there it must read zeros, not fault. Deterministic counterpart
// of the queue's TestQueueStaleBodyAfterRangeReuseNoFault.
func TestStaleSliceAfterRangeReuseReadsZeros(t *testing.T) {
	cfg := testConfig(t, 8<<20, 4096)
	cfg.Ranges = addrspace.For("segment-test:" + t.Name())
	a, err := Create(cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	w := fill(t, a)
	if a.End() < 4<<20 {
		t.Fatalf("segment filled to %d bytes only", a.End())
	}
	// A slice near the end of a, far past the first allocation step of
	// any new segment.
	stale := a.ro[a.End()-4096 : a.End()]
	end, rangeA := a.End(), &a.ro[0]
	if err := a.Seal(false); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := Create(cfg, uint64(len(w.sizes)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if &b.ro[0] != rangeA {
		t.Skip("the new segment's mapping took another range: nothing to check")
	}
	if alloc := b.w.alloc.Load(); alloc >= end-4096 {
		t.Fatalf("the new segment is allocated to %d, past the stale slice at %d", alloc, end-4096)
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("reading a stale slice past the new segment's file: %v", r)
		}
	}()
	for i, c := range stale {
		if c != 0 {
			t.Fatalf("stale byte %d reads %#x past the new segment's file, want 0", i, c)
		}
	}
}
