package queue

import (
	"context"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/testkit"
)

// TestQueueAddressSpaceBounded: a queue retires its dropped segments'
// mappings (a stale body must never crash) and reuses their address ranges,
// so a long run through many segments does not grow the process's mappings.
func TestQueueAddressSpaceBounded(t *testing.T) {
	clock := newFakeClock()
	q, err := Open(t.TempDir(), Options{
		Log:                engine.Options{SegmentBytes: 8 << 10, MaxRecordBytes: 1 << 10},
		Clock:              clock,
		CheckpointInterval: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	body := make([]byte, 512)
	ctx := context.Background()
	cycle := func(n int) {
		for i := 0; i < n; i++ {
			if _, err := q.Send(body); err != nil {
				t.Fatal(err)
			}
			m, err := q.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := q.Delete(m.Offset); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(time.Second) // a checkpoint, then the segments below the head go
	}
	cycle(2000) // warm up: the peak number of live segments
	before := retiredBytes(t)
	first := q.Stats().Head
	for round := 0; round < 10; round++ {
		cycle(2000)
	}
	after := retiredBytes(t)
	segments := (q.Stats().Head - first) * 530 / (8 << 10)
	if segments < 500 {
		t.Fatalf("only about %d segments went by: the test does not exercise retirement", segments)
	}
	if after > before+1<<20 {
		t.Fatalf("retired address ranges grew from %d to %d bytes while about %d segments were dropped", before, after, segments)
	}
}

// retiredBytes sums the anonymous read-only private mappings: retired
// segments (the Go runtime makes none of this kind).
func retiredBytes(t *testing.T) uintptr {
	var n uintptr
	for _, m := range testkit.Maps(t) {
		if m.Perms == "r--p" && m.Path == "" {
			n += m.End - m.Start
		}
	}
	return n
}
