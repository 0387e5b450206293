package engine

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/segment"
)

// Real damage in a segment that a log opened read-only is reading, when
// the writer changes the file under the segment's name without dropping
// the records around the damage: a cut of the tail by Truncate renames a
// copy of the bytes below the cut over the name. The damaged record is
// damaged in the copy too, and the records after it, below the cut, are
// still in the log. A reader must report the damage (ErrCorrupt), not a
// drop (ErrTrimmed), and must not skip those records.

// flipRecordBodyByte flips a byte in the body of the record at off, in the
// file of the segment based at base (the writer's mapping and every
// reader's see it).
func flipRecordBodyByte(t *testing.T, dir string, base, off uint64) {
	t.Helper()
	p := filepath.Join(dir, segment.Name(base, segment.LogSuffix))
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, generationBody(off, 0))
	if i < 0 {
		t.Fatalf("the body of record %d is not in %s", off, p)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte{b[i+20] ^ 0xff}, int64(i+20)); err != nil {
		t.Fatal(err)
	}
}

func TestTruncateCopyKeepsDamageVisibleToReadOnly(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{SegmentBytes: 4 << 10})
	fillGenerationSegments(t, w, 4)
	r := mustOpenRO(t, dir, Options{})
	s := (*r.segs.Load())[1]
	base := s.Base()
	bad, cut := base+2, base+6
	if cut >= s.Next() {
		t.Fatalf("segment [%d, %d) too short", base, s.Next())
	}
	flipRecordBodyByte(t, dir, base, bad)

	// Records from base; the writer cuts the tail once the first record
	// came.
	want := base
	cutDone := false
	for rec, err := range r.Records(base) {
		if !cutDone {
			cutDone = true
			if err := w.Truncate(cut); err != nil {
				t.Fatal(err)
			}
		}
		if rec.Offset >= cut {
			break // cut (a reader may see the cut late)
		}
		switch {
		case rec.Offset == bad:
			if !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrTrimmed) {
				t.Errorf("Records: the damaged record %d: %v; want ErrCorrupt (the segment's copy holds it, damaged)", bad, err)
			}
		case err != nil:
			t.Fatalf("Records: %d: %v", rec.Offset, err)
		case rec.Offset != want:
			t.Fatalf("Records: record %d, want %d", rec.Offset, want)
		}
		want = rec.Offset + 1
	}
	if want < cut {
		t.Errorf("Records: records [%d, %d) below the cut at %d never came; they are in the log", want, cut, cut)
	}
	// What the writer reads, and a reader opened now.
	for rec, err := range w.Records(base) {
		if rec.Offset == bad && !errors.Is(err, ErrCorrupt) || rec.Offset != bad && err != nil {
			t.Fatalf("writer's Records: %d: %v", rec.Offset, err)
		}
	}

	// ReadNext of the damaged record, by a reader that has not looked at
	// the files since the cut: the record after it is next.
	_, next, err := r.ReadNext(context.Background(), bad)
	if errors.Is(err, ErrTrimmed) || next != bad+1 {
		t.Errorf("ReadNext(%d): next %d, %v; want ErrCorrupt and next %d", bad, next, err, bad+1)
	}
	if rec, err := r.Read(bad + 1); err != nil {
		t.Errorf("Read(%d): %v", bad+1, err)
	} else {
		rec.Release()
	}
}

// A segment that a log opened read-only had mapped, then unmapped (the
// map cache evicted it), whose tail the writer cuts (Truncate): the copy
// below the cut is renamed over its name. ReadNext from the segment's
// base gives every record below the cut.
func TestTruncateEvictedReadOnlyReadNextBelowCut(t *testing.T) {
	r, base, cut := readOnlyEvictedCut(t)
	for off := base; off < cut; {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		rec, next, err := r.ReadNext(ctx, off)
		cancel()
		if err != nil {
			t.Fatalf("ReadNext(%d): next %d, %v; want the record (it is in the log, below the cut at %d)", off, next, err, cut)
		}
		rec.Release()
		if next != off+1 {
			t.Fatalf("ReadNext(%d): next %d", off, next)
		}
		off = next
	}
}

// readOnlyEvictedCut opens a read-only log of a six-segment log with one
// mapping, reads every record (so segment 1 is mapped, then evicted), and
// has the writer cut the tail inside segment 1. It returns the reader,
// segment 1's base and the cut.
func readOnlyEvictedCut(t *testing.T) (r *Log, base, cut uint64) {
	t.Helper()
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{SegmentBytes: 4 << 10})
	fillGenerationSegments(t, w, 6)
	r = mustOpenRO(t, dir, Options{MaxMappedSegments: 1})
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
	base = s.Base()
	cut = base + 6
	if err := w.Truncate(cut); err != nil {
		t.Fatal(err)
	}
	return r, base, cut
}
