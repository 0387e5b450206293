package engine

import (
	"errors"
	"testing"
	"time"
)

// A read-only open with a Truncate between its reading of the checkpoint
// files and its opening of the views still follows the writer: it sees
// the writer's appends after the cut. It once took the offsets the
// checkpoint knew as a missing range at the end of the newest view and
// stopped following it, so those appends were never seen.
func TestViewOpenBesideTruncateKeepsFollowing(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{SegmentBytes: 1 << 20, Sync: SyncInterval})
	appendN(t, w, 20, mixedSize)
	if err := w.Sync(); err != nil { // log.recovery: the log reached 20
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); checkpointNext(dir) != 20 && time.Now().Before(deadline); { // the checkpointer writes it within a second
		time.Sleep(10 * time.Millisecond)
	}
	if n := checkpointNext(dir); n != 20 {
		t.Fatalf("log.recovery records %d after a minute, want 20: the open would not take the cut offsets from it", n)
	}
	t.Cleanup(func() { afterViewListing = nil })
	cut := false
	afterViewListing = func() {
		afterViewListing = nil
		cut = true
		if err := w.Truncate(10); err != nil {
			t.Error(err)
		}
	}
	ro := mustOpenRO(t, dir, Options{})
	if !cut {
		t.Fatal("the read-only open never reached the hook after its listing: no Truncate came in between")
	}
	t.Logf("reader opened: [%d, %d), notes %q", ro.First(), ro.Next(), ro.Recovery().Notes)
	appendN(t, w, 30, mixedSize) // offsets 10..39, in the same file
	deadline := time.Now().Add(time.Minute)
	for ro.Next() != w.Next() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if ro.Next() != w.Next() {
		t.Errorf("the reader's Next is %d, the writer's %d", ro.Next(), w.Next())
	}
	for off := uint64(10); off < w.Next(); off++ {
		r, err := ro.Read(off)
		if err != nil {
			t.Errorf("reader's Read(%d): %v (the writer serves it; ErrCorrupt: %v)", off, err, errors.Is(err, ErrCorrupt))
			break
		}
		r.Release()
	}
}
