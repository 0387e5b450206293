package metrics_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// recordBytes is the size on disk of a record with a body of n bytes and no
// attributes (FORMAT.md: length, checksum and id, then the body).
func recordBytes(n int) int { return 16 + n }

func openLog(t testing.TB, dir string, opts engine.Options) *engine.Log {
	t.Helper()
	l, err := engine.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// gather registers c alone and returns its metric families by name.
func gather(t testing.TB, c prometheus.Collector) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]*dto.MetricFamily, len(mfs))
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// value returns the value of the family's only metric.
func value(t testing.TB, mfs map[string]*dto.MetricFamily, name string) float64 {
	t.Helper()
	mf, ok := mfs[name]
	if !ok {
		t.Fatalf("no metric %s", name)
	}
	if len(mf.Metric) != 1 {
		t.Fatalf("%s: %d metrics, want 1", name, len(mf.Metric))
	}
	m := mf.Metric[0]
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	}
	t.Fatalf("%s is neither a gauge nor a counter", name)
	return 0
}

func expectValues(t testing.TB, mfs map[string]*dto.MetricFamily, want map[string]float64) {
	t.Helper()
	for name, v := range want {
		if got := value(t, mfs, name); got != v {
			t.Errorf("%s = %v, want %v", name, got, v)
		}
	}
}

func TestLogCollectorAfterWorkload(t *testing.T) {
	dir := t.TempDir()
	// 8 records of 116 bytes fit in a segment of 1024: 100 records make 13
	// segments.
	const n, body, perSegment = 100, 100, 8
	l := openLog(t, dir, engine.Options{SegmentBytes: 1024})
	for i := range n {
		if _, err := l.Append([]byte(strings.Repeat("x", body-3) + fmt.Sprintf("%03d", i))); err != nil {
			t.Fatal(err)
		}
		if i == 49 || i == 96 {
			if err := l.Sync(); err != nil { // two syncs: of 50 records, then of 47
				t.Fatal(err)
			}
		}
	}
	for off := range uint64(7) {
		r, err := l.Read(off * 10)
		if err != nil {
			t.Fatal(err)
		}
		r.Release()
	}
	if _, err := l.Read(n + 5); err == nil { // beyond the end: not a read
		t.Fatal("read beyond the end worked")
	}
	c := metrics.NewLogCollector(l, "events")
	mfs := gather(t, c)
	segments := (n + perSegment - 1) / perSegment
	if files := segmentFiles(t, dir); files != segments {
		t.Fatalf("%d segment files, the format says %d", files, segments)
	}
	appended := float64(n * recordBytes(body))
	expectValues(t, mfs, map[string]float64{
		"pagelog_first_offset":             0,
		"pagelog_next_offset":              n,
		"pagelog_durable_offset":           97,
		"pagelog_segments":                 float64(segments),
		"pagelog_log_bytes":                appended,
		"pagelog_appends_total":            n,
		"pagelog_appended_bytes_total":     appended,
		"pagelog_reads_total":              7,
		"pagelog_syncs_total":              2,
		"pagelog_last_sync_batch_records":  47,
		"pagelog_sync_failed":              0,
		"pagelog_recovery_clean":           0, // a new log
		"pagelog_recovery_truncated_bytes": 0,
		"pagelog_recovery_indexes_rebuilt": 0,
		"pagelog_recovery_leftover_files":  0,
	})
	// The active segment at least is mapped; sealed ones may be mapped on
	// demand (Options.MaxMappedSegments).
	if m := value(t, mfs, "pagelog_mapped_segments"); m < 1 || m > float64(segments) || m != float64(l.Stats().MappedSegments) {
		t.Errorf("pagelog_mapped_segments = %v of %d segments (stats say %d)", m, segments, l.Stats().MappedSegments)
	}
	if took := value(t, mfs, "pagelog_recovery_duration_seconds"); took <= 0 || took > 60 {
		t.Errorf("pagelog_recovery_duration_seconds = %v", took)
	}
	checkSyncHistogram(t, mfs, l.Stats(), 2)
	for name, mf := range mfs {
		for _, m := range mf.Metric {
			if len(m.Label) != 1 || m.Label[0].GetName() != "log" || m.Label[0].GetValue() != "events" {
				t.Errorf("%s: labels %v, want log=events", name, m.Label)
			}
		}
	}

	// Dropping segments moves first, segments and bytes, not the counters.
	dropped, err := l.DropBefore(3 * perSegment)
	if err != nil || dropped != 3 {
		t.Fatalf("DropBefore: %d, %v", dropped, err)
	}
	mfs = gather(t, c)
	expectValues(t, mfs, map[string]float64{
		"pagelog_first_offset":         3 * perSegment,
		"pagelog_segments":             float64(segments - 3),
		"pagelog_log_bytes":            appended - 3*perSegment*float64(recordBytes(body)),
		"pagelog_appended_bytes_total": appended,
		"pagelog_appends_total":        n,
	})
}

// segmentFiles counts the files named as segments are (FORMAT.md: the base
// offset in 20 digits, then .log).
func segmentFiles(t testing.TB, dir string) int {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, strings.Repeat("[0-9]", 20)+".log"))
	if err != nil {
		t.Fatal(err)
	}
	return len(names)
}

// checkSyncHistogram checks pagelog_sync_duration_seconds against the
// stats it was made from: syncs in all, cumulative buckets at the bounds of
// engine.SyncBuckets, the sum from SyncTime.
func checkSyncHistogram(t testing.TB, mfs map[string]*dto.MetricFamily, st engine.LogStats, syncs uint64) {
	t.Helper()
	mf := mfs["pagelog_sync_duration_seconds"]
	if mf == nil || mf.GetType() != dto.MetricType_HISTOGRAM || len(mf.Metric) != 1 {
		t.Fatalf("pagelog_sync_duration_seconds: %v", mf)
	}
	h := mf.Metric[0].Histogram
	if h.GetSampleCount() != syncs {
		t.Errorf("histogram count %d, want %d", h.GetSampleCount(), syncs)
	}
	if syncs > 0 && (h.GetSampleSum() <= 0 || h.GetSampleSum() != st.SyncTime.Seconds()) {
		t.Errorf("histogram sum %v, SyncTime %v", h.GetSampleSum(), st.SyncTime)
	}
	if len(h.Bucket) != len(engine.SyncBuckets) {
		t.Fatalf("%d buckets, want %d", len(h.Bucket), len(engine.SyncBuckets))
	}
	var below uint64
	for i, b := range h.Bucket {
		if b.GetUpperBound() != engine.SyncBuckets[i].Seconds() {
			t.Errorf("bucket %d: bound %v, want %v", i, b.GetUpperBound(), engine.SyncBuckets[i].Seconds())
		}
		if got := b.GetCumulativeCount() - below; b.GetCumulativeCount() < below || got != st.SyncLatency[i] {
			t.Errorf("bucket %d (le %v): cumulative %d after %d, stats count %d", i, b.GetUpperBound(), b.GetCumulativeCount(), below, st.SyncLatency[i])
		}
		below = b.GetCumulativeCount()
	}
	if over := syncs - below; over != st.SyncLatency[len(engine.SyncBuckets)] {
		t.Errorf("%d syncs above the last bucket, stats say %d", over, st.SyncLatency[len(engine.SyncBuckets)])
	}
}

// Under SyncAlways every append is a sync round of its own (one writer):
// the histogram counts each.
func TestLogCollectorSyncAlways(t *testing.T) {
	l := openLog(t, t.TempDir(), engine.Options{Sync: engine.SyncAlways})
	const n = 20
	for range n {
		if _, err := l.Append([]byte("synced")); err != nil {
			t.Fatal(err)
		}
	}
	mfs := gather(t, metrics.NewLogCollector(l, "synced"))
	syncs := uint64(value(t, mfs, "pagelog_syncs_total"))
	if syncs < n {
		t.Fatalf("pagelog_syncs_total = %d after %d appends under SyncAlways", syncs, n)
	}
	expectValues(t, mfs, map[string]float64{"pagelog_durable_offset": n, "pagelog_last_sync_batch_records": 1})
	checkSyncHistogram(t, mfs, l.Stats(), syncs)
}

// Reopened after a clean close; and a read-only open beside it that finds
// an index file without its segment.
func TestLogCollectorRecovery(t *testing.T) {
	dir := t.TempDir()
	l, err := engine.Open(dir, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := l.Append([]byte("r")); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, engine.Options{})
	mfs := gather(t, metrics.NewLogCollector(l, "reopened"))
	expectValues(t, mfs, map[string]float64{
		"pagelog_recovery_clean": 1, "pagelog_next_offset": 10, "pagelog_appends_total": 0,
		// Nothing is known synced until this Log syncs.
		"pagelog_durable_offset": 0,
	})
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	expectValues(t, gather(t, metrics.NewLogCollector(l, "reopened")), map[string]float64{
		"pagelog_durable_offset": 10, "pagelog_syncs_total": 1, "pagelog_last_sync_batch_records": 10,
	})

	stray := filepath.Join(dir, fmt.Sprintf("%020d.index", 1000))
	if err := os.WriteFile(stray, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ro, err := engine.OpenReadOnly(dir, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	mfs = gather(t, metrics.NewLogCollector(ro, "beside"))
	expectValues(t, mfs, map[string]float64{"pagelog_recovery_leftover_files": 1, "pagelog_next_offset": 10})
}

// A scrape after Close still answers (the service may close the log
// before it stops serving), and a name that is not a label value is an
// error at Register, not a panic.
func TestLogCollectorClosedAndBadName(t *testing.T) {
	l, err := engine.Open(t.TempDir(), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append([]byte("one")); err != nil {
		t.Fatal(err)
	}
	c := metrics.NewLogCollector(l, "closed")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	mfs := gather(t, c)
	expectValues(t, mfs, map[string]float64{"pagelog_next_offset": 1, "pagelog_appends_total": 1})

	if err := prometheus.NewRegistry().Register(metrics.NewLogCollector(l, "bad\xff")); err == nil {
		t.Error("a log name that is not UTF-8 registered")
	}
}

// Two logs on one registry: same names, told apart by their label.
func TestLogCollectorsSideBySide(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	a := openLog(t, t.TempDir(), engine.Options{})
	b := openLog(t, t.TempDir(), engine.Options{})
	for range 3 {
		if _, err := b.Append([]byte("b")); err != nil {
			t.Fatal(err)
		}
	}
	reg.MustRegister(metrics.NewLogCollector(a, "a"), metrics.NewLogCollector(b, "b"))
	if err := reg.Register(metrics.NewLogCollector(b, "b")); err == nil {
		t.Error("the same log name registered twice")
	}
	want := `
# HELP pagelog_appends_total Records appended since the log was opened.
# TYPE pagelog_appends_total counter
pagelog_appends_total{log="a"} 0
pagelog_appends_total{log="b"} 3
# HELP pagelog_next_offset Offset the next append gets.
# TYPE pagelog_next_offset gauge
pagelog_next_offset{log="a"} 0
pagelog_next_offset{log="b"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "pagelog_appends_total", "pagelog_next_offset"); err != nil {
		t.Error(err)
	}
}
