package engine

import (
	"bytes"
	"testing"
)

// TestEvictKeepsHeldRecordOfDroppedSegment: a record held past its
// segment's drop, with MaxMappedSegments, keeps its bytes while other
// segments are mapped. Once the log let go of the segment, the holder's
// reference is its only one; the map cache must not take that for "only
// the log holds it" and evict the segment, which would unmap the record's
// bytes (SIGSEGV on the read of r.Body below).
func TestEvictKeepsHeldRecordOfDroppedSegment(t *testing.T) {
	l := reopenOneMapped(t, 200)
	segs := *l.segs.Load()
	r, err := l.Read(0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	want := bytes.Clone(r.Body)
	if _, err := l.DropBefore(segs[2].Base()); err != nil {
		t.Fatal(err)
	}
	for _, s := range segs[3:6] { // map other segments: the cache evicts
		o, err := l.Read(s.Base())
		if err != nil {
			t.Fatal(err)
		}
		o.Release()
	}
	t.Logf("mapped sealed segments: %d", l.cfg.Maps.Mapped())
	if !bytes.Equal(r.Body, want) {
		t.Fatal("the held record's body changed")
	}
}
