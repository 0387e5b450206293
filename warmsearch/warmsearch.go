package warmsearch

// WarmBytes is how many bytes at the end of an index file are assumed warm
// (in the page cache): two 4 KiB pages.
const WarmBytes = 8192

// WarmEntries returns how many fixed-width entries of width bytes fit in
// WarmBytes: 1024 for width 8, 682 for width 12. It returns 0 (no warm tail,
// a plain search) when width <= 0.
func WarmEntries(width int) int {
	if width <= 0 {
		return 0
	}
	return WarmBytes / width
}

// Search returns the smallest index i in [0, n) at which f(i) is true, like
// sort.Search: f must be false for a prefix of [0, n) and true for the rest,
// and Search returns n when f is false everywhere (0 when n <= 0).
//
// The last warm indexes, [n-warm, n), are the warm tail. With lo =
// max(0, n-warm): if lo == 0 or f(lo-1) is false, the answer lies in
// [lo, n] and only the tail is binary-searched; otherwise the answer lies in
// [0, lo-1] and only that part is searched. A warm <= 0 means no warm tail:
// a plain binary search of [0, n).
//
// Search calls f only with indexes in [0, n). When the answer lies in the
// tail it calls f only with indexes >= n-warm-1.
func Search(n, warm int, f func(int) bool) int {
	i, _ := SearchRegion(n, warm, f)
	return i
}

// SearchRegion is Search that also reports which region was searched:
// warmHit is true when warm > 0 and f was called only with indexes in the
// warm tail and the one boundary index before it (>= n-warm-1); it is false
// when the cold part [0, n-warm-1) was searched or warm <= 0 made it a
// plain search. It exists so that tests and benchmarks can check the warm
// path without counters.
func SearchRegion(n, warm int, f func(int) bool) (i int, warmHit bool) {
	if n <= 0 {
		return 0, warm > 0
	}
	if warm <= 0 {
		return search(0, n, f), false
	}
	if warm >= n {
		return search(0, n, f), true
	}
	lo := n - warm // 0 < lo < n
	if !f(lo - 1) {
		return search(lo, n, f), true
	}
	// f(lo-1) is true: the answer is at most lo-1.
	return search(0, lo-1, f), false
}

// search returns the smallest i in [lo, hi) with f(i) true, or hi when there
// is none, assuming f(lo-1) is false and f(hi) is true (as in sort.Search).
func search(lo, hi int, f func(int) bool) int {
	for lo < hi {
		h := int(uint(lo+hi) >> 1) // avoid overflow
		if !f(h) {
			lo = h + 1
		} else {
			hi = h
		}
	}
	return lo
}
