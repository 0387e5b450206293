package queue

import (
	"fmt"
	"testing"
	"time"
)

// Hand-outs pin their segments, one pin per segment whatever the number of
// hand-outs from it: a queue that hands out millions of messages per
// Visibility must not keep millions of records (the pins heap grew to one
// entry per hand-out, and one growth of it stalled a receive for seconds in
// BenchmarkQueueSteady). Every body stays valid until its own deadline,
// a later hand-out from the same segment moving that segment's deadline on.
func TestPinsOnePerSegment(t *testing.T) {
	clock := newFakeClock()
	q := openTestQueue(t, t.TempDir(), clock)
	defer q.Close()
	const n = 2000
	for i := range n {
		mustSend(t, q, fmt.Sprintf("message %05d %s", i, "................................"))
	}
	first := drain(t, q)
	if len(first) != n {
		t.Fatalf("received %d of %d", len(first), n)
	}
	segs := map[uint64]bool{}
	q.mu.Lock()
	for _, p := range q.pins.h {
		segs[p.seg] = true
	}
	pinned := len(q.pins.h)
	q.mu.Unlock()
	if pinned == 0 || pinned != len(segs) || pinned > n/10 {
		t.Fatalf("%d pins for %d hand-outs over %d segments: want one per segment", pinned, n, len(segs))
	}
	// Half-way through the deadline, the first half is received again by
	// a second worker (after a release), which moves its segments' pins.
	clock.Advance(testVisibility / 2)
	for _, m := range first[:n/2] {
		if err := q.Release(m.Offset); err != nil {
			t.Fatal(err)
		}
	}
	second := drain(t, q)
	// Every message is deleted (the late deletes of the first worker
	// included): the bodies of both hand-outs stay valid until their
	// own deadlines.
	for _, m := range first {
		_ = q.Delete(m.Offset)
	}
	clock.Advance(time.Second / 4) // a checkpoint: segments below the head dropped
	clock.Advance(testVisibility/2 - time.Second/4 - time.Millisecond)
	for i, m := range first {
		if want := fmt.Sprintf("message %05d", i); string(m.Body[:len(want)]) != want {
			t.Fatalf("first hand-out %d changed within its deadline: %q", i, m.Body)
		}
	}
	clock.Advance(2 * time.Millisecond) // the first deadlines pass
	for i, m := range second {
		if want := fmt.Sprintf("message %05d", i); string(m.Body[:len(want)]) != want {
			t.Fatalf("second hand-out %d changed within its deadline: %q", i, m.Body)
		}
	}
	q.mu.Lock()
	left := len(q.pins.h)
	q.mu.Unlock()
	if left == 0 || left > pinned {
		t.Fatalf("%d pins left after the first deadlines (from %d): the second hand-outs' segments must stay pinned", left, pinned)
	}
	clock.Advance(testVisibility)
	q.mu.Lock()
	left = len(q.pins.h)
	q.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d pins left after every deadline passed", left)
	}
}
