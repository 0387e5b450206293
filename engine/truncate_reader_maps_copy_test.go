package engine

import (
	"testing"
)

// A reader that took its reference on an evicted sealed segment (the first
// half of Acquire) before a Truncate to the base of the next segment
// closed it (the Truncate makes it the active one again, from a copy of
// its file renamed over it), and maps it after the rename, reads the copy:
// the record the log still holds, byte for byte (it once got ErrNotFound).
func TestTruncateReaderMappingEvictedSegmentFindsCopy(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 4 << 10, MaxMappedSegments: 1}
	l := mustOpen(t, dir, opts)
	for range 200 {
		if err := sealEvictAppend(l); err != nil {
			t.Fatal(err)
		}
	}
	awaitBackgroundSeal(l)
	segs := *l.segs.Load()
	k := len(segs) / 2
	prev, target := segs[k-1], segs[k]
	for _, s := range segs[:len(segs)-1] {
		checkRead(t, l, s.Base()+1, sealEvictSize(s.Base()+1))
	}
	checkRead(t, l, segs[0].Base(), sealEvictSize(segs[0].Base())) // evicts prev
	if mappedLogNames(t, dir)[prev.Path()[len(dir)+1:]] {
		t.Fatal("prev is still mapped")
	}
	// A Read of prev.Base()+1 found prev in the list and took its
	// reference (Acquire up to the mapping: Hold); then it is descheduled.
	if !prev.Hold() {
		t.Fatal("Hold")
	}
	// The log is cut at target's base: target goes, and prev becomes the
	// active segment again, from a copy of its file renamed over it.
	if err := l.Truncate(target.Base()); err != nil {
		t.Fatal(err)
	}
	checkRead(t, l, prev.Base()+1, sealEvictSize(prev.Base()+1)) // the log holds it
	// The reader goes on: the rest of Acquire (it maps), then the
	// segment's Read, as Log.Read does.
	if !prev.Acquire() {
		t.Fatal("Acquire")
	}
	prev.Release() // the Hold above stands for Acquire's reference
	v, _, err := prev.Read(prev.Base() + 1)
	defer prev.Release()
	if err != nil {
		t.Fatalf("Read(%d), below the cut at %d: %v", prev.Base()+1, target.Base(), err)
	}
	if err := sealEvictCheck(Record{Offset: prev.Base() + 1, Body: v.Body}, prev.Base()+1); err != nil {
		t.Fatal(err)
	}
}
