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
	if err := p.Retire(m, len(m)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stale, make([]byte, 4)) {
		t.Fatalf("retired range reads %q, want zeros", stale)
	}
	buf := make([]byte, 4)
	if _, err := f.ReadAt(buf, 0); err != nil || string(buf) != "data" {
		t.Fatalf("file after retire: %q %v", buf, err)
	}
	if err := p.Retire(m, len(m)); err == nil {
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
	if err := p.Retire(a, len(a)); err != nil {
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
	if err := p.Retire(b, len(b)); err != nil {
		t.Fatal(err)
	}
	if err := p.Retire(c, len(c)); err != nil {
		t.Fatal(err)
	}
	d, err := p.Map(fileWith(t, 64<<10, "whole"), 64<<10) // the pieces coalesced
	if err != nil {
		t.Fatal(err)
	}
	if &d[0] != &a[0] || p.Reserved() != 64<<10 {
		t.Fatalf("freed pieces did not coalesce: %p vs %p, reserved %d", &d[0], &a[0], p.Reserved())
	}
	_ = p.Retire(d, len(d))
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
	if err := x.Retire(m, len(m)); err != nil {
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
		defer y.Retire(n, len(n))
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
			if err := p.Retire(m, len(m)); err != nil {
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

// TestDonePoolGivesBackWhatNoRecordTook: once its last user is done, a
// pool over the idle budget gives back the pages past what each retired mapping held, at once
// for a mapping retired after that, and keeps the written pages as zeros
// for the slices that may still point there.
func TestDonePoolGivesBackWhatNoRecordTook(t *testing.T) {
	withIdleBudget(t, 0)
	const size, written = 64 << 10, 5000
	p := For(t.Name())
	For(t.Name()) // a second user
	m, err := p.Map(fileWith(t, size, "body"), size)
	if err != nil {
		t.Fatal(err)
	}
	held, err := p.Map(fileWith(t, size, "held"), size)
	if err != nil {
		t.Fatal(err)
	}
	stale, staleHeld := m[:4], held[:4]
	if err := p.Retire(m, written); err != nil {
		t.Fatal(err)
	}
	p.Done()
	if got := p.Reserved(); got != 2*size {
		t.Fatalf("a pool still in use holds %d bytes, want its %d", got, 2*size)
	}
	p.Done()
	if got, want := p.Reserved(), size+roundUp(written); got != want {
		t.Fatalf("a pool with no user holds %d bytes, want %d (the held mapping and the written pages of the retired one)", got, want)
	}
	if err := p.Retire(held, written); err != nil {
		t.Fatal(err)
	}
	if got, want := p.Reserved(), 2*roundUp(written); got != want {
		t.Fatalf("after a retire with no user the pool holds %d bytes, want %d", got, want)
	}
	if !bytes.Equal(stale, make([]byte, 4)) || !bytes.Equal(staleHeld, make([]byte, 4)) {
		t.Fatalf("stale slices read %q and %q, want zeros", stale, staleHeld)
	}
}

// TestRangeTakenAgainIsNotBlank: a freed range a later mapping takes, and
// writes to its end, is no longer given back when the pool is done.
func TestRangeTakenAgainIsNotBlank(t *testing.T) {
	withIdleBudget(t, 0)
	const size = 64 << 10
	p := For(t.Name())
	a, err := p.Map(fileWith(t, size, "a"), size)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Retire(a, 4096); err != nil {
		t.Fatal(err)
	}
	b, err := p.Map(fileWith(t, size, "b"), size)
	if err != nil {
		t.Fatal(err)
	}
	if &a[0] != &b[0] {
		t.Fatal("the freed range was not reused")
	}
	if err := p.Retire(b, size); err != nil {
		t.Fatal(err)
	}
	p.Done()
	if got := p.Reserved(); got != size {
		t.Fatalf("the pool holds %d bytes, want %d: the second mapping wrote its whole range", got, size)
	}
	if !bytes.Equal(b[size-4:], make([]byte, 4)) {
		t.Fatal("the end of the range does not read zeros")
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
	if err := p.Retire(m, 100); err != nil {
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
	if err := p.Retire(m, size); err != nil {
		t.Fatal(err)
	}
}

// withIdleBudget sets the idle budget for the test.
func withIdleBudget(t *testing.T, n int) {
	old := SetIdleBudget(n)
	t.Cleanup(func() { SetIdleBudget(old) })
}
