package engine

import "testing"

// A new mapping with nothing held leaves at most MaxMappedSegments sealed
// segments mapped. The clock sweep of MapCache.add once stopped after
// 2*len(segs) tries, len taken after each eviction: a sweep that started
// on the new segment and evicted one segment ran out of tries before the
// second chance of the next one was spent, and two stayed mapped with
// MaxMappedSegments 1 (until some later mapping).
func TestMapCacheSweepEvictsDownToBound(t *testing.T) {
	l := reopenOneMapped(t, 200)
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

// Segments mapped past the bound while readers hold them are evicted down
// to the bound once the readers let go: a release that leaves a segment
// to its log alone evicts. (Without it they stayed mapped for as long as
// no other segment was mapped: five, with MaxMappedSegments 1.)
func TestMapCacheReleaseEvictsDownToBound(t *testing.T) {
	l := reopenOneMapped(t, 200)
	defer l.Close()
	segs := *l.segs.Load()
	var held []Record
	for _, s := range segs[:5] {
		r, err := l.Read(s.Base())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, r)
	}
	if m := l.Stats().MappedSegments - 1; m != 5 { // the active segment is one
		t.Fatalf("%d sealed segments mapped while five records are held", m)
	}
	for _, r := range held {
		r.Release()
	}
	if m := l.Stats().MappedSegments - 1; m > 1 {
		t.Fatalf("%d sealed segments mapped once the records were released; MaxMappedSegments 1", m)
	}
	for _, s := range segs[:5] {
		r, err := l.Read(s.Base())
		if err != nil {
			t.Fatal(err)
		}
		r.Release()
	}
	if m := l.Stats().MappedSegments - 1; m > 1 {
		t.Fatalf("%d sealed segments mapped after reads with nothing held; MaxMappedSegments 1", m)
	}
}

// reopenOneMapped writes n records of 40 bytes into a new log of 1 KiB
// segments, closes it and opens it again with one sealed segment mapped
// at most: its sealed segments are mapped on first use and evicted.
func reopenOneMapped(t *testing.T, n int) *Log {
	t.Helper()
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 1024})
	appendN(t, l, n, func(uint64) int { return 40 })
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return mustOpen(t, dir, Options{SegmentBytes: 1024, MaxMappedSegments: 1})
}
