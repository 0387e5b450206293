//go:build unix

package addrspace

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func fileWith(t *testing.T, size int, text string) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := f.Truncate(int64(size)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte(text), 0); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestRetireReadsZeros: a slice kept past Retire reads zeros, never
// faults, and the file is unchanged.
func TestRetireReadsZeros(t *testing.T) {
	p := &Pool{used: map[uintptr]int{}}
	f := fileWith(t, 8192, "data")
	m, err := p.Map(f, 8192)
	if err != nil {
		t.Fatal(err)
	}
	stale := m[:4]
	if string(stale) != "data" {
		t.Fatalf("mapping reads %q", stale)
	}
	if err := p.Retire(m); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stale, make([]byte, 4)) {
		t.Fatalf("retired range reads %q, want zeros", stale)
	}
	buf := make([]byte, 4)
	if _, err := f.ReadAt(buf, 0); err != nil || string(buf) != "data" {
		t.Fatalf("file after retire: %q %v", buf, err)
	}
	if err := p.Retire(m); err == nil {
		t.Fatal("a second Retire of the same range succeeded")
	}
}

// TestRangesReusedWithinPool: freed ranges serve later mappings of other
// sizes, coalesce, and keep the pool at its peak.
func TestRangesReusedWithinPool(t *testing.T) {
	p := &Pool{used: map[uintptr]int{}}
	a, err := p.Map(fileWith(t, 64<<10, "first"), 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	stale := a[:5]
	if err := p.Retire(a); err != nil {
		t.Fatal(err)
	}
	b, err := p.Map(fileWith(t, 16<<10, "again"), 16<<10)
	if err != nil {
		t.Fatal(err)
	}
	if &b[0] != &a[0] || string(stale) != "again" {
		t.Fatalf("freed range not reused first-fit: %p vs %p, stale reads %q", &b[0], &a[0], stale)
	}
	c, err := p.Map(fileWith(t, 40<<10, "third"), 40<<10) // fits the remaining 48 KiB
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Reserved(); got != 64<<10 {
		t.Fatalf("pool holds %d bytes, its peak was %d", got, 64<<10)
	}
	if err := p.Retire(b); err != nil {
		t.Fatal(err)
	}
	if err := p.Retire(c); err != nil {
		t.Fatal(err)
	}
	d, err := p.Map(fileWith(t, 64<<10, "whole"), 64<<10) // the pieces coalesced
	if err != nil {
		t.Fatal(err)
	}
	if &d[0] != &a[0] || p.Reserved() != 64<<10 {
		t.Fatalf("freed pieces did not coalesce: %p vs %p, reserved %d", &d[0], &a[0], p.Reserved())
	}
	_ = p.Retire(d)
}

// TestPoolsAreSeparate: a range one pool freed is never given to another
// pool's mapping: a stale slice never shows another pool's file.
func TestPoolsAreSeparate(t *testing.T) {
	x, y := For(t.Name()+"/x"), For(t.Name()+"/y")
	if For(t.Name()+"/x") != x {
		t.Fatal("For made two pools for one key")
	}
	m, err := x.Map(fileWith(t, 8192, "queue x"), 8192)
	if err != nil {
		t.Fatal(err)
	}
	stale := m[:7]
	if err := x.Retire(m); err != nil {
		t.Fatal(err)
	}
	for range 8 {
		n, err := y.Map(fileWith(t, 8192, "queue y"), 8192)
		if err != nil {
			t.Fatal(err)
		}
		if &n[0] == &m[0] || string(stale) != "\x00\x00\x00\x00\x00\x00\x00" {
			t.Fatalf("pool y reused pool x's range: stale reads %q", stale)
		}
		defer y.Retire(n)
	}
}

// TestPoolStaysAtItsPeak: many cycles of mappings of mixed sizes hold no
// more than the peak plus fragmentation (the package's promise), bounded
// here by twice the peak: fresh ranges land where the kernel puts them, so
// freed ones are not always neighbours to coalesce (seen: the peak plus one
// 40 KiB range, under the race detector). Before the pool reused ranges of
// other sizes, it grew by the peak every cycle.
func TestPoolStaysAtItsPeak(t *testing.T) {
	p := &Pool{used: map[uintptr]int{}}
	sizes := []int{64 << 10, 12 << 10, 64 << 10, 40 << 10, 4 << 10}
	for cycle := range 50 {
		var live [][]byte
		for _, n := range sizes {
			m, err := p.Map(fileWith(t, n, "x"), n-cycle%3)
			if err != nil {
				t.Fatal(err)
			}
			live = append(live, m)
		}
		for _, m := range live {
			if err := p.Retire(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	peak := 0
	for _, n := range sizes {
		peak += n
	}
	if got := p.Reserved(); got > 2*peak {
		t.Fatalf("pool holds %d bytes after 50 cycles, its peak of mapped bytes is %d", got, peak)
	}
}

// TestIdlePoolKeepsItsRangesWithinTheBudget: a pool no one uses keeps its
// ranges while the idle pools hold no more than the idle budget, and its next
// user maps into them again.
func TestIdlePoolKeepsItsRangesWithinTheBudget(t *testing.T) {
	const size = 64 << 10
	withIdleBudget(t, 1<<30)
	p := For(t.Name())
	m, err := p.Map(fileWith(t, size, "first open"), size)
	if err != nil {
		t.Fatal(err)
	}
	first := &m[0]
	if err := p.Retire(m); err != nil {
		t.Fatal(err)
	}
	p.Done()
	if got := p.Reserved(); got != size {
		t.Fatalf("an idle pool within the budget holds %d bytes, want its %d", got, size)
	}
	p = For(t.Name())
	defer p.Done()
	m, err = p.Map(fileWith(t, size, "second open"), size)
	if err != nil {
		t.Fatal(err)
	}
	if &m[0] != first || string(m[:11]) != "second open" {
		t.Fatalf("the next open mapped at another range, or reads %q", m[:11])
	}
	if err := p.Retire(m); err != nil {
		t.Fatal(err)
	}
}

// withIdleBudget sets the idle budget for the test.
func withIdleBudget(t *testing.T, n int) {
	old := SetIdleBudget(n)
	t.Cleanup(func() { SetIdleBudget(old) })
}

// TestDonePoolRangesGoToOtherPools: once every user of a pool is done and
// the idle pools hold more than the budget, its
// freed ranges, and those it still had mapped once they are retired, are
// the next pool's to reuse, whose mappings read their own file there: the
// process holds no more than it did.
func TestDonePoolRangesGoToOtherPools(t *testing.T) {
	withIdleBudget(t, 0)
	x := For(t.Name() + "/x")
	freed, err := x.Map(fileWith(t, 8192, "queue x"), 8192)
	if err != nil {
		t.Fatal(err)
	}
	held, err := x.Map(fileWith(t, 8192, "queue x"), 8192)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Retire(freed); err != nil {
		t.Fatal(err)
	}
	spareBefore := Spare()
	x.Done()
	if got := Spare() - spareBefore; got != 8192 {
		t.Fatalf("a done pool gave %d bytes to the spares, want its freed 8192", got)
	}
	if err := x.Retire(held); err != nil {
		t.Fatal(err)
	}
	if got := Spare() - spareBefore; got != 16384 || x.Reserved() != 0 {
		t.Fatalf("after the last retire of a done pool: spares grew by %d, the pool holds %d; want 16384 and 0", got, x.Reserved())
	}
	y := For(t.Name() + "/y")
	defer y.Done()
	var got [][]byte
	for range 2 {
		m, err := y.Map(fileWith(t, 8192, "queue y"), 8192)
		if err != nil {
			t.Fatal(err)
		}
		defer y.Retire(m)
		got = append(got, m)
	}
	for _, m := range got {
		if string(m[:7]) != "queue y" {
			t.Fatalf("a mapping in a reused range reads %q", m[:7])
		}
	}
	if Spare() != spareBefore || y.Reserved() != 16384 {
		t.Fatalf("pool y's 16384 bytes were not taken from the spares: spares %d, were %d before x was done", Spare(), spareBefore)
	}
}

// TestPoolInUseKeepsItsRanges: while one user of a pool is left, its freed
// ranges stay its own (For twice, Done once).
func TestPoolInUseKeepsItsRanges(t *testing.T) {
	withIdleBudget(t, 0)
	x := For(t.Name())
	For(t.Name())
	defer x.Done()
	m, err := x.Map(fileWith(t, 8192, "queue x"), 8192)
	if err != nil {
		t.Fatal(err)
	}
	spareBefore := Spare()
	if err := x.Retire(m); err != nil {
		t.Fatal(err)
	}
	x.Done()
	if Spare() != spareBefore || x.Reserved() != 8192 {
		t.Fatalf("a pool still in use gave its range away: spares %d (were %d), pool %d", Spare(), spareBefore, x.Reserved())
	}
}

// TestSpillCountsWhatThePoolHeld: a pool that gives its ranges to the
// spares takes all it held out of the idle pools' count, the ranges its
// records still hold included, so that no more pools than needed give
// theirs away.
func TestSpillCountsWhatThePoolHeld(t *testing.T) {
	withIdleBudget(t, 1<<30)
	a := For(t.Name() + "/a")
	held, err := a.Map(fileWith(t, 12<<10, "held"), 12<<10)
	if err != nil {
		t.Fatal(err)
	}
	freed, err := a.Map(fileWith(t, 4<<10, "freed"), 4<<10)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Retire(freed); err != nil {
		t.Fatal(err)
	}
	a.Done() // idle: 16 KiB, 12 of them held by a record
	b := For(t.Name() + "/b")
	m, err := b.Map(fileWith(t, 8<<10, "b"), 8<<10)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Retire(m); err != nil {
		t.Fatal(err)
	}
	b.Done() // idle: 8 KiB
	// 24 KiB idle against 12: a, closed first, gives its ranges away,
	// which leaves 8.
	SetIdleBudget(12 << 10)
	if got := b.Reserved(); got != 8<<10 {
		t.Fatalf("the pool closed last holds %d bytes, want its 8 KiB: it gave its ranges away too", got)
	}
	if err := a.Retire(held); err != nil {
		t.Fatal(err)
	}
	if got := a.Reserved(); got != 0 {
		t.Fatalf("the pool that gave its ranges away holds %d bytes after its last retire", got)
	}
}
