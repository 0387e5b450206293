package engine

import (
	"os"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/segment"
)

// TestOffsetForTimeRebuiltTimeIndexAfterRemap: a read-only log rebuilds a
// damaged time index in memory; after an eviction the segment is mapped
// again from its damaged file with the rebuilt entry count. OffsetForTime
// must answer alike before and after: no record appended at or after t may
// lie below its answer. (Had TimeIndex cached lastMs 0 for the remapped
// segment, OffsetForTime would pass over it and answer past such records.)
func TestOffsetForTimeRebuiltTimeIndexAfterRemap(t *testing.T) {
	t0 := time.Now().Add(-time.Hour).UnixMilli()
	ms := t0
	opts := Options{SegmentBytes: 4 << 10, IndexIntervalBytes: 256}
	opts.now = func() time.Time { return time.UnixMilli(ms) }
	dir := t.TempDir()
	w := mustOpen(t, dir, opts)
	at := map[uint64]int64{}
	for seg := 0; seg < 3; seg++ {
		if seg > 0 {
			ms = t0 - 1000*int64(seg) // the clock goes back at each roll
		}
		for len(*w.segs.Load()) == seg+1 {
			off, err := w.Append(make([]byte, 100))
			if err != nil {
				t.Fatal(err)
			}
			at[off] = ms
			ms++
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// Segment 0: its time index lost; its .log's mtime is its last append.
	os.Remove(segPath(dir, 0, segment.TimeIndexSuffix))
	seg0 := *w.segs.Load()
	_ = seg0
	var last0 int64
	bases, _ := listSegments(dir)
	for off, a := range at {
		if off < bases[1] {
			last0 = max(last0, a)
		}
	}
	mt := time.UnixMilli(last0)
	if err := os.Chtimes(segPath(dir, 0, segment.LogSuffix), mt, mt); err != nil {
		t.Fatal(err)
	}
	opts.MaxMappedSegments = 1
	l := mustOpenRO(t, dir, opts)
	q := time.UnixMilli(t0 + 5)
	ask := func(when string) uint64 {
		o, err := l.OffsetForTime(q)
		if err != nil {
			t.Fatal(err)
		}
		for off := uint64(0); off < o; off++ {
			if a, ok := at[off]; ok && a >= q.UnixMilli() {
				t.Errorf("%s: OffsetForTime(t0+5) = %d, but record %d was appended at t0+%d", when, o, off, a-t0)
				break
			}
		}
		return o
	}
	ask("first")
	ask("second")
	r, err := l.Read(bases[1]) // maps segment 1: segment 0 is evicted
	if err != nil {
		t.Fatal(err)
	}
	r.Release()
	ask("after an eviction")
	ask("once more")
}
