package engine

import "testing"

// TestInspectOfReadOnlyLogEndsAfterWritersCut: a log opened read-only
// whose writer cuts it inside a segment the reader has not mapped (the
// writer renames a copy over the segment's file): Inspect walks to the
// cut, every record below it whole, and ends.
func TestInspectOfReadOnlyLogEndsAfterWritersCut(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{SegmentBytes: 8 << 10})
	appendN(t, w, 400, mixedSize)
	segs := *w.segs.Load()
	if len(segs) < 4 {
		t.Fatalf("%d segments, want several", len(segs))
	}
	at := segs[1].Base() + 1
	r := mustOpenRO(t, dir, Options{MaxMappedSegments: 1}) // segment 1 unmapped
	if err := w.Truncate(at); err != nil {
		t.Fatal(err)
	}
	got := returnsWithin(t, "Inspect", func() []RecordInfo {
		var infos []RecordInfo
		for ri := range r.Inspect(0) {
			infos = append(infos, ri)
		}
		return infos
	})
	if uint64(len(got)) != at {
		t.Fatalf("Inspect yielded %d records, want the %d below the cut", len(got), at)
	}
	for i, ri := range got {
		if ri.Offset != uint64(i) || !ri.OK {
			t.Fatalf("Inspect's record %d: %+v", i, ri)
		}
	}
}
