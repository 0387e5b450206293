package warmsearch

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
)

func TestWarmEntries(t *testing.T) {
	for _, tc := range []struct{ width, want int }{
		{8, 1024}, {12, 682}, {1, 8192}, {8192, 1}, {10000, 0}, {0, 0}, {-4, 0},
	} {
		if got := WarmEntries(tc.width); got != tc.want {
			t.Errorf("WarmEntries(%d) = %d, want %d", tc.width, got, tc.want)
		}
	}
}

// sortedArray returns n random non-decreasing values; with dups many repeat.
func sortedArray(r *rand.Rand, n int, dups bool) []int {
	a := make([]int, n)
	v := 0
	for i := range a {
		if dups {
			v += r.IntN(2)
		} else {
			v += 1 + r.IntN(3)
		}
		a[i] = v
	}
	return a
}

// check compares Search and SearchRegion with sort.Search for f = a[i] >= x,
// and checks every probe is inside [0, n) and, on a warm hit, >= n-warm-1.
func check(t *testing.T, a []int, warm, x int) {
	t.Helper()
	n := len(a)
	want := sort.Search(n, func(i int) bool { return a[i] >= x })
	minProbe := n
	f := func(i int) bool {
		if i < 0 || i >= n {
			t.Fatalf("n=%d warm=%d x=%d: probe %d out of range", n, warm, x, i)
		}
		minProbe = min(minProbe, i)
		return a[i] >= x
	}
	got, hit := SearchRegion(n, warm, f)
	if got != want {
		t.Fatalf("n=%d warm=%d x=%d: SearchRegion = %d, sort.Search = %d (a=%v)", n, warm, x, got, want, a)
	}
	if g := Search(n, warm, func(i int) bool { return a[i] >= x }); g != want {
		t.Fatalf("n=%d warm=%d x=%d: Search = %d, sort.Search = %d", n, warm, x, g, want)
	}
	if warm <= 0 {
		if hit {
			t.Fatalf("n=%d warm=%d: warmHit with no warm tail", n, warm)
		}
		return
	}
	// The answer is in the tail exactly when it is >= n-warm.
	if inTail := want >= n-warm; hit != inTail {
		t.Fatalf("n=%d warm=%d x=%d: warmHit = %v, answer %d in tail = %v", n, warm, x, hit, want, inTail)
	}
	if hit && minProbe < n-warm-1 {
		t.Fatalf("n=%d warm=%d x=%d: warm hit probed index %d < n-warm-1 = %d", n, warm, x, minProbe, n-warm-1)
	}
}

func TestSearchMatchesSortSearch(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	sizes := []int{0, 1, 2, 3, 7, 8, 9, 100, 1023, 1024, 1025, 2048, 5000}
	for range 200 {
		sizes = append(sizes, r.IntN(3000))
	}
	for _, n := range sizes {
		for _, dups := range []bool{false, true} {
			a := sortedArray(r, n, dups)
			warms := []int{-1, 0, 1, 2, n - 1, n, n + 1, 2 * n, 1024, 682, r.IntN(n + 2)}
			for _, warm := range warms {
				targets := []int{-1, 0, 1 << 30} // below all, above all
				if n > 0 {
					targets = append(targets, a[0], a[n-1], a[n-1]+1, a[n/2], a[min(n-1, max(0, n-warm))])
				}
				for range 20 {
					targets = append(targets, r.IntN(4*n+10)-2)
				}
				for _, x := range targets {
					check(t, a, warm, x)
				}
			}
		}
	}
}

// TestSearchExhaustiveSmall checks every n, warm and answer position for
// small n: f is determined by where the first true is.
func TestSearchExhaustiveSmall(t *testing.T) {
	for n := 0; n <= 40; n++ {
		for warm := -1; warm <= n+2; warm++ {
			for ans := 0; ans <= n; ans++ {
				a := make([]int, n)
				for i := range a {
					if i >= ans {
						a[i] = 1
					}
				}
				check(t, a, warm, 1)
			}
		}
	}
}

func TestSearchNegativeN(t *testing.T) {
	for _, warm := range []int{-1, 0, 5} {
		if got := Search(-3, warm, func(int) bool { panic("probed") }); got != 0 {
			t.Errorf("Search(-3, %d) = %d, want 0 like sort.Search", warm, got)
		}
	}
}

// TestRecentProbesWarmOnly counts probes: a recent target in a large index
// probes only the boundary index and about log2(warm) tail indexes.
func TestRecentProbesWarmOnly(t *testing.T) {
	const n, warm = 1 << 20, 1024
	for _, ans := range []int{n - warm, n - warm + 1, n - 500, n - 1, n} {
		probes, low := 0, n
		got, hit := SearchRegion(n, warm, func(i int) bool {
			probes++
			low = min(low, i)
			return i >= ans
		})
		if got != ans || !hit {
			t.Fatalf("ans %d: got %d, warmHit %v", ans, got, hit)
		}
		if low < n-warm-1 {
			t.Errorf("ans %d: probed %d, below n-warm-1 = %d", ans, low, n-warm-1)
		}
		if probes > 1+11 { // boundary + ceil(log2(1024+1))
			t.Errorf("ans %d: %d probes", ans, probes)
		}
	}
	// An old target searches the cold part and still matches.
	got, hit := SearchRegion(n, warm, func(i int) bool { return i >= 10 })
	if got != 10 || hit {
		t.Fatalf("old target: got %d, warmHit %v", got, hit)
	}
}

func TestSearchAllocs(t *testing.T) {
	a := sortedArray(rand.New(rand.NewPCG(1, 2)), 4096, false)
	x := a[4000]
	f := func(i int) bool { return a[i] >= x }
	if allocs := testing.AllocsPerRun(100, func() { Search(len(a), 1024, f) }); allocs != 0 {
		t.Fatalf("Search allocates %v times per run", allocs)
	}
}

func ExampleSearch() {
	offsets := []uint32{10, 20, 30, 40, 50, 60, 70, 80}
	// The first entry >= 65, looking in the newest 3 entries first.
	i, warm := SearchRegion(len(offsets), 3, func(i int) bool { return offsets[i] >= 65 })
	fmt.Println(i, offsets[i], warm)
	i, warm = SearchRegion(len(offsets), 3, func(i int) bool { return offsets[i] >= 15 })
	fmt.Println(i, offsets[i], warm)
	// Output:
	// 6 70 true
	// 1 20 false
}

func BenchmarkSearch(b *testing.B) {
	for _, n := range []int{1024, 16384, 1 << 20} {
		a := make([]uint32, n)
		for i := range a {
			a[i] = uint32(i*3 + 1)
		}
		for _, target := range []string{"recent", "old"} {
			b.Run(fmt.Sprintf("entries=%d/target=%s", n, target), func(b *testing.B) {
				r := rand.New(rand.NewPCG(1, 2))
				xs := make([]uint32, 1024)
				for i := range xs {
					j := r.IntN(n / 2) // old: first half
					if target == "recent" {
						j = n - 1 - r.IntN(min(n, WarmEntries(8)))
					}
					xs[i] = a[j]
				}
				var x uint32
				f := func(i int) bool { return a[i] >= x }
				b.ReportAllocs()
				b.ResetTimer()
				k := 0
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					x = xs[i%len(xs)]
					k += Search(n, WarmEntries(8), f)
				}
				sink = k
			})
		}
	}
}

var sink int
