package engine

import (
	"context"
	"errors"
	"testing"
)

// A log opened read-only whose writer drops segments it has not mapped
// (past MaxMappedSegments at the open): Records, Inspect and ReadNext
// reach them, find their files gone, report the offsets as dropped and go
// on past them. They used to look at the same offset for ever: the
// segment's scan said "no record here", and the list still held it.
func TestReadOnlyUnmappedSegmentsDropped(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{SegmentBytes: 4 << 10})
	a6Fill(t, w, 8)
	r := mustOpenRO(t, dir, Options{MaxMappedSegments: 1})
	segs := *r.segs.Load()
	first, end := segs[3].Base(), r.Next()
	if _, err := w.DropBefore(first); err != nil {
		t.Fatal(err)
	}

	trimmed, want := 0, uint64(0)
	for rec, err := range r.Records(0) {
		switch {
		case errors.Is(err, ErrTrimmed):
			trimmed++
			continue
		case err != nil:
			t.Fatalf("Records at %d: %v", rec.Offset, err)
		case rec.Offset < first:
			// A segment mapped at the open keeps its records.
		case want < first:
			want = first
			fallthrough
		default:
			if rec.Offset != want {
				t.Fatalf("Records: record %d, want %d", rec.Offset, want)
			}
			want++
		}
		if err := a6Valid(rec, rec.Offset); err != nil {
			t.Fatal(err)
		}
	}
	if trimmed == 0 || want != end {
		t.Fatalf("Records: %d trimmed reports, ended at %d; want some, and %d", trimmed, want, end)
	}

	last := uint64(0)
	for ri := range r.Inspect(0) {
		if ri.Offset >= first && !ri.OK {
			t.Fatalf("Inspect: %d not ok: %v", ri.Offset, ri.Err)
		}
		last = ri.Offset + max(ri.Missing, 1)
	}
	if last != end {
		t.Fatalf("Inspect ended at %d, want %d", last, end)
	}

	off := segs[1].Base()
	_, next, err := r.ReadNext(context.Background(), off)
	if !errors.Is(err, ErrTrimmed) || next != segs[2].Base() {
		t.Fatalf("ReadNext(%d) in a dropped segment: next %d, %v; want ErrTrimmed and %d", off, next, err, segs[2].Base())
	}
}
