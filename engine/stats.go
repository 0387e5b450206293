package engine

import (
	"time"

	"github.com/pagelog/pagelog/internal/segment"
)

// LogStats is a snapshot of a log's state and activity since Open, for
// dashboards and alerts (the metrics module exports it to Prometheus).
type LogStats struct {
	First, Next uint64 // offsets: the oldest record held, and the next one
	Durable     uint64 // every offset below it is known synced

	Segments       int   // segment files in the log
	Bytes          int64 // bytes of records in them
	MappedSegments int   // segments whose .log this Log maps now (see Options.MaxMappedSegments)
	// Recycled counts segments made from a dropped segment's file since
	// Open, and RecycledWaiting the dropped files kept for reuse now
	// (Options.RecycleSegments).
	Recycled        uint64
	RecycledWaiting int

	Appends       uint64 // records appended since Open
	AppendedBytes uint64 // their bytes on disk (headers included)
	Reads         uint64 // successful Read calls since Open

	Syncs         uint64        // fdatasync rounds (group commits) since Open
	SyncTime      time.Duration // their total time
	LastSyncBatch uint64        // records the last sync made durable
	// SyncLatency counts syncs by duration: SyncLatency[i] is how many
	// took at most SyncBuckets[i] (and more than the bucket before);
	// the last entry counts those slower than every bucket.
	SyncLatency [len(SyncBuckets) + 1]uint64

	Recovery Recovery // what Open found and did
	SyncErr  error    // the sticky error of a failed sync (appends are refused)
}

// SyncBuckets are the upper bounds of the sync latency histogram of
// LogStats.
var SyncBuckets = [...]time.Duration{
	50 * time.Microsecond, 100 * time.Microsecond, 250 * time.Microsecond,
	500 * time.Microsecond, time.Millisecond, 2500 * time.Microsecond,
	5 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond,
	50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
	500 * time.Millisecond, time.Second,
}

// Stats returns a snapshot of the log's figures. It is cheap enough to call
// every second: it takes the append lock for a moment and reads counters.
// The counters cost the hot paths little: appends count under the lock
// they hold anyway, and each read on its segment's reference-count line.
func (l *Log) Stats() LogStats {
	st := LogStats{
		Next:     l.next.Load(),
		Durable:  l.sync.durable.Load(),
		Recovery: l.recovery,
		SyncErr:  l.sync.failed(),
	}
	segs := *l.segs.Load()
	st.First = st.Next
	if len(segs) > 0 {
		st.First = segs[0].Base()
	}
	st.Segments = len(segs)
	// The cache's count first: a segment whose seal joins the cache in
	// between is then counted by neither look, never by both.
	st.MappedSegments = l.cfg.Maps.Mapped()
	for _, s := range segs {
		st.Bytes += s.End()
		if !s.Lazy() {
			st.MappedSegments++ // the active segment, views
		}
	}
	if r := l.recycle; r != nil {
		r.mu.Lock()
		st.Recycled, st.RecycledWaiting = r.reused, len(r.paths)
		r.mu.Unlock()
	}
	l.mu.Lock()
	st.Appends, st.AppendedBytes = l.appends, l.appendedBytes
	st.Reads = l.readsGone
	for _, s := range *l.segs.Load() {
		st.Reads += s.Reads()
	}
	l.mu.Unlock()
	l.sync.mu.Lock()
	st.Syncs, st.SyncTime, st.LastSyncBatch = l.sync.rounds, l.sync.took, l.sync.lastBatch
	st.SyncLatency = l.sync.latency
	l.sync.mu.Unlock()
	return st
}

// noteSync records one sync round of d that made batch records durable.
// The caller holds st.mu.
func (st *syncState) noteSync(d time.Duration, batch uint64) {
	st.rounds++
	st.took += d
	st.lastBatch = batch
	i := 0
	for i < len(SyncBuckets) && d > SyncBuckets[i] {
		i++
	}
	st.latency[i]++
}

// stripedCounter is a counter that many goroutines add to without sharing
// a cache line most of the time: each adds to a slot chosen by the address
// of its stack, and a read sums the slots.
// departed keeps the read counts of segments leaving the log (under l.mu,
// before they are unpublished), so that LogStats.Reads never goes back. A
// Read that counts on such a segment after this is not counted.
func (l *Log) departed(gone ...*segment.Segment) {
	for _, s := range gone {
		l.readsGone += s.Reads()
	}
}
