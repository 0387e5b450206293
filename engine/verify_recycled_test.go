package engine

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A read-only Verify beside a writer that drops a segment the verifier
// maps and reuses its file at once (RecycleSegments): the reused file's
// bytes are made zero under the verifier's mapping, and its records read
// as ending at its base, before the next segment's. That is the drop's
// doing, not missing records: the report stays healthy and leaves the
// segment out, as one dropped before Verify took it.
func TestVerifyReadOnlyBesideRecycledDrop(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{SegmentBytes: 4 << 10, RecycleSegments: 2})
	a6Fill(t, w, 6)
	r := mustOpenRO(t, dir, Options{})
	segs := *r.segs.Load()
	victim := segs[1]
	// The verifier maps the victim before the drop, and reads nothing of
	// it before the file is reused.
	if !victim.Acquire() {
		t.Fatal("Acquire")
	}
	defer victim.Release()
	dropped := false
	rep, err := r.Verify(func(done, total int64) {
		if dropped {
			return
		}
		dropped = true
		before := w.Stats().Recycled
		if _, err := w.DropBefore(segs[2].Base()); err != nil {
			t.Fatal(err)
		}
		// Rolls until the victim's file was reused (made zero).
		for deadline := time.Now().Add(10 * time.Second); w.Stats().Recycled < before+2; {
			if time.Now().After(deadline) {
				t.Fatalf("no dropped file reused: %+v", w.Stats())
			}
			if _, err := w.Append(a6Body(w.Next(), 1)); err != nil {
				t.Fatal(err)
			}
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
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{SegmentBytes: 4 << 10, RecycleSegments: 2})
	a6Fill(t, w, 6)
	r := mustOpenRO(t, dir, Options{})
	segs := *r.segs.Load()
	victim := segs[1]
	if !victim.Acquire() {
		t.Fatal("Acquire")
	}
	defer victim.Release()
	before := w.Stats().Recycled
	if _, err := w.DropBefore(segs[2].Base()); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); w.Stats().Recycled < before+2; {
		if time.Now().After(deadline) {
			t.Fatalf("no dropped file reused: %+v", w.Stats())
		}
		if _, err := w.Append(a6Body(w.Next(), 1)); err != nil {
			t.Fatal(err)
		}
	}
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
			if err := a6Valid(rec, rec.Offset); err != nil {
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
