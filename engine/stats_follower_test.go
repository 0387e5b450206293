package engine

import (
	"context"
	"testing"
	"time"
)

// A read-only log's LogStats.Reads must never go back when the writer drops
// segments it read from.
func TestStatsFollowerReadsNeverGoBack(t *testing.T) {
	dir := t.TempDir()
	o := Options{SegmentBytes: 64 << 10}
	w := mustOpen(t, dir, o)
	const size = 1000
	n := uint64(0)
	for len(*w.segs.Load()) < 3 {
		if _, err := w.Append(testBody(n, size)); err != nil {
			t.Fatal(err)
		}
		n++
	}
	ro := mustOpenRO(t, dir, o)
	for off := uint64(0); off < 50; off++ {
		checkRead(t, ro, off, size)
	}
	before := ro.Stats().Reads
	if _, err := w.DropBefore((*w.segs.Load())[2].Base()); err != nil {
		t.Fatal(err)
	}
	for len(*w.segs.Load()) < 3 {
		if _, err := w.Append(testBody(n, size)); err != nil {
			t.Fatal(err)
		}
		n++
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	_ = ro.Wait(ctx, n+1000) // a stream's reader: dropped segments are let go
	cancel()
	time.Sleep(1100 * time.Millisecond)
	_ = ro.Next()
	if _, err := ro.Read(0); err == nil {
		t.Log("offset 0 still readable")
	}
	checkRead(t, ro, n-1, size)
	after := ro.Stats().Reads
	t.Logf("Reads %d before the drop, %d after", before, after)
	if after < before {
		t.Fatalf("LogStats.Reads went back from %d to %d", before, after)
	}
}

// The newest view is reopened when the writer outgrows its mapping (a
// follower maps the newest segment at its own SegmentBytes, and this
// writer's are larger): the follower catches up, reads past what it first
// mapped, and every read, before and after the reopening, stays counted.
func TestStatsFollowerReadsCountedAfterOutgrown(t *testing.T) {
	dir := t.TempDir()
	// The writer's segments are far larger than what the test writes, so
	// that it never rolls however far ahead of its records it grew the
	// file before the follower opened.
	w := mustOpen(t, dir, Options{SegmentBytes: 256 << 20})
	const size = 1000
	n := uint64(0)
	for ; n < 1000; n++ {
		if _, err := w.Append(testBody(n, size)); err != nil {
			t.Fatal(err)
		}
	}
	ro := mustOpenRO(t, dir, Options{SegmentBytes: 4 << 20})
	for off := uint64(0); off < 50; off++ {
		checkRead(t, ro, off, size)
	}
	before := ro.Stats().Reads
	if before != 50 {
		t.Fatalf("LogStats.Reads %d after 50 reads", before)
	}
	segs := *ro.segs.Load()
	first := segs[len(segs)-1] // the newest view, as first mapped
	// Past the view's mapping: its segment's size (4 MiB), or the file's
	// size at the open if the writer had already grown it further.
	mapped := first.MappedBytes()
	if mapped == 0 {
		t.Fatal("the newest view is not mapped")
	}
	for ; w.active.End() < mapped+(1<<20); n++ {
		if _, err := w.Append(testBody(n, size)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ro.Wait(ctx, n-1); err != nil {
		t.Fatalf("the follower never saw offset %d: %v (Next %d)", n-1, err, ro.Next())
	}
	for off := n - 50; off < n; off++ {
		checkRead(t, ro, off, size)
	}
	if segs := *ro.segs.Load(); len(segs) != 1 || segs[0] == first {
		t.Fatalf("the follower holds %d segments, the newest view not reopened: the test no longer reaches an outgrown mapping", len(segs))
	}
	if got := ro.Stats().Reads; got != before+50 {
		t.Fatalf("LogStats.Reads %d after %d reads before the reopening and 50 after", got, before)
	}
}
