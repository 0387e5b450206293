package queue

import (
	"fmt"
	"testing"
	"time"
)

// livePins counts the records pinned for first hand-outs, and the
// segments pinned until a later hand-out's deadline.
func livePins(q *Queue) (first, bySegment int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.es.pins) - len(q.es.freePins), len(q.pins.h)
}

// pinsN messages are sent to a new queue and received once each.
const pinsN = 2000

func pinsQueue(t *testing.T, clock *fakeClock) (*Queue, []Message) {
	t.Helper()
	q := openTestQueue(t, t.TempDir(), clock)
	for i := range pinsN {
		mustSend(t, q, fmt.Sprintf("message %05d ................................", i))
	}
	ms := drain(t, q)
	if len(ms) != pinsN {
		t.Fatalf("received %d of %d", len(ms), pinsN)
	}
	return q, ms
}

// A first hand-out's body is pinned while the message is in flight: its
// receiver's Delete releases it at once, so the segments below the head go
// (and their files are reused) without waiting for Visibility.
func TestPinsFirstHandOutReleasedByDelete(t *testing.T) {
	clock := newFakeClock()
	q, ms := pinsQueue(t, clock)
	defer q.Close()
	if first, seg := livePins(q); first != pinsN || seg != 0 {
		t.Fatalf("after %d first hand-outs: %d first pins, %d segment pins", pinsN, first, seg)
	}
	for _, m := range ms {
		mustDelete(t, q, m.Offset)
	}
	if first, seg := livePins(q); first != 0 || seg != 0 {
		t.Fatalf("after every delete: %d first pins, %d segment pins", first, seg)
	}
	clock.Advance(time.Second) // a checkpoint: segments below the head go
	// (Whether the dropped files are kept for reuse depends on whether
	// the next segment was prepared already: not checked here.)
	if st := q.log.Stats(); st.Segments > 2 {
		t.Fatalf("within the deadline, after every delete: %d segments left", st.Segments)
	}
}

// Later hand-outs pin their segments until their own deadlines, one pin per
// segment whatever the number of hand-outs from it, and a late Delete by an
// earlier receiver does not end them (TestQueueBodiesNeverAnotherQueues
// checks the bodies beside other queues).
func TestPinsRedeliveriesOnePerSegment(t *testing.T) {
	clock := newFakeClock()
	q, first := pinsQueue(t, clock)
	defer q.Close()
	clock.Advance(testVisibility) // every first deadline passes
	if f, _ := livePins(q); f != 0 {
		t.Fatalf("%d first pins left after their deadline", f)
	}
	second := drain(t, q)
	if len(second) != pinsN || second[0].Receives != 2 {
		t.Fatalf("redelivered %d of %d", len(second), pinsN)
	}
	_, segs := livePins(q)
	if segs == 0 || segs > pinsN/10 {
		t.Fatalf("%d segment pins for %d redeliveries", segs, pinsN)
	}
	for _, m := range first {
		mustDelete(t, q, m.Offset) // late deletes of the first receivers
	}
	clock.Advance(time.Second) // a checkpoint: segments below the head dropped
	clock.Advance(testVisibility - time.Second - time.Millisecond)
	for i, m := range second {
		if want := fmt.Sprintf("message %05d", i); string(m.Body[:len(want)]) != want {
			t.Fatalf("redelivered body %d changed within its deadline: %q", i, m.Body)
		}
	}
	clock.Advance(2 * time.Millisecond)
	if f, s := livePins(q); f != 0 || s != 0 {
		t.Fatalf("after every deadline passed: %d first pins, %d segment pins", f, s)
	}
}
