package metrics_test

import (
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func TestMain(m *testing.M) {
	code := m.Run()
	for _, l := range scrapeLogs {
		l.Close()
	}
	if scrapeDir != "" {
		os.RemoveAll(scrapeDir)
	}
	os.Exit(code)
}

// The logs of BenchmarkScrape by segment count, built once per process
// (10,000 rolls take tens of seconds) and removed by TestMain.
var (
	scrapeDir  string
	scrapeLogs = map[int]*engine.Log{}
)

// manySegments returns a log of n segments of one record each.
func manySegments(b *testing.B, n int) *engine.Log {
	if l, ok := scrapeLogs[n]; ok {
		return l
	}
	if scrapeDir == "" {
		d, err := os.MkdirTemp("", "pagelog-scrape")
		if err != nil {
			b.Fatal(err)
		}
		scrapeDir = d
	}
	start := time.Now()
	l, err := engine.Open(filepath.Join(scrapeDir, fmt.Sprint(n)), engine.Options{SegmentBytes: 64})
	if err != nil {
		b.Fatal(err)
	}
	scrapeLogs[n] = l
	body := make([]byte, 40) // 56 bytes on disk: one record per segment of 64
	for range n {
		if _, err := l.Append(body); err != nil {
			b.Fatal(err)
		}
	}
	if st := l.Stats(); st.Segments != n {
		b.Fatalf("%d segments, want %d", st.Segments, n)
	}
	b.Logf("%d segments built in %v", n, time.Since(start))
	return l
}

// BenchmarkScrape times whole scrapes (Log.Stats, the collector, the
// registry and the text encoding, as promhttp serves them) of a log of N
// segments. Target: < 10 ms for 10,000 segments.
func BenchmarkScrape(b *testing.B) {
	for _, n := range []int{1, 10_000} {
		b.Run(fmt.Sprint("segments=", n), func(b *testing.B) {
			l := manySegments(b, n)
			reg := prometheus.NewRegistry()
			reg.MustRegister(metrics.NewLogCollector(l, "events"))
			h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
			req := httptest.NewRequest("GET", "/metrics", nil)
			lat := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				lat = append(lat, time.Since(t0))
				if w.Code != 200 {
					b.Fatalf("scrape: %d %s", w.Code, w.Body)
				}
			}
			b.StopTimer()
			reportLatency(b, lat)
		})
	}
}

// reportLatency reports the percentiles of lat in nanoseconds.
func reportLatency(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	at := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Nanoseconds()) }
	b.ReportMetric(at(0.5), "p50-ns")
	b.ReportMetric(at(0.99), "p99-ns")
	b.ReportMetric(at(0.999), "p99.9-ns")
	b.ReportMetric(at(0.9999), "p99.99-ns")
	b.ReportMetric(float64(lat[len(lat)-1].Nanoseconds()), "max-ns")
}
