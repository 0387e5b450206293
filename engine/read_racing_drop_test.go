package engine

import (
	"errors"
	"testing"
)

// TestReadRacingDropOfUnmappedSegmentNotCorrupt: Log.Read (acquire: load
// the segment list, pick the segment, Acquire it) interleaved with
// DropBefore of a sealed segment that is not mapped (a log with
// MaxMappedSegments, reopened): the reader loaded the list before the drop
// published the new one; the drop removes the files; the reader's Acquire
// succeeds (the log's reference is given back only after every file went)
// and maps a file that is gone. The Read must report the offset trimmed
// (or not found), never ErrCorrupt "cannot be mapped": the records were
// dropped, not damaged.
func TestReadRacingDropOfUnmappedSegmentNotCorrupt(t *testing.T) {
	l := reopenOneMapped(t, 100)
	segs := *l.segs.Load() // the reader's look at the list
	s := floorSegment(segs, 0)

	// DropBefore(segs[2].Base()), up to the removal of the files
	// (finishDrop removes all of them before it closes any).
	l.dropMu.Lock()
	l.mu.Lock()
	gone, err := l.dropBeforeLocked(segs[2].Base())
	l.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gone {
		g.MarkDropped()
		removeSegmentFiles(l.dir, g.Base())
	}

	if !s.Acquire() { // the reader's Acquire
		t.Fatal("Acquire failed")
	}
	_, _, rerr := s.Read(0)
	s.Release()
	for _, g := range gone {
		g.Close()
	}
	l.dropMu.Unlock()
	if rerr != nil && !errors.Is(rerr, ErrTrimmed) && !errors.Is(rerr, ErrNotFound) {
		t.Fatalf("Read(0) racing its segment's drop: %v", rerr)
	}
}
