package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/segment"
)

// Reads of a log opened read-only beside a writer that drops segments
// (and reuses their files) under it: ReadNext and Cursor walk past
// segments dropped before they were mapped, evicted then dropped, and
// the active segment dropped after rolls; each dropped range is reported
// once, as trimmed, naming the right offsets, and every record still in
// the log comes, in order, with its body.

// walkReadNext reads with ReadNext from offset from to end (ctx bounds a wait
// at the end) and returns the records and reports in order.
type readNextStep struct {
	off, next uint64
	err       error
}

func walkReadNext(t *testing.T, r *Log, from, end uint64) []readNextStep {
	t.Helper()
	var steps []readNextStep
	off := from
	for deadline := time.Now().Add(20 * time.Second); off < end; {
		if time.Now().After(deadline) {
			t.Fatalf("ReadNext walk stuck at %d after %d steps (end %d)", off, len(steps), end)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		rec, next, err := r.ReadNext(ctx, off)
		cancel()
		if err == nil {
			if verr := checkGenerationBody(rec, off); verr != nil {
				err = verr
			}
			rec.Release()
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrClosed) {
			t.Fatalf("ReadNext(%d): %v (end %d)", off, err, end)
		}
		if next <= off {
			t.Fatalf("ReadNext(%d): next %d does not move on (%v)", off, next, err)
		}
		steps = append(steps, readNextStep{off, next, err})
		off = next
	}
	return steps
}

// checkReadNextWalk checks a walk over a log whose writer dropped every offset
// below first: trimmed reports, none of which reaches first, then every
// record from first to end.
func checkReadNextWalk(t *testing.T, steps []readNextStep, first, end uint64) {
	t.Helper()
	want := first
	trimmed := 0
	for _, s := range steps {
		switch {
		case errors.Is(s.err, ErrTrimmed) && !errors.Is(s.err, ErrCorrupt):
			trimmed++
			if s.off >= first || s.next > first {
				t.Fatalf("trimmed report [%d, %d) reaches the records still there (from %d): %v", s.off, s.next, first, s.err)
			}
			if !strings.Contains(s.err.Error(), fmt.Sprint(s.off)) {
				t.Fatalf("trimmed report at %d does not name it: %v", s.off, s.err)
			}
		case s.err != nil:
			t.Fatalf("ReadNext(%d): %v", s.off, s.err)
		case s.off != want:
			t.Fatalf("ReadNext: record %d, want %d", s.off, want)
		default:
			want++
		}
	}
	if want != end {
		t.Fatalf("records up to %d, want up to %d", want, end)
	}
	if trimmed == 0 {
		t.Fatalf("the dropped offsets below %d were never reported", first)
	}
	if trimmed > 3 {
		t.Fatalf("%d trimmed reports for three dropped segments", trimmed)
	}
}

// readOnlyBesideDrops builds a log of n segments, opens it read-only with the
// given bound (prepare runs on the reader then), and drops the writer's
// three oldest segments (with recycle, until a dropped file was reused).
func readOnlyBesideDrops(t *testing.T, n, maxMapped, recycle int, prepare func(r *Log)) (r *Log, first, end uint64) {
	t.Helper()
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{SegmentBytes: 4 << 10, RecycleSegments: recycle})
	fillGenerationSegments(t, w, n)
	r = mustOpenRO(t, dir, Options{MaxMappedSegments: maxMapped})
	if prepare != nil {
		prepare(r)
	}
	segs := *r.segs.Load()
	first, end = segs[3].Base(), r.Next()
	if _, err := w.DropBefore(first); err != nil {
		t.Fatal(err)
	}
	if recycle > 0 {
		before := w.Stats().Recycled
		for deadline := time.Now().Add(time.Minute); w.Stats().Recycled < before+1; {
			if time.Now().After(deadline) {
				t.Fatalf("no dropped file reused: %+v", w.Stats())
			}
			if _, err := w.Append(generationBody(w.Next(), 1)); err != nil {
				t.Fatal(err)
			}
		}
	}
	return r, first, end
}

// Segments a read-only log never mapped (one sealed segment kept mapped)
// dropped by the writer, with and without reuse of their files: ReadNext
// reports the dropped range as trimmed, then gives every record left.
func TestReadNextReadOnlyUnmappedSegmentsDropped(t *testing.T) {
	for _, recycle := range []int{0, 2} {
		t.Run(fmt.Sprint("recycle=", recycle), func(t *testing.T) {
			r, first, end := readOnlyBesideDrops(t, 8, 1, recycle, nil)
			checkReadNextWalk(t, walkReadNext(t, r, 0, end), first, end)
		})
	}
}

// Segments mapped by a first read, evicted by the map cache (two kept
// mapped), then dropped and their files reused: ReadNext reports them as
// trimmed and gives every record left.
func TestReadNextReadOnlyEvictedSegmentsDropped(t *testing.T) {
	r, first, end := readOnlyBesideDrops(t, 10, 2, 2, func(r *Log) {
		for off := r.First(); off < r.Next(); off++ {
			rec, err := r.Read(off)
			if err != nil {
				t.Fatalf("first read of %d: %v", off, err)
			}
			rec.Release()
		}
		if m := r.cfg.Maps.Mapped(); m > 2 {
			t.Fatalf("%d segments mapped after the first read, want at most 2", m)
		}
	})
	checkReadNextWalk(t, walkReadNext(t, r, 0, end), first, end)
}

// The segment a read-only log opened as its newest (the writer's active
// one then) is dropped after the writer rolled past it, and its file
// reused, with segments before it: Records and ReadNext end, say each
// segment of the reader was dropped, with the reader's range of it, and
// never that a record is damaged. ReadNext, which waits, goes on at what
// the writer holds now.
func TestReadNextReadOnlyActiveDroppedAfterRolls(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{SegmentBytes: 4 << 10, RecycleSegments: 16})
	fillGenerationSegments(t, w, 3)
	for range 5 {
		if _, err := w.Append(generationBody(w.Next(), 0)); err != nil {
			t.Fatal(err)
		}
	}
	r := mustOpenRO(t, dir, Options{})
	segs := *r.segs.Load()
	act := segs[len(segs)-1]
	from, known := segs[1].Base(), r.Next()
	if act.Next() != known {
		t.Fatalf("the reader's newest segment ends at %d, its log at %d", act.Next(), known)
	}
	// The files of the reader's segments from from on, by base.
	files := map[uint64]os.FileInfo{}
	for _, s := range segs[1:] {
		fi, err := os.Stat(filepath.Join(dir, segment.Name(s.Base(), segment.LogSuffix)))
		if err != nil {
			t.Fatal(err)
		}
		files[s.Base()] = fi
	}
	for len(*w.segs.Load()) < 8 {
		if _, err := w.Append(generationBody(w.Next(), 0)); err != nil {
			t.Fatal(err)
		}
	}
	awaitBackgroundSeal(w)
	ws := *w.segs.Load()
	if _, err := w.DropBefore(ws[len(ws)-1].Base()); err != nil {
		t.Fatal(err)
	}
	// Rolls until the files of the reader's segments from from on come
	// back under later names (every dropped file is kept for reuse).
	for deadline := time.Now().Add(time.Minute); !filesReusedLater(t, dir, files); {
		if time.Now().After(deadline) {
			t.Fatalf("the reader's segments' files were never reused: %+v", w.Stats())
		}
		if _, err := w.Append(generationBody(w.Next(), 1)); err != nil {
			t.Fatal(err)
		}
	}
	wfirst, wnext := w.First(), w.Next()

	// Records: one report per segment of the reader from from on, with
	// its range, then the end (the reader keeps what it has).
	done := make(chan []droppedReport, 1)
	go func() {
		var reps []droppedReport
		for rec, err := range r.Records(from) {
			reps = append(reps, droppedReport{rec.Offset, err})
			if len(reps) > 10000 {
				break
			}
		}
		done <- reps
	}()
	var reps []droppedReport
	select {
	case reps = <-done:
	case <-time.After(20 * time.Second):
		_ = r.Close()
		t.Fatal("Records never ended")
	}
	// A segment whose file was reused comes as one report of the
	// reader's range of it.
	want, reported := from, 0
	for _, rep := range reps {
		if rep.off != want {
			t.Fatalf("Records: %v, want offset %d (%v)", rep, want, reps)
		}
		if rep.err == nil {
			want++
			continue
		}
		if !errors.Is(rep.err, ErrTrimmed) || errors.Is(rep.err, ErrCorrupt) {
			t.Fatalf("Records: %v; want records or trimmed reports", rep)
		}
		s := floorSegment(segs, rep.off)
		if r := fmt.Sprintf("[%d, %d)", rep.off, s.Next()); !strings.Contains(rep.err.Error(), r) {
			t.Fatalf("Records: %v; want the range %s", rep, r)
		}
		want, reported = s.Next(), reported+1
	}
	if want != known {
		t.Fatalf("Records from %d ended at %d, want %d (%v)", from, want, known, reps)
	}
	if reported != len(segs)-1 {
		t.Fatalf("Records: %d reports, want one for each of the %d reused segments: %v", reported, len(segs)-1, reps)
	}

	// ReadNext waits past the reader's end: it follows the writer again.
	var steps []readNextStep
	off := from
	for deadline := time.Now().Add(20 * time.Second); off < wnext; {
		if time.Now().After(deadline) {
			t.Fatalf("ReadNext stuck at %d: %v", off, steps)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		rec, next, err := r.ReadNext(ctx, off)
		cancel()
		if err == nil {
			if verr := checkGenerationBody(rec, off); verr != nil {
				t.Fatal(verr)
			}
			rec.Release()
		} else if !errors.Is(err, ErrTrimmed) || errors.Is(err, ErrCorrupt) {
			t.Fatalf("ReadNext(%d): %v", off, err)
		} else if next > wfirst {
			t.Fatalf("ReadNext(%d): trimmed up to %d, past the writer's first record %d: %v", off, next, wfirst, err)
		}
		if next <= off {
			t.Fatalf("ReadNext(%d): next %d", off, next)
		}
		steps = append(steps, readNextStep{off, next, err})
		off = next
	}
	if steps[len(steps)-1].err != nil {
		t.Fatalf("ReadNext ended on a report: %v", steps[len(steps)-1])
	}
}

type droppedReport struct {
	off uint64
	err error
}

func (r droppedReport) String() string { return fmt.Sprintf("%d: %v", r.off, r.err) }

// filesReusedLater reports whether each of files (by the base it had) is now the
// file of a segment with a greater base: reused.
func filesReusedLater(t *testing.T, dir string, files map[uint64]os.FileInfo) bool {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*"+segment.LogSuffix))
	if err != nil {
		t.Fatal(err)
	}
	for old, fi := range files {
		back := false
		for _, p := range names {
			base, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(p), segment.LogSuffix), 10, 64)
			if err != nil || base <= old {
				continue
			}
			if cur, err := os.Stat(p); err == nil && os.SameFile(cur, fi) {
				back = true
			}
		}
		if !back {
			return false
		}
	}
	return true
}
