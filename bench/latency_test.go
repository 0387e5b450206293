package bench

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// latencyDirEnv names a directory into which the tail benchmarks also
// write every timed operation as a latency histogram, for the latency
// chart of `make bench` (bench/peers/cmd/latchart): one file per
// benchmark, <name>.hist (AppendTail-path-pagelog.hist, ...), to which
// each run of the benchmark adds its operations (-count=N pools N runs).
//
// The format is that of bench/peers/internal/hist, which reads it: one
// line "ns count" per value in increasing order, values of 1 µs or more
// rounded down to three significant digits, and a line "max ns" with the
// exact slowest operation.
const latencyDirEnv = "PAGELOG_BENCH_LATENCY_DIR"

// saveLatencies adds lat to the histogram file of b when latencyDirEnv is
// set.
func saveLatencies(b *testing.B, lat latencies) {
	dir := os.Getenv(latencyDirEnv)
	if dir == "" || len(lat) == 0 {
		return
	}
	name := strings.NewReplacer("/", "-", "=", "-").Replace(strings.TrimPrefix(b.Name(), "Benchmark"))
	if err := addToHist(filepath.Join(dir, name+".hist"), b.Name(), lat); err != nil {
		b.Fatal(err)
	}
}

// addToHist adds lat to the histogram file at path (made when there is
// none), whose comment names the benchmark.
func addToHist(path, benchmark string, lat latencies) error {
	counts, maxNs, err := readHist(path)
	if err != nil {
		return err
	}
	for _, d := range lat {
		counts[roundLatency(d.Nanoseconds())]++
		maxNs = max(maxNs, d.Nanoseconds())
	}
	values := make([]int64, 0, len(counts))
	for v := range counts {
		values = append(values, v)
	}
	slices.Sort(values)
	var sb strings.Builder
	fmt.Fprintf(&sb, "# %s: every timed operation (go test -bench)\nmax %d\n", benchmark, maxNs)
	for _, v := range values {
		fmt.Fprintf(&sb, "%d %d\n", v, counts[v])
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(sb.String()), 0o644)
}

// roundLatency keeps three significant digits of a value of 1 µs or more.
func roundLatency(ns int64) int64 {
	p := int64(1)
	for ns/p >= 1000 {
		p *= 10
	}
	return max(ns/p*p, 0)
}

// readHist reads the histogram file at path (an empty one when there is
// none yet).
func readHist(path string) (map[int64]int64, int64, error) {
	counts := map[int64]int64{}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return counts, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	var maxNs int64
	for i, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		a, c, _ := strings.Cut(line, " ")
		n, err := strconv.ParseInt(c, 10, 64)
		if err != nil {
			return nil, 0, fmt.Errorf("%s:%d: %q: %w", path, i+1, line, err)
		}
		if a == "max" {
			maxNs = n
			continue
		}
		v, err := strconv.ParseInt(a, 10, 64)
		if err != nil {
			return nil, 0, fmt.Errorf("%s:%d: %q: %w", path, i+1, line, err)
		}
		counts[v] += n
	}
	return counts, maxNs, nil
}

// TestLatencyHist: operations added in two runs are pooled, values of
// 1 µs and more keep three significant digits, the maximum stays exact,
// and a damaged file is an error.
func TestLatencyHist(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.hist")
	if err := addToHist(path, "BenchmarkX", latencies{150, 999, 12345, 12399}); err != nil {
		t.Fatal(err)
	}
	if err := addToHist(path, "BenchmarkX", latencies{150, 9_999_999}); err != nil {
		t.Fatal(err)
	}
	counts, maxNs, err := readHist(path)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]int64{150: 2, 999: 1, 12300: 2, 9_990_000: 1}
	if !maps.Equal(counts, want) || maxNs != 9_999_999 {
		t.Fatalf("read back %v max %d, want %v max 9999999", counts, maxNs, want)
	}
	if err := os.WriteFile(path, []byte("max 5\n12 x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readHist(path); err == nil {
		t.Fatal("a damaged line read without an error")
	}
}
