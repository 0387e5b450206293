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

// The newest view is reopened when the writer outgrows its mapping: its
// reads must stay counted.
func TestStatsFollowerReadsCountedAfterOutgrown(t *testing.T) {
	dir := t.TempDir()
	o := Options{SegmentBytes: 64 << 20}
	w := mustOpen(t, dir, o)
	const size = 1000
	n := uint64(0)
	for ; n < 1000; n++ {
		if _, err := w.Append(testBody(n, size)); err != nil {
			t.Fatal(err)
		}
	}
	ro := mustOpenRO(t, dir, o)
	for off := uint64(0); off < 50; off++ {
		checkRead(t, ro, off, size)
	}
	before := ro.Stats().Reads
	for ; n < 8000; n++ {
		if _, err := w.Append(testBody(n, size)); err != nil {
			t.Fatal(err)
		}
	}
	if got := ro.Next(); got != n {
		t.Logf("follower next %d, writer %d", got, n)
	}
	after := ro.Stats().Reads
	t.Logf("Reads %d before, %d after", before, after)
	if after < before {
		t.Fatalf("LogStats.Reads went back from %d to %d", before, after)
	}
}
