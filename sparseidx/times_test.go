package sparseidx

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/pagelog/pagelog/warmsearch"
)

// buildTimes returns a time index of n entries with non-decreasing ms (many
// equal, as appends within one millisecond are) and increasing rel, in a
// buffer with room for extra zero entries.
func buildTimes(r *rand.Rand, n, extra int) Times {
	x := Times{Buf: make([]byte, (n+extra)*TimeEntrySize)}
	ms, rel := int64(1_700_000_000_000), uint32(0)
	for i := range n {
		ms += int64(r.IntN(3))
		rel += 1 + uint32(r.IntN(5))
		if err := x.Put(i, ms, rel); err != nil {
			panic(err)
		}
	}
	return x
}

func TestTimesPutEntry(t *testing.T) {
	x := Times{Buf: make([]byte, 2*TimeEntrySize+11)}
	if x.Cap() != 2 {
		t.Fatalf("Cap = %d, want 2", x.Cap())
	}
	if err := x.Put(0, -2, 7); err != nil {
		t.Fatal(err)
	}
	if err := x.Put(1, 0x0102030405060708, 0x0a0b0c0d); err != nil {
		t.Fatal(err)
	}
	if ms, rel := x.Entry(0); ms != -2 || rel != 7 {
		t.Errorf("entry 0 = (%d, %d)", ms, rel)
	}
	if ms, rel := x.Entry(1); ms != 0x0102030405060708 || rel != 0x0a0b0c0d {
		t.Errorf("entry 1 = (%#x, %#x)", ms, rel)
	}
	if got := x.Buf[12:24]; string(got) != "\x01\x02\x03\x04\x05\x06\x07\x08\x0a\x0b\x0c\x0d" {
		t.Errorf("entry 1 bytes % x", got)
	}
	for _, i := range []int{-1, 2, 3} {
		if err := x.Put(i, 1, 1); !errors.Is(err, io.ErrShortBuffer) {
			t.Errorf("Put(%d) = %v, want io.ErrShortBuffer", i, err)
		}
		if ms, rel := x.Entry(i); ms != 0 || rel != 0 {
			t.Errorf("Entry(%d) = (%d, %d), want zero", i, ms, rel)
		}
	}
	for _, b := range x.Buf[24:] {
		if b != 0 {
			t.Fatal("Put wrote into the trailing partial entry")
		}
	}
}

func TestTimesLookups(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	warm := warmsearch.WarmEntries(TimeEntrySize)
	sizes := []int{0, 1, 2, warm - 1, warm, warm + 1, warm + 2, 5000}
	for range 30 {
		sizes = append(sizes, r.IntN(3000))
	}
	for _, n := range sizes {
		x := buildTimes(r, n, r.IntN(20))
		msAt := func(k int) int64 { ms, _ := x.Entry(k); return ms }
		relAt := func(k int) uint32 { _, rel := x.Entry(k); return rel }
		ts := []int64{-1 << 63, 0, 1<<63 - 1}
		rels := []uint32{0, ^uint32(0)}
		for _, k := range []int{0, n / 2, n - warm - 1, n - warm, n - 1} {
			if k >= 0 && k < n {
				ts = append(ts, msAt(k)-1, msAt(k), msAt(k)+1)
				rels = append(rels, relAt(k)-1, relAt(k), relAt(k)+1)
			}
		}
		for range 20 {
			ts = append(ts, 1_700_000_000_000+int64(r.IntN(3*n+10))-3)
			rels = append(rels, uint32(r.IntN(6*n+10)))
		}
		for _, tm := range ts {
			want := sort.Search(n, func(k int) bool { return msAt(k) >= tm })
			if got := x.FirstAtOrAfter(n, tm); got != want {
				t.Fatalf("n=%d t=%d: FirstAtOrAfter = %d, want %d", n, tm, got, want)
			}
		}
		for _, target := range rels {
			want := -1
			for k := range n {
				if relAt(k) <= target {
					want = k
				}
			}
			if got, ok := x.FloorRel(n, target); got != want || ok != (want >= 0) {
				t.Fatalf("n=%d rel=%d: FloorRel = %d, %v; want %d", n, target, got, ok, want)
			}
		}
	}
}

func TestTimesClampN(t *testing.T) {
	x := buildTimes(rand.New(rand.NewPCG(1, 2)), 10, 0)
	x.Buf = append(x.Buf, 9, 9, 9, 9, 9) // partial entry
	if got := x.FirstAtOrAfter(1000, 1<<62); got != 10 {
		t.Fatalf("FirstAtOrAfter(n > Cap) = %d, want Cap = 10", got)
	}
	if got := x.FirstAtOrAfter(-4, 0); got != 0 {
		t.Fatalf("FirstAtOrAfter(n < 0) = %d, want 0", got)
	}
	if i, ok := x.FloorRel(1000, ^uint32(0)); !ok || i != 9 {
		t.Fatalf("FloorRel(n > Cap) = %d, %v", i, ok)
	}
	if i, ok := (Times{}).FloorRel(5, 5); ok || i != -1 {
		t.Fatalf("FloorRel on nil buffer = %d, %v", i, ok)
	}
}

func TestTimesValid(t *testing.T) {
	const n = 20
	put := func(x Times, i int, ms int64, rel uint32) {
		if err := x.Put(i, ms, rel); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		corrupt func(x *Times)
		want    int
	}{
		{"intact, zero tail", func(*Times) {}, n},
		{"no zero tail", func(x *Times) { x.Buf = x.Buf[:n*TimeEntrySize] }, n},
		{"short buffer not multiple of 12", func(x *Times) { x.Buf = x.Buf[:6*TimeEntrySize+8] }, 6},
		{"buffer shorter than one entry", func(x *Times) { x.Buf = x.Buf[:11] }, 0},
		{"nil buffer", func(x *Times) { x.Buf = nil }, 0},
		{"zero entry in the middle", func(x *Times) { put(*x, 5, 0, 0) }, 5},
		{"rel 0 with a time", func(x *Times) { ms, _ := x.Entry(0); put(*x, 0, ms, 0) }, 0},
		{"ms decreasing", func(x *Times) { ms, rel := x.Entry(8); put(*x, 8, ms-1000, rel) }, 8},
		{"ms equal is fine", func(x *Times) { ms, _ := x.Entry(8); _, rel := x.Entry(9); put(*x, 9, ms, rel) }, n},
		{"rel decreasing", func(x *Times) { ms, _ := x.Entry(12); put(*x, 12, ms, 1) }, 12},
		{"rel repeated", func(x *Times) { _, rel := x.Entry(2); ms, _ := x.Entry(3); put(*x, 3, ms, rel) }, 3},
		{"flipped high bit of ms", func(x *Times) { x.Buf[4*TimeEntrySize] |= 0x80 }, 4}, // ms becomes negative
		{"garbage after zero tail", func(x *Times) { put(*x, n+1, 1<<62, 1<<31) }, n},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x := buildTimes(rand.New(rand.NewPCG(9, 9)), n, 4)
			// Strictly increasing ms, so an equal ms is a real change.
			for i := range n {
				_, rel := x.Entry(i)
				put(x, i, 1_700_000_000_000+int64(i)*10, rel)
			}
			tc.corrupt(&x)
			if got := x.Valid(); got != tc.want {
				t.Fatalf("Valid = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestFirstAtOrAfterAllocs(t *testing.T) {
	x := buildTimes(rand.New(rand.NewPCG(1, 1)), 16384, 0)
	ms, _ := x.Entry(16000)
	if a := testing.AllocsPerRun(100, func() { x.FirstAtOrAfter(16384, ms) }); a != 0 {
		t.Fatalf("FirstAtOrAfter: %v allocs per run", a)
	}
	if a := testing.AllocsPerRun(100, func() { x.FloorRel(16384, 40) }); a != 0 {
		t.Fatalf("FloorRel: %v allocs per run", a)
	}
}

func ExampleTimes_FirstAtOrAfter() {
	x := Times{Buf: make([]byte, 8*TimeEntrySize)}
	x.Put(0, 1000, 3)
	x.Put(1, 1000, 8)
	x.Put(2, 2500, 14)
	n := x.Valid() // 3: entry 3 is zero, the end of the entries
	fmt.Println(n, x.FirstAtOrAfter(n, 1000), x.FirstAtOrAfter(n, 1001), x.FirstAtOrAfter(n, 9999))
	// Output: 3 0 2 3
}

func BenchmarkFirstAtOrAfter(b *testing.B) {
	const n = 16384
	x := buildTimes(rand.New(rand.NewPCG(1, 2)), n, 0)
	for _, target := range []string{"recent", "old"} {
		b.Run(fmt.Sprintf("entries=%d/target=%s", n, target), func(b *testing.B) {
			r := rand.New(rand.NewPCG(3, 4))
			ts := make([]int64, 1024)
			for i := range ts {
				k := r.IntN(n / 2)
				if target == "recent" {
					k = n - 1 - r.IntN(warmsearch.WarmEntries(TimeEntrySize))
				}
				ts[i], _ = x.Entry(k)
			}
			b.ReportAllocs()
			sum := 0
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				sum += x.FirstAtOrAfter(n, ts[i%len(ts)])
			}
			sink = sum
		})
	}
}
