package bench

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
)

var scratch string

func TestMain(m *testing.M) {
	if dir := os.Getenv(writerEnv); dir != "" {
		os.Exit(runWriter(dir))
	}
	if role := os.Getenv(streamEnv); role != "" {
		os.Exit(runStreamChild(role))
	}
	dir, err := os.MkdirTemp(os.Getenv("PAGELOG_BENCH_DIR"), "pagelog-bench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	scratch = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// fixture is a log of n records of size bytes, built once per process and
// shared by the read benchmarks.
type fixture struct {
	once sync.Once
	dir  string
	n    int
	size int
	err  error
}

var (
	fixtureRead = &fixture{n: 256 << 10, size: 1024} // 256 MiB: four segments
	fixtureOpen = &fixture{n: 1 << 20, size: 1024}   // 1 GiB
)

func (f *fixture) build(b *testing.B) string {
	f.once.Do(func() {
		f.dir, f.err = os.MkdirTemp(scratch, "fixture-")
		if f.err != nil {
			return
		}
		l, err := engine.Open(f.dir, engine.Options{})
		if err != nil {
			f.err = err
			return
		}
		body := make([]byte, f.size)
		for i := 0; i < f.n; i++ {
			fill(body, uint64(i))
			if _, err := l.Append(body); err != nil {
				f.err = err
				break
			}
		}
		if err := l.Close(); f.err == nil {
			f.err = err
		}
	})
	if f.err != nil {
		b.Fatal(f.err)
	}
	return f.dir
}

// fill writes a body that depends on the offset, so reads can be checked.
func fill(body []byte, off uint64) {
	for i := range body {
		body[i] = byte(off + uint64(i)*7)
	}
}

// latencies collects per-operation times and reports percentiles: p50,
// p99, p99.9, p99.99 and the maximum (the slowest operations are the
// product).
type latencies []time.Duration

func (l latencies) report(b *testing.B) { l.reportAs(b, "") }

// reportAs reports the percentiles with their units prefixed by prefix.
func (l latencies) reportAs(b *testing.B, prefix string) {
	if len(l) == 0 {
		return
	}
	s := slices.Clone(l)
	slices.Sort(s)
	at := func(q float64) float64 {
		return float64(s[min(len(s)-1, int(float64(len(s))*q))].Nanoseconds())
	}
	b.ReportMetric(at(0.50), prefix+"p50-ns")
	b.ReportMetric(at(0.99), prefix+"p99-ns")
	b.ReportMetric(at(0.999), prefix+"p99.9-ns")
	b.ReportMetric(at(0.9999), prefix+"p99.99-ns")
	b.ReportMetric(float64(s[len(s)-1].Nanoseconds()), prefix+"max-ns")
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}
