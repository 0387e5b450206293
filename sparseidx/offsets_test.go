package sparseidx

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/pagelog/pagelog/warmsearch"
)

// buildOffsets returns an index of n random increasing entries in a buffer
// with room for extra zero entries, and the segment size they fit in.
func buildOffsets(r *rand.Rand, n, extra int) (Offsets, int64) {
	x := Offsets{Buf: make([]byte, (n+extra)*OffsetEntrySize)}
	rel, pos := uint32(0), uint32(0)
	for i := range n {
		rel += 1 + uint32(r.IntN(5))
		pos += 4097 + uint32(r.IntN(3000))
		if err := x.Put(i, rel, pos); err != nil {
			panic(err)
		}
	}
	return x, int64(pos) + 100
}

// naiveFloor is a linear scan for the greatest entry with rel <= target.
func naiveFloor(x Offsets, n int, target uint32) (int, bool) {
	i := -1
	for k := 0; k < n; k++ {
		if rel, _ := x.Entry(k); rel <= target {
			i = k
		}
	}
	return i, i >= 0
}

func TestOffsetsPutEntry(t *testing.T) {
	x := Offsets{Buf: make([]byte, 3*OffsetEntrySize+5)}
	if x.Cap() != 3 {
		t.Fatalf("Cap = %d, want 3", x.Cap())
	}
	vals := [][2]uint32{{1, 2}, {0xdeadbeef, 0x01020304}, {^uint32(0), ^uint32(0)}}
	for i, v := range vals {
		if err := x.Put(i, v[0], v[1]); err != nil {
			t.Fatal(err)
		}
	}
	for i, v := range vals {
		if rel, pos := x.Entry(i); rel != v[0] || pos != v[1] {
			t.Errorf("entry %d = (%d, %d), want %v", i, rel, pos, v)
		}
	}
	// Big-endian, rel first.
	if got := x.Buf[8:16]; string(got) != "\xde\xad\xbe\xef\x01\x02\x03\x04" {
		t.Errorf("entry 1 bytes % x", got)
	}
	for _, i := range []int{-1, 3, math.MaxInt} {
		if err := x.Put(i, 9, 9); !errors.Is(err, io.ErrShortBuffer) {
			t.Errorf("Put(%d) = %v, want io.ErrShortBuffer", i, err)
		}
		if rel, pos := x.Entry(i); rel != 0 || pos != 0 {
			t.Errorf("Entry(%d) = (%d, %d), want zero", i, rel, pos)
		}
	}
	for _, b := range x.Buf[24:] {
		if b != 0 {
			t.Fatal("Put wrote into the trailing partial entry")
		}
	}
}

func TestOffsetsFloor(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	warm := warmsearch.WarmEntries(OffsetEntrySize)
	sizes := []int{0, 1, 2, warm - 1, warm, warm + 1, warm + 2, 5000}
	for range 30 {
		sizes = append(sizes, r.IntN(4000))
	}
	for _, n := range sizes {
		x, _ := buildOffsets(r, n, r.IntN(50))
		targets := []uint32{0, ^uint32(0)}
		for _, k := range []int{0, n / 2, n - warm - 1, n - warm, n - 1} {
			if k >= 0 && k < n {
				rel, _ := x.Entry(k)
				targets = append(targets, rel-1, rel, rel+1)
			}
		}
		for range 30 {
			targets = append(targets, uint32(r.IntN(6*n+10)))
		}
		for _, target := range targets {
			i, rel, pos, ok := x.Floor(n, target)
			wi, wok := naiveFloor(x, n, target)
			if i != wi || ok != wok {
				t.Fatalf("n=%d target=%d: Floor = (%d, %v), want (%d, %v)", n, target, i, ok, wi, wok)
			}
			if ok {
				if er, ep := x.Entry(i); er != rel || ep != pos {
					t.Fatalf("n=%d target=%d: Floor rel,pos = %d,%d, entry %d,%d", n, target, rel, pos, er, ep)
				}
			} else if i != -1 || rel != 0 || pos != 0 {
				t.Fatalf("n=%d target=%d: not found but (%d, %d, %d)", n, target, i, rel, pos)
			}
		}
	}
}

func TestOffsetsFloorClampsN(t *testing.T) {
	x, _ := buildOffsets(rand.New(rand.NewPCG(3, 4)), 10, 0)
	x.Buf = append(x.Buf, 1, 2, 3) // partial entry
	i, _, _, ok := x.Floor(1000, ^uint32(0))
	if !ok || i != 9 {
		t.Fatalf("Floor(n > Cap) = %d, %v; want 9, true", i, ok)
	}
	if i, _, _, ok := x.Floor(-5, ^uint32(0)); ok || i != -1 {
		t.Fatalf("Floor(n < 0) = %d, %v", i, ok)
	}
	if _, _, _, ok := (Offsets{}).Floor(3, 7); ok {
		t.Fatal("Floor on nil buffer found an entry")
	}
}

// TestFloorArbitraryBytes runs lookups over random (unsorted) bytes: any
// answer is fine, but no panic and no read past Buf.
func TestFloorArbitraryBytes(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 500 {
		buf := make([]byte, r.IntN(300))
		for i := range buf {
			buf[i] = byte(r.Uint32())
		}
		n := r.IntN(60) - 5
		o := Offsets{Buf: buf}
		if i, _, _, ok := o.Floor(n, r.Uint32()); ok && (i < 0 || i >= o.Cap()) {
			t.Fatalf("Floor index %d outside [0, %d)", i, o.Cap())
		}
		o.Valid(r.Int64N(1 << 33))
		tm := Times{Buf: buf}
		if i := tm.FirstAtOrAfter(n, r.Int64()); i < 0 || i > tm.Cap() {
			t.Fatalf("FirstAtOrAfter index %d outside [0, %d]", i, tm.Cap())
		}
		tm.FloorRel(n, r.Uint32())
		tm.Valid()
	}
}

func TestOffsetsValid(t *testing.T) {
	const n = 20
	fresh := func() (Offsets, int64) {
		return buildOffsets(rand.New(rand.NewPCG(7, 8)), n, 5)
	}
	put := func(x Offsets, i int, rel, pos uint32) {
		if err := x.Put(i, rel, pos); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		corrupt func(x *Offsets, size *int64)
		want    int
	}{
		{"intact, zero tail", func(*Offsets, *int64) {}, n},
		{"no zero tail", func(x *Offsets, _ *int64) { x.Buf = x.Buf[:n*OffsetEntrySize] }, n},
		{"short buffer not multiple of 8", func(x *Offsets, _ *int64) { x.Buf = x.Buf[:12*OffsetEntrySize+5] }, 12},
		{"buffer shorter than one entry", func(x *Offsets, _ *int64) { x.Buf = x.Buf[:7] }, 0},
		{"nil buffer", func(x *Offsets, _ *int64) { x.Buf = nil }, 0},
		{"zero entry in the middle", func(x *Offsets, _ *int64) { put(*x, 7, 0, 0) }, 7},
		{"rel 0 first", func(x *Offsets, _ *int64) { _, p := x.Entry(0); put(*x, 0, 0, p) }, 0},
		{"pos 0 first", func(x *Offsets, _ *int64) { r, _ := x.Entry(0); put(*x, 0, r, 0) }, 0},
		{"rel decreasing", func(x *Offsets, _ *int64) { _, p := x.Entry(9); put(*x, 9, 1, p) }, 9},
		{"rel repeated", func(x *Offsets, _ *int64) { r, _ := x.Entry(8); _, p := x.Entry(9); put(*x, 9, r, p) }, 9},
		{"pos decreasing", func(x *Offsets, _ *int64) { r, _ := x.Entry(4); put(*x, 4, r, 5) }, 4},
		{"pos repeated", func(x *Offsets, _ *int64) { _, p := x.Entry(3); r, _ := x.Entry(4); put(*x, 4, r, p) }, 4},
		{"pos past segment", func(x *Offsets, size *int64) { _, p := x.Entry(15); *size = int64(p) + 1 }, 16},
		{"pos equals segment size", func(x *Offsets, size *int64) { _, p := x.Entry(15); *size = int64(p) }, 15},
		{"empty segment", func(_ *Offsets, size *int64) { *size = 0 }, 0},
		{"garbage after zero tail", func(x *Offsets, _ *int64) { put(*x, n+2, 1<<31, 1<<31) }, n},
		{"flipped high bit of pos", func(x *Offsets, _ *int64) { x.Buf[11*OffsetEntrySize+4] |= 0x80 }, 11},
		{"flipped high bit of rel", func(x *Offsets, _ *int64) { x.Buf[11*OffsetEntrySize] |= 0x80 }, 12},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x, size := fresh()
			tc.corrupt(&x, &size)
			if got := x.Valid(size); got != tc.want {
				t.Fatalf("Valid = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestFloorAllocs(t *testing.T) {
	x, _ := buildOffsets(rand.New(rand.NewPCG(1, 1)), 16384, 0)
	rel, _ := x.Entry(16000)
	if a := testing.AllocsPerRun(100, func() { x.Floor(16384, rel) }); a != 0 {
		t.Fatalf("Floor: %v allocs per run", a)
	}
	if a := testing.AllocsPerRun(100, func() { x.Floor(16384, 3) }); a != 0 {
		t.Fatalf("Floor old: %v allocs per run", a)
	}
}

func ExampleOffsets_Floor() {
	x := Offsets{Buf: make([]byte, 4*OffsetEntrySize)} // room for 4 entries
	x.Put(0, 5, 4200)
	x.Put(1, 9, 8400)
	n := 2 // published after the entries were written
	for _, target := range []uint32{3, 5, 7, 100} {
		i, rel, pos, ok := x.Floor(n, target)
		fmt.Println(target, i, rel, pos, ok)
	}
	fmt.Println(x.Valid(10000))
	// Output:
	// 3 -1 0 0 false
	// 5 0 5 4200 true
	// 7 0 5 4200 true
	// 100 1 9 8400 true
	// 2
}

func BenchmarkFloor(b *testing.B) {
	const n = 16384
	x, _ := buildOffsets(rand.New(rand.NewPCG(1, 2)), n, 0)
	for _, target := range []string{"recent", "old"} {
		b.Run(fmt.Sprintf("entries=%d/target=%s", n, target), func(b *testing.B) {
			r := rand.New(rand.NewPCG(3, 4))
			ts := make([]uint32, 1024)
			for i := range ts {
				k := r.IntN(n / 2)
				if target == "recent" {
					k = n - 1 - r.IntN(warmsearch.WarmEntries(OffsetEntrySize))
				}
				rel, _ := x.Entry(k)
				ts[i] = rel + uint32(r.IntN(2))
			}
			b.ReportAllocs()
			sum := 0
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				j, _, _, _ := x.Floor(n, ts[i%len(ts)])
				sum += j
			}
			sink = sum
		})
	}
}

var sink int
