package metrics

import (
	"github.com/pagelog/pagelog/engine"
	"github.com/prometheus/client_golang/prometheus"
)

// NewLogCollector returns a collector of l's figures (Log.Stats, read at
// each scrape), every metric labelled log=name. See the package doc for the
// metrics.
func NewLogCollector(l *engine.Log, name string) prometheus.Collector {
	return &logCollector{l: l, logFigures: newLogFigures("log", name)}
}

// logFigures are the metrics of one log's LogStats, labelled label=name:
// log=name for a log, and for a queue's message log too (log=<the queue's
// name>), so that each metric name keeps one set of label names in a
// registry that holds both kinds of collector.
type logFigures struct {
	f     *figures[engine.LogStats]
	syncs *prometheus.Desc
}

func newLogFigures(label, name string) logFigures {
	f := newFigures[engine.LogStats](label, name)
	f.gauge("pagelog_first_offset", "Oldest offset the log holds.",
		func(s *engine.LogStats) float64 { return float64(s.First) })
	f.gauge("pagelog_next_offset", "Offset the next append gets.",
		func(s *engine.LogStats) float64 { return float64(s.Next) })
	f.gauge("pagelog_durable_offset", "Every offset below it is known synced to disk.",
		func(s *engine.LogStats) float64 { return float64(s.Durable) })
	f.gauge("pagelog_segments", "Segment files in the log.",
		func(s *engine.LogStats) float64 { return float64(s.Segments) })
	f.gauge("pagelog_log_bytes", "Bytes of records in the log's segments.",
		func(s *engine.LogStats) float64 { return float64(s.Bytes) })
	f.gauge("pagelog_mapped_segments", "Segments whose records are mapped in memory now.",
		func(s *engine.LogStats) float64 { return float64(s.MappedSegments) })
	f.counter("pagelog_appends_total", "Records appended since the log was opened.",
		func(s *engine.LogStats) uint64 { return s.Appends })
	f.counter("pagelog_appended_bytes_total", "Bytes appended since the log was opened, record headers included.",
		func(s *engine.LogStats) uint64 { return s.AppendedBytes })
	f.counter("pagelog_reads_total", "Successful reads since the log was opened.",
		func(s *engine.LogStats) uint64 { return s.Reads })
	f.counter("pagelog_syncs_total", "Fdatasync rounds (group commits) since the log was opened.",
		func(s *engine.LogStats) uint64 { return s.Syncs })
	f.gauge("pagelog_last_sync_batch_records", "Records the last sync made durable.",
		func(s *engine.LogStats) float64 { return float64(s.LastSyncBatch) })
	f.gauge("pagelog_sync_failed", "1 once a sync failed: the log refuses appends until it is reopened.",
		func(s *engine.LogStats) float64 { return flag(s.SyncErr != nil) })
	f.gauge("pagelog_recovery_duration_seconds", "How long opening the log took.",
		func(s *engine.LogStats) float64 { return s.Recovery.Took.Seconds() })
	f.gauge("pagelog_recovery_clean", "1 when the open found the log closed cleanly.",
		func(s *engine.LogStats) float64 { return flag(s.Recovery.Clean) })
	f.gauge("pagelog_recovery_truncated_bytes", "Bytes of torn tail the open cut.",
		func(s *engine.LogStats) float64 { return float64(s.Recovery.TruncatedBytes) })
	f.gauge("pagelog_recovery_indexes_rebuilt", "Segment indexes the open repaired.",
		func(s *engine.LogStats) float64 { return float64(s.Recovery.IndexesRebuilt) })
	f.gauge("pagelog_recovery_leftover_files", "Index files the open found without their segment.",
		func(s *engine.LogStats) float64 { return float64(len(s.Recovery.Leftovers)) })
	f.counter("pagelog_recycled_segments_total", "Segments made from the file of a dropped segment since the log was opened (engine.Options.RecycleSegments).",
		func(s *engine.LogStats) uint64 { return s.Recycled })
	f.gauge("pagelog_recycled_files", "Files of dropped segments kept for reuse now.",
		func(s *engine.LogStats) float64 { return float64(s.RecycledWaiting) })
	return logFigures{f: f, syncs: f.desc("pagelog_sync_duration_seconds",
		"Durations of the fdatasync rounds since the log was opened.")}
}

func (lf *logFigures) describe(ch chan<- *prometheus.Desc) {
	lf.f.describe(ch)
	ch <- lf.syncs
}

func (lf *logFigures) collect(ch chan<- prometheus.Metric, st *engine.LogStats) {
	lf.f.collect(ch, st)
	ch <- syncHistogram(lf.syncs, st)
}

type logCollector struct {
	l *engine.Log
	logFigures
}

func (c *logCollector) Describe(ch chan<- *prometheus.Desc) { c.describe(ch) }

func (c *logCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.l.Stats()
	c.collect(ch, &st)
}

// syncHistogram turns LogStats.SyncLatency (a count per bucket) into the
// cumulative buckets Prometheus wants: bucket i counts the syncs that took
// at most SyncBuckets[i].
func syncHistogram(desc *prometheus.Desc, st *engine.LogStats) prometheus.Metric {
	buckets := make(map[float64]uint64, len(engine.SyncBuckets))
	var n uint64
	for i, le := range engine.SyncBuckets {
		n += st.SyncLatency[i]
		buckets[le.Seconds()] = n
	}
	n += st.SyncLatency[len(engine.SyncBuckets)]
	m, err := prometheus.NewConstHistogram(desc, n, st.SyncTime.Seconds(), buckets)
	if err != nil {
		return prometheus.NewInvalidMetric(desc, err)
	}
	return m
}
