package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	fillGenerationSegments(t, w, 8)
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
		if err := checkGenerationBody(rec, rec.Offset); err != nil {
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

// A damaged record in a segment the writer has dropped, under a reader
// that still maps it: the damage is not reported as corruption of the log,
// because the segment is no longer part of it. Read serves every other
// record the mapping holds, and answers the damaged one with ErrTrimmed
// for the rest of the segment (the checksum named as its cause, but not
// matching ErrCorrupt: a dropped range is never damage).
// Records and ReadNext treat that range as dropped from the first failed
// read on: they report it once and go on at the next live segment, though
// the mapping still holds the records after the damage. That is the
// design: a reader of a dropped segment owes nothing beyond what it has
// read, and Records must not stop at damage the log no longer holds.
func TestReadOnlyDroppedSegmentDamageIsTrimmedRange(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{SegmentBytes: 4 << 10})
	fillGenerationSegments(t, w, 5)
	r := mustOpenRO(t, dir, Options{})
	segs := *r.segs.Load()
	s := segs[1]
	base, next := s.Base(), s.Next()
	bad := base + 2
	flipRecordBodyByte(t, dir, base, bad)
	if _, err := w.DropBefore(segs[2].Base()); err != nil {
		t.Fatal(err)
	}

	for off := base; off < next; off++ {
		rec, err := r.Read(off)
		if off != bad {
			if err != nil {
				t.Fatalf("Read(%d) from the mapping of a dropped segment: %v", off, err)
			}
			if err := checkGenerationBody(rec, off); err != nil {
				t.Fatal(err)
			}
			rec.Release()
			continue
		}
		if err == nil {
			rec.Release()
			t.Fatalf("Read(%d) of the damaged record: no error", off)
		}
		if !errors.Is(err, ErrTrimmed) || errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), fmt.Sprintf("offsets [%d, %d)", bad, next)) {
			t.Fatalf("Read(%d) of the damaged record: %v; want ErrTrimmed for [%d, %d), not ErrCorrupt", off, err, bad, next)
		}
	}

	want, trimmed := base, 0
	for rec, err := range r.Records(base) {
		if err != nil {
			if !errors.Is(err, ErrTrimmed) || want != bad {
				t.Fatalf("Records after %d: %v; want one ErrTrimmed at %d", want, err, bad)
			}
			trimmed++
			want = next
			continue
		}
		if rec.Offset != want {
			t.Fatalf("Records: record %d, want %d", rec.Offset, want)
		}
		want++
	}
	if trimmed != 1 || want != r.Next() {
		t.Fatalf("Records: %d trimmed reports, ended at %d; want 1, and %d", trimmed, want, r.Next())
	}

	_, n, err := r.ReadNext(context.Background(), bad)
	if !errors.Is(err, ErrTrimmed) || n != next {
		t.Fatalf("ReadNext(%d) at the damage in a dropped segment: next %d, %v; want ErrTrimmed and %d", bad, n, err, next)
	}
}
