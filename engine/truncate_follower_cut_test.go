package engine

import (
	"bytes"
	"testing"
	"time"
)

// A read-only log that follows a writer (without Wait) keeps following
// when the writer's Truncate cuts below the newest segment's base and so
// removes the newest segment. It must not take that for a drop of a
// segment it fell behind: it once stopped following there, its Next
// stayed at the old end, and it went on serving the records the cut
// removed where the writer served new ones.
func TestTruncateBelowNewestSegmentKeepsFollower(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, dir, Options{SegmentBytes: 1024})
	appendN(t, w, 60, func(uint64) int { return 40 })
	ro := mustOpenRO(t, dir, Options{})
	if ro.Next() != w.Next() {
		t.Fatalf("reader %d, writer %d", ro.Next(), w.Next())
	}
	segs := *w.segs.Load()
	at := segs[len(segs)-1].Base() - 3 // inside the segment before the newest
	if err := w.Truncate(at); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if _, err := w.Append(bytes.Repeat([]byte{'n'}, 30)); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for ro.Next() != w.Next() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if ro.Next() != w.Next() {
		t.Errorf("the reader's Next is %d, the writer's %d", ro.Next(), w.Next())
	}
	r, err := ro.Read(at)
	if err == nil {
		if !bytes.Equal(r.Body, bytes.Repeat([]byte{'n'}, 30)) {
			t.Errorf("the reader serves at %d a record the writer cut (%d bytes)", at, len(r.Body))
		}
		r.Release()
	}
}
