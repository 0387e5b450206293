package engine

import (
	"testing"
)

// A segment that a log opened read-only had mapped, then unmapped (the
// map cache evicted it), whose tail the writer cuts (Truncate): the copy
// below the cut is renamed over its name. The records below the cut are
// still the log's; Records from the segment's base must give them all,
// not skip the segment as gone.
func TestAttack10TruncateEvictedSkipsRecords(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{SegmentBytes: 4 << 10})
	a6Fill(t, w, 6)
	r := mustOpenRO(t, dir, Options{MaxMappedSegments: 1})
	for off := r.First(); off < r.Next(); off++ {
		rec, err := r.Read(off)
		if err != nil {
			t.Fatalf("Read(%d): %v", off, err)
		}
		rec.Release()
	}
	if m := r.cfg.Maps.Mapped(); m > 1 {
		t.Fatalf("%d sealed segments mapped, want 1 at most", m)
	}
	// Segment 1 is not the one left mapped: the newest sealed one was
	// read last.
	s := (*r.segs.Load())[1]
	base := s.Base()
	cut := base + 6
	if err := w.Truncate(cut); err != nil {
		t.Fatal(err)
	}
	want := base
	for rec, err := range r.Records(base) {
		if rec.Offset >= cut {
			break
		}
		if err != nil {
			t.Errorf("Records at %d: %v", rec.Offset, err)
			want = rec.Offset + 1
			continue
		}
		if rec.Offset != want {
			t.Fatalf("Records: record %d, want %d", rec.Offset, want)
		}
		want++
	}
	if want < cut {
		t.Errorf("Records: records [%d, %d) below the cut at %d never came; they are in the log", want, cut, cut)
	}
}
