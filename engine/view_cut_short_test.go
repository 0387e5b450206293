package engine

import (
	"os"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/segment"
)

// TestViewCutShortFollowsReopenedWriter: the newest segment file cut short
// by hand below the recovery point log.recovery gives (a power failure),
// after a writer that stopped without closing: the reader's view ends in
// a missing range; it must converge on the writer that opens the log
// again and appends, rolls and cuts.
func TestViewCutShortFollowsReopenedWriter(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 4096, Sync: SyncInterval, SyncInterval: time.Millisecond}
	l := mustOpen(t, dir, opts)
	appendN(t, l, 60, func(uint64) int { return 40 })
	newest := l.active
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for checkpointNext(dir) != l.Next() {
		if time.Now().After(deadline) {
			t.Fatalf("log.recovery says %d, the log reached %d", checkpointNext(dir), l.Next())
		}
		time.Sleep(10 * time.Millisecond)
	}
	end, next := newest.End(), newest.Next()
	crashClose(t, l)
	if next-newest.Base() < 4 {
		t.Fatalf("the newest segment holds %d records", next-newest.Base())
	}
	// Cut in the middle of the third record from the end.
	if err := os.Truncate(segPath(dir, newest.Base(), segment.LogSuffix), end-2*56-30); err != nil {
		t.Fatal(err)
	}
	ro := mustOpenRO(t, dir, Options{SegmentBytes: 4096})
	if ro.Next() != next {
		t.Fatalf("the reader's Next %d, the log reached %d", ro.Next(), next)
	}
	w := mustOpen(t, dir, opts)
	t.Logf("reader: Next %d, notes %q; writer reopened: Next %d, segments %d, active %+v", ro.Next(), ro.Recovery().Notes, w.Next(), len(*w.segs.Load()), w.Recovery().Active)
	followerConvergesOnWriter(t, "writer reopened", w, ro)
	appendN(t, w, 5, func(uint64) int { return 40 })
	followerConvergesOnWriter(t, "appended", w, ro)
	appendN(t, w, 200, func(uint64) int { return 40 })
	followerConvergesOnWriter(t, "rolled", w, ro)
	if err := w.Truncate(w.Next() - 3); err != nil {
		t.Fatal(err)
	}
	appendN(t, w, 2, func(uint64) int { return 40 })
	followerConvergesOnWriter(t, "cut and appended", w, ro)
}
