package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/segment"
)

// recycledUnderReader opens a writer that reuses dropped files, fills
// six segments, opens a read-only log beside it, and maps that log's
// second segment (the victim: held, nothing of it read). drop has the
// writer drop the two oldest segments and roll until both files were
// reused, the victim's made zero and written again under the mapping.
func recycledUnderReader(t *testing.T) (r *Log, segs []*segment.Segment, drop func()) {
	t.Helper()
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{SegmentBytes: 4 << 10, RecycleSegments: 2})
	fillGenerationSegments(t, w, 6)
	r = mustOpenRO(t, dir, Options{})
	segs = *r.segs.Load()
	if !segs[1].Acquire() {
		t.Fatal("Acquire")
	}
	t.Cleanup(segs[1].Release)
	drop = func() {
		before := w.Stats().Recycled
		if _, err := w.DropBefore(segs[2].Base()); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(time.Minute); w.Stats().Recycled < before+2; {
			if time.Now().After(deadline) {
				t.Fatalf("no dropped file reused: %+v", w.Stats())
			}
			if _, err := w.Append(generationBody(w.Next(), 1)); err != nil {
				t.Fatal(err)
			}
		}
	}
	return r, segs, drop
}

// A read-only Verify beside a writer that drops a segment the verifier
// maps and reuses its file at once (RecycleSegments): the reused file's
// bytes are made zero under the verifier's mapping, and its records read
// as ending at its base, before the next segment's. That is the drop's
// doing, not missing records: the report stays healthy and leaves the
// segment out, as one dropped before Verify took it.
func TestVerifyReadOnlyBesideRecycledDrop(t *testing.T) {
	r, _, drop := recycledUnderReader(t)
	dropped := false
	rep, err := r.Verify(func(done, total int64) {
		if !dropped {
			dropped = true
			drop()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !dropped {
		t.Fatal("Verify never called progress")
	}
	if !rep.Healthy() {
		t.Fatalf("Verify beside the drop: not healthy: %+v", rep)
	}
}

// Reads of a segment that the writer dropped and reused while a log
// opened read-only held it: Read, Records and ReadNext say the records
// were dropped (ErrTrimmed), never that they are damaged, and go on past
// the segment.
func TestReadOnlyReadsBesideRecycledDrop(t *testing.T) {
	r, segs, drop := recycledUnderReader(t)
	victim := segs[1]
	drop()
	for off := victim.Base(); off < victim.Next(); off++ {
		if rec, err := r.Read(off); err == nil {
			rec.Release()
			t.Fatalf("Read(%d) of the reused segment: a record", off)
		} else if !errors.Is(err, ErrTrimmed) || errors.Is(err, ErrCorrupt) {
			t.Fatalf("Read(%d) of the reused segment: %v, want ErrTrimmed", off, err)
		}
	}
	var trimmed int
	want := victim.Base()
	for rec, err := range r.Records(victim.Base()) {
		switch {
		case errors.Is(err, ErrTrimmed):
			trimmed++
			want = victim.Next()
		case err != nil:
			t.Fatalf("Records at %d: %v", rec.Offset, err)
		case rec.Offset != want:
			t.Fatalf("Records: record %d, want %d", rec.Offset, want)
		default:
			if err := checkGenerationBody(rec, rec.Offset); err != nil {
				t.Fatal(err)
			}
			want++
		}
		if want >= segs[3].Base() {
			break
		}
	}
	if trimmed != 1 {
		t.Fatalf("Records reported the dropped segment %d times, want once", trimmed)
	}
	rec, next, err := r.ReadNext(context.Background(), victim.Base()+1)
	if !errors.Is(err, ErrTrimmed) || next != victim.Next() {
		t.Fatalf("ReadNext in the reused segment: %v, next %d, %v; want ErrTrimmed, next %d", rec.Offset, next, err, victim.Next())
	}
}
