package fuzz

import (
	"bytes"
	"encoding/binary"
	"math"
	"sort"
	"testing"

	"github.com/pagelog/pagelog/sparseidx"
	"github.com/pagelog/pagelog/warmsearch"
)

// FuzzWarmSearch compares warmsearch.Search with sort.Search on a sorted
// array built from the input (each pair of bytes a step up from the
// previous value, so that runs of equal values occur), for an arbitrary
// target and warm size: same answer, every probe inside [0, n), and on a
// warm hit no probe below n-warm-1. With the predicate taken from the raw
// bits instead (not monotone, against the contract), Search must still
// probe only inside [0, n) and answer within [0, n].
func FuzzWarmSearch(f *testing.F) {
	f.Fuzz(func(t *testing.T, steps []byte, warm int, target uint32, scale uint8) {
		n := len(steps) / 2
		// scale repeats the array's steps so that large n, beyond the warm
		// tail of a real index, are reached with short inputs.
		reps := 1 + int(scale)%64
		a := make([]uint32, 0, n*reps)
		var v uint32
		for range reps {
			for i := range n {
				v += uint32(binary.BigEndian.Uint16(steps[2*i:])) >> 8
				a = append(a, v)
			}
		}
		n = len(a)
		want := sort.Search(n, func(i int) bool { return a[i] >= target })
		low := n
		got, hit := warmsearch.SearchRegion(n, warm, func(i int) bool {
			if i < 0 || i >= n {
				t.Fatalf("n=%d warm=%d: probe %d outside [0, n)", n, warm, i)
			}
			low = min(low, i)
			return a[i] >= target
		})
		if got != want {
			t.Fatalf("n=%d warm=%d target=%d: Search = %d, sort.Search = %d", n, warm, target, got, want)
		}
		if g := warmsearch.Search(n, warm, func(i int) bool { return a[i] >= target }); g != want {
			t.Fatalf("Search = %d, SearchRegion = %d", g, got)
		}
		switch {
		case warm <= 0 && hit && n > 0:
			t.Fatalf("n=%d warm=%d: warm hit with no warm tail", n, warm)
		case warm > 0 && n > 0 && hit != (want >= n-min(warm, n)):
			t.Fatalf("n=%d warm=%d: warmHit %v, answer %d", n, warm, hit, want)
		case warm > 0 && hit && low < n-warm-1:
			t.Fatalf("n=%d warm=%d: warm hit probed %d", n, warm, low)
		}
		// Not monotone: only the bounds hold.
		bit := func(i int) bool { return steps[i%len(steps)]>>(i%8)&1 != 0 }
		if len(steps) > 0 {
			r := warmsearch.Search(n, warm, func(i int) bool {
				if i < 0 || i >= n {
					t.Fatalf("n=%d warm=%d: probe %d outside [0, n) (predicate not monotone)", n, warm, i)
				}
				return bit(i)
			})
			if r < 0 || r > n {
				t.Fatalf("n=%d warm=%d: answer %d outside [0, n] (predicate not monotone)", n, warm, r)
			}
		}
		if warmsearch.WarmEntries(warm) < 0 {
			t.Fatalf("WarmEntries(%d) < 0", warm)
		}
	})
}

// FuzzSparseIndex reads arbitrary bytes as an offset index and as a time
// index: no method panics or reads outside the buffer (the buffer is a
// sub-slice with guard bytes around it that must stay untouched), Valid
// agrees with a naive implementation of its rules, and on the valid
// entries Floor, FloorRel and FirstAtOrAfter agree with a naive scan. On
// the invalid rest (not sorted) they must still answer within range.
func FuzzSparseIndex(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte, n int, target uint32, at int64, segSize int64) {
		guard := bytes.Repeat([]byte{0xa5}, 16)
		whole := append(append(append([]byte{}, guard...), data...), guard...)
		buf := whole[16 : 16+len(data) : 16+len(data)]
		offs := sparseidx.Offsets{Buf: buf}
		tims := sparseidx.Times{Buf: buf}
		if offs.Cap() != len(data)/8 || tims.Cap() != len(data)/12 {
			t.Fatalf("Cap %d, %d for %d bytes", offs.Cap(), tims.Cap(), len(data))
		}
		for _, i := range []int{-1, offs.Cap(), offs.Cap() + 1, math.MaxInt} {
			if rel, pos := offs.Entry(i); rel != 0 || pos != 0 {
				t.Fatalf("Offsets.Entry(%d) outside the buffer = (%d, %d)", i, rel, pos)
			}
			if ms, rel := tims.Entry(i); ms != 0 || rel != 0 {
				t.Fatalf("Times.Entry(%d) outside the buffer = (%d, %d)", i, ms, rel)
			}
		}

		valid := offs.Valid(segSize)
		if want := naiveOffsetsValid(offs, segSize); valid != want {
			t.Fatalf("Offsets.Valid(%d) = %d, naive %d", segSize, valid, want)
		}
		tvalid := tims.Valid()
		if want := naiveTimesValid(tims); tvalid != want {
			t.Fatalf("Times.Valid = %d, naive %d", tvalid, want)
		}
		for _, k := range []int{n, valid, tvalid, -1, 0, math.MaxInt} {
			c := max(0, min(k, offs.Cap()))
			i, rel, pos, ok := offs.Floor(k, target)
			if ok != (i >= 0) || i < -1 || i >= c || ok && (rel != offsRel(offs, i) || pos != offsPos(offs, i)) || !ok && (rel != 0 || pos != 0) {
				t.Fatalf("Offsets.Floor(%d, %d) = %d, %d, %d, %v with %d entries", k, target, i, rel, pos, ok, c)
			}
			if k <= valid && k >= 0 {
				if want := naiveFloor(c, func(j int) uint32 { return offsRel(offs, j) }, target); i != want {
					t.Fatalf("Offsets.Floor(%d, %d) = %d on valid entries, naive %d", k, target, i, want)
				}
			}
			tc := max(0, min(k, tims.Cap()))
			j := tims.FirstAtOrAfter(k, at)
			if j < 0 || j > tc {
				t.Fatalf("Times.FirstAtOrAfter(%d, %d) = %d with %d entries", k, at, j, tc)
			}
			fi, fok := tims.FloorRel(k, target)
			if fok != (fi >= 0) || fi < -1 || fi >= tc {
				t.Fatalf("Times.FloorRel(%d, %d) = %d, %v with %d entries", k, target, fi, fok, tc)
			}
			if k <= tvalid && k >= 0 {
				want := tc
				for e := range tc {
					if ms, _ := tims.Entry(e); ms >= at {
						want = e
						break
					}
				}
				if j != want {
					t.Fatalf("Times.FirstAtOrAfter(%d, %d) = %d on valid entries, naive %d", k, at, j, want)
				}
				if want := naiveFloor(tc, func(e int) uint32 { _, r := tims.Entry(e); return r }, target); fi != want {
					t.Fatalf("Times.FloorRel(%d, %d) = %d on valid entries, naive %d", k, target, fi, want)
				}
			}
		}
		// Put round trip on a copy; the guard bytes must not change.
		for i := -1; i <= offs.Cap(); i++ {
			err := offs.Put(i, target, uint32(at))
			if (err == nil) != (i >= 0 && i < offs.Cap()) {
				t.Fatalf("Offsets.Put(%d) with %d entries: %v", i, offs.Cap(), err)
			}
			if err == nil {
				if rel, pos := offs.Entry(i); rel != target || pos != uint32(at) {
					t.Fatalf("Offsets.Put/Entry(%d) = (%d, %d)", i, rel, pos)
				}
			}
		}
		for i := -1; i <= tims.Cap(); i++ {
			err := tims.Put(i, at, target)
			if (err == nil) != (i >= 0 && i < tims.Cap()) {
				t.Fatalf("Times.Put(%d) with %d entries: %v", i, tims.Cap(), err)
			}
			if err == nil {
				if ms, rel := tims.Entry(i); ms != at || rel != target {
					t.Fatalf("Times.Put/Entry(%d) = (%d, %d)", i, ms, rel)
				}
			}
		}
		if !bytes.Equal(whole[:16], guard) || !bytes.Equal(whole[16+len(data):], guard) {
			t.Fatalf("bytes outside the index buffer changed")
		}
	})
}

func offsRel(x sparseidx.Offsets, i int) uint32 { r, _ := x.Entry(i); return r }
func offsPos(x sparseidx.Offsets, i int) uint32 { _, p := x.Entry(i); return p }

// naiveFloor returns the greatest i < n with rel(i) <= target, or -1.
func naiveFloor(n int, rel func(int) uint32, target uint32) int {
	best := -1
	for i := range n {
		if rel(i) <= target {
			best = i
		}
	}
	return best
}

// naiveOffsetsValid applies the rules of sparseidx's doc entry by entry.
func naiveOffsetsValid(x sparseidx.Offsets, segSize int64) int {
	for i := range len(x.Buf) / 8 {
		rel := binary.BigEndian.Uint32(x.Buf[8*i:])
		pos := binary.BigEndian.Uint32(x.Buf[8*i+4:])
		if rel == 0 || pos == 0 || int64(pos) >= segSize {
			return i
		}
		if i > 0 && (rel <= binary.BigEndian.Uint32(x.Buf[8*i-8:]) || pos <= binary.BigEndian.Uint32(x.Buf[8*i-4:])) {
			return i
		}
	}
	return len(x.Buf) / 8
}

func naiveTimesValid(x sparseidx.Times) int {
	for i := range len(x.Buf) / 12 {
		ms := int64(binary.BigEndian.Uint64(x.Buf[12*i:]))
		rel := binary.BigEndian.Uint32(x.Buf[12*i+8:])
		if rel == 0 {
			return i
		}
		if i > 0 && (ms < int64(binary.BigEndian.Uint64(x.Buf[12*i-12:])) || rel <= binary.BigEndian.Uint32(x.Buf[12*i-4:])) {
			return i
		}
	}
	return len(x.Buf) / 12
}

func warmSearchSeeds(testing.TB) []seed {
	s := func(name string, steps []byte, warm int, target uint32, scale uint8) seed {
		return seed{name, []any{steps, warm, target, scale}}
	}
	ramp := make([]byte, 0, 4096)
	for i := range 2048 {
		ramp = append(ramp, 0, byte(1+i%3))
	}
	return []seed{
		s("empty", nil, 1024, 5, 0),
		s("one", []byte{0, 1}, 1, 0, 0),
		s("equal-values", bytes.Repeat([]byte{0}, 64), 3, 0, 0),
		s("ramp-offsets-warm", ramp, 1024, 3000, 0),
		s("ramp-times-warm", ramp, 682, 100, 0),
		s("ramp-old-target", ramp, 1024, 5, 7),
		s("ramp-above-all", ramp, 1024, 1<<31, 3),
		s("warm-negative", ramp[:100], -5, 30, 0),
		s("warm-huge", ramp[:100], math.MaxInt32, 30, 0), // an int on every platform
		s("warm-n-minus-one", ramp[:20], 9, 12, 0),
	}
}

func sparseIndexSeeds(testing.TB) []seed {
	s := func(name string, data []byte, n int, target uint32, at int64, segSize int64) seed {
		return seed{name, []any{data, n, target, at, segSize}}
	}
	var good []byte // 20 well-formed offset entries
	for i := range 20 {
		good = binary.BigEndian.AppendUint32(good, uint32(1+3*i))
		good = binary.BigEndian.AppendUint32(good, uint32(100+4100*i))
	}
	var times []byte // 20 well-formed time entries with repeated times
	for i := range 20 {
		times = binary.BigEndian.AppendUint64(times, 1_700_000_000_000+uint64(i/3))
		times = binary.BigEndian.AppendUint32(times, uint32(1+3*i))
	}
	return []seed{
		s("empty", nil, 5, 1, 0, 1<<20),
		s("offsets", good, 20, 30, 0, 1<<20),
		s("offsets-past-segment", good, 20, 30, 0, 5000),
		s("offsets-then-zeros", append(bytes.Clone(good), make([]byte, 64)...), 1<<30, 100, 0, 1<<30),
		s("offsets-decreasing", append(bytes.Clone(good[80:]), good[:80]...), 20, 30, 0, 1<<30),
		s("times", times, 20, 30, 1_700_000_000_003, 0),
		s("times-decreasing", append(bytes.Clone(times[120:]), times[:120]...), 20, 3, 1_700_000_000_001, 0),
		s("cut-mid-entry", good[:21], 3, 9, 0, 1<<20),
		s("ones", bytes.Repeat([]byte{0xff}, 100), -1, 0xffffffff, -1, -1),
	}
}
