package engine

import (
	"errors"
	"fmt"
	"iter"
	"testing"
	"time"
)

// Iterators of a log opened read-only over sealed segments that are not
// mapped when the writer drops them: segments past the newest
// MaxMappedSegments at the open, and segments the map cache unmapped
// (evicted) to map others. Such a segment is mapped again by name when
// an iterator reaches it, and the name is gone. Records, RecordsWithAttrs
// and Inspect must report the dropped offsets (Records: once, as
// trimmed) and go on at the first segment still there; they must not
// spin on the segment.

// droppedIterItem is one yield of an iterator.
type droppedIterItem struct {
	off uint64
	err error
}

// collectDroppedIter runs seq in a goroutine and returns what it yielded (at most
// max items), or fails when it has not ended by the deadline; then it
// closes r, which ends the iteration.
func collectDroppedIter(t *testing.T, r *Log, what string, seq iter.Seq2[Record, error], max int) []droppedIterItem {
	return collectDroppedIterAs(t, r, what, seq, max, true)
}

// collectDroppedIterAs is collectDroppedIter; validate says whether the records' bodies
// are checked (checkGenerationBody).
func collectDroppedIterAs(t *testing.T, r *Log, what string, seq iter.Seq2[Record, error], max int, validate bool) []droppedIterItem {
	t.Helper()
	done := make(chan []droppedIterItem, 1)
	go func() {
		var items []droppedIterItem
		for rec, err := range seq {
			items = append(items, droppedIterItem{rec.Offset, err})
			if err == nil && validate {
				if verr := checkGenerationBody(rec, rec.Offset); verr != nil {
					items[len(items)-1].err = fmt.Errorf("bad body: %w", verr)
				}
			}
			if len(items) >= max {
				break
			}
		}
		done <- items
	}()
	select {
	case items := <-done:
		return items
	case <-time.After(15 * time.Second):
		_ = r.Close()
		items := <-done
		t.Fatalf("%s never ended: yielded %d items in 15s (last %v) and spun until the log was closed", what, len(items), lastDroppedIterItem(items))
		return nil
	}
}

func lastDroppedIterItem(items []droppedIterItem) any {
	if len(items) == 0 {
		return "none"
	}
	it := items[len(items)-1]
	return fmt.Sprintf("%d: %v", it.off, it.err)
}

// checkRecordsAfterDrop checks what Records yielded from 0 over a log whose
// writer dropped every offset below first: one trimmed report at most
// (the lazy segments' drop: none when the iterator starts above them),
// then every record from first to end, in order.
func checkRecordsAfterDrop(t *testing.T, what string, items []droppedIterItem, first, end uint64) {
	t.Helper()
	want := first
	trimmed := 0
	for _, it := range items {
		switch {
		case errors.Is(it.err, ErrTrimmed) && !errors.Is(it.err, ErrCorrupt):
			trimmed++
			if it.off >= first {
				t.Fatalf("%s: trimmed report at %d, in the segments still there (from %d): %v", what, it.off, first, it.err)
			}
		case it.err != nil:
			t.Fatalf("%s: at %d: %v", what, it.off, it.err)
		case it.off != want:
			t.Fatalf("%s: record %d, want %d", what, it.off, want)
		default:
			want++
		}
	}
	if want < end {
		t.Fatalf("%s: records up to %d, want up to %d", what, want, end)
	}
	if trimmed == 0 {
		t.Fatalf("%s: the dropped offsets [0, %d) were never reported", what, first)
	}
}

// readOnlyLazyDropCase builds a log of n segments, opens it read-only with the
// given bound, lets prepare run on the reader (to map and evict), and
// drops the writer's segments below the fourth.
func readOnlyLazyDropCase(t *testing.T, n, maxMapped, recycle int, prepare func(r *Log)) (r *Log, first, end uint64) {
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
		// Rolls until the dropped files are reused.
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

// Segments past the bound at the open (never mapped) dropped by the
// writer, with and without reuse of their files: Records reports them once
// as trimmed and gives every record from the first one left.
func TestRecordsReadOnlyLazySegmentsDropped(t *testing.T) {
	for _, recycle := range []int{0, 2} {
		t.Run(fmt.Sprint("recycle=", recycle), func(t *testing.T) {
			r, first, end := readOnlyLazyDropCase(t, 8, 1, recycle, nil)
			items := collectDroppedIter(t, r, "Records", r.Records(0), 100000)
			checkRecordsAfterDrop(t, "Records", items, first, end)
		})
	}
}

// The same for RecordsWithAttrs: it ends, reports the dropped range as
// trimmed (and nothing else), and gives no record of a dropped segment.
// The log's records have no attributes: it steps over them, yielding at
// most some (the first of a segment), whole, in order, below the end.
func TestRecordsWithAttrsReadOnlyLazySegmentsDropped(t *testing.T) {
	r, first, end := readOnlyLazyDropCase(t, 8, 1, 0, nil)
	items := collectDroppedIter(t, r, "RecordsWithAttrs", r.RecordsWithAttrs(0), 100000)
	trimmed, last := 0, int64(-1)
	for _, it := range items {
		switch {
		case errors.Is(it.err, ErrTrimmed) && !errors.Is(it.err, ErrCorrupt):
			trimmed++
			if it.off >= first {
				t.Fatalf("RecordsWithAttrs: trimmed report at %d, in the segments still there (from %d): %v", it.off, first, it.err)
			}
		case it.err != nil:
			t.Fatalf("RecordsWithAttrs: at %d: %v", it.off, it.err)
		case it.off < first:
			t.Fatalf("RecordsWithAttrs: record %d of a dropped, unmapped segment", it.off)
		case it.off >= end || int64(it.off) <= last:
			t.Fatalf("RecordsWithAttrs: record %d after %d, the log ends at %d", it.off, last, end)
		default:
			last = int64(it.off)
		}
	}
	if trimmed == 0 {
		t.Fatalf("RecordsWithAttrs: the dropped offsets [0, %d) were never reported", first)
	}
}

// Segments mapped by a first read, then evicted by the map cache to map
// others, then dropped: mapped again by name when Records comes back.
func TestRecordsReadOnlyEvictedSegmentsDropped(t *testing.T) {
	r, first, end := readOnlyLazyDropCase(t, 10, 2, 0, func(r *Log) {
		for rec, err := range r.Records(0) {
			if err != nil {
				t.Fatalf("first read at %d: %v", rec.Offset, err)
			}
		}
		if m := r.cfg.Maps.Mapped(); m > 2 {
			t.Fatalf("%d segments mapped after the first read, want at most 2", m)
		}
	})
	items := collectDroppedIter(t, r, "Records", r.Records(0), 100000)
	checkRecordsAfterDrop(t, "Records", items, first, end)
}

// The default bound: a log of more sealed segments than 128 whose oldest
// ones the writer drops (retention, DropBefore) before a dump reaches
// them.
func TestRecordsReadOnlyDefaultBoundSegmentsDropped(t *testing.T) {
	r, first, end := readOnlyLazyDropCase(t, DefaultMaxMappedSegments+8, 0, 0, nil)
	items := collectDroppedIter(t, r, "Records", r.Records(0), 1<<20)
	checkRecordsAfterDrop(t, "Records", items, first, end)
}

// The same for Inspect: it ends at the log's end, and every record from
// the first one left is whole.
func TestInspectReadOnlyLazySegmentsDropped(t *testing.T) {
	r, first, end := readOnlyLazyDropCase(t, 8, 1, 0, nil)
	seq := func(yield func(Record, error) bool) {
		for ri := range r.Inspect(0) {
			var err error
			if !ri.OK {
				err = fmt.Errorf("not ok: %v", ri.Err)
			}
			if !yield(Record{Offset: ri.Offset}, err) {
				return
			}
		}
	}
	items := collectDroppedIterAs(t, r, "Inspect", seq, 100000, false)
	last := uint64(0)
	for _, it := range items {
		if it.off >= first && it.err != nil {
			t.Fatalf("Inspect: %d: %v", it.off, it.err)
		}
		last = it.off
	}
	if last+1 != end {
		t.Fatalf("Inspect ended at %d, want %d", last+1, end)
	}
}
