// Package hist keeps timed operations as a latency histogram in a small
// text file, so that benchmarks in several processes and modules (the
// engine's, in the library module; the peer harness's) can feed one chart.
//
// The file has one line per value, "ns count", values in increasing order;
// a value of 1 µs or more is rounded down to three significant digits (at
// most 0.1% low), a smaller one is kept as measured. A line "max ns" holds
// the exact slowest operation; lines starting with '#' are comments. The
// engine benchmarks write the same format (bench/latency_test.go).
package hist

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Hist counts operations by their (rounded) latency.
type Hist struct {
	counts map[int64]int64
	n      int64
	max    int64
}

// Round is the value a latency of ns nanoseconds is counted under.
func Round(ns int64) int64 {
	if ns < 1000 {
		return max(ns, 0)
	}
	p := int64(1)
	for ns/p >= 1000 {
		p *= 10
	}
	return ns / p * p
}

// Add counts one operation that took d.
func (h *Hist) Add(d time.Duration) { h.addN(d.Nanoseconds(), 1) }

func (h *Hist) addN(ns, count int64) {
	if h.counts == nil {
		h.counts = make(map[int64]int64)
	}
	h.counts[Round(ns)] += count
	h.n += count
	h.max = max(h.max, ns)
}

// Merge adds o's operations to h.
func (h *Hist) Merge(o *Hist) {
	for v, c := range o.counts {
		h.addN(v, c)
	}
	h.max = max(h.max, o.max)
}

// N is how many operations h holds.
func (h *Hist) N() int64 { return h.n }

// Max is the slowest operation, exactly.
func (h *Hist) Max() time.Duration { return time.Duration(h.max) }

// Bucket is one value of a histogram and how many operations took it.
type Bucket struct {
	Ns    int64
	Count int64
}

// Buckets returns the values in increasing order.
func (h *Hist) Buckets() []Bucket {
	out := make([]Bucket, 0, len(h.counts))
	for v, c := range h.counts {
		out = append(out, Bucket{v, c})
	}
	slices.SortFunc(out, func(a, b Bucket) int { return int(a.Ns - b.Ns) })
	return out
}

// Quantile returns the latency at quantile q (0 to 1) the way the
// benchmarks report it: the sorted operations' element at index
// floor(q*n) (the last one for q = 1), the exact maximum for that one.
func (h *Hist) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	i := min(h.n-1, int64(q*float64(h.n)))
	if i == h.n-1 {
		return time.Duration(h.max)
	}
	var cum int64
	for _, b := range h.Buckets() {
		cum += b.Count
		if cum > i {
			return time.Duration(b.Ns)
		}
	}
	return time.Duration(h.max)
}

// WriteFile writes h to path, with comment as its first line.
func (h *Hist) WriteFile(path, comment string) error {
	var sb strings.Builder
	if comment != "" {
		fmt.Fprintf(&sb, "# %s\n", strings.ReplaceAll(comment, "\n", " "))
	}
	fmt.Fprintf(&sb, "max %d\n", h.max)
	for _, b := range h.Buckets() {
		fmt.Fprintf(&sb, "%d %d\n", b.Ns, b.Count)
	}
	return os.WriteFile(path, []byte(sb.String()), 0o644)
}

// ReadFile reads a histogram file.
func ReadFile(path string) (*Hist, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := &Hist{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		t := strings.TrimSpace(sc.Text())
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		a, b, ok := strings.Cut(t, " ")
		if a == "max" {
			m, err := strconv.ParseInt(b, 10, 64)
			if err != nil || m < 0 {
				return nil, fmt.Errorf("%s:%d: bad max %q", path, line, b)
			}
			h.max = max(h.max, m)
			continue
		}
		v, err1 := strconv.ParseInt(a, 10, 64)
		c, err2 := strconv.ParseInt(b, 10, 64)
		if !ok || err1 != nil || err2 != nil || v < 0 || c <= 0 {
			return nil, fmt.Errorf("%s:%d: want \"ns count\", got %q", path, line, t)
		}
		h.addN(v, c)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if h.n == 0 {
		return nil, fmt.Errorf("%s: no operations", path)
	}
	return h, nil
}
