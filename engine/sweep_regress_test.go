package engine

import "testing"

// A regression test: the clock sweep of MapCache.add stopped after 2*len(segs) tries,
// len taken after each eviction: a sweep that starts on the new segment
// and evicts one segment runs out of tries before the second chance of
// the next one is spent. Nothing is held, a new segment was mapped, and
// two stay mapped with MaxMappedSegments 1 (until some later mapping).
func TestRegressSweepStopsShort(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 1024})
	appendN(t, l, 200, func(uint64) int { return 40 })
	l.Close()
	l = mustOpen(t, dir, Options{SegmentBytes: 1024, MaxMappedSegments: 1})
	segs := *l.segs.Load()
	a, err := l.Read(segs[0].Base())
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.Read(segs[1].Base())
	if err != nil {
		t.Fatal(err)
	}
	a.Release()
	b.Release()
	c, err := l.Read(segs[2].Base())
	if err != nil {
		t.Fatal(err)
	}
	c.Release()
	if m := l.Stats().MappedSegments - 1; m > 1 { // the active segment is one
		t.Fatalf("%d sealed segments mapped after a new mapping with nothing held; MaxMappedSegments 1", m)
	}
}
