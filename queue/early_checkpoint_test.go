package queue

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// When the head leaves the message log's oldest segment, the next
// checkpoint comes at once (at most eight per CheckpointInterval) and the
// segment is dropped, without waiting for the tick.
func TestCheckpointEarlyWhenHeadLeavesSegment(t *testing.T) {
	const interval = 8 * time.Second
	clock := newFakeClock()
	q := openTestQueue(t, t.TempDir(), clock, func(o *Options) {
		o.Log.SegmentBytes = 64 << 10
		o.CheckpointInterval = interval
	})
	defer mustCloseQueue(t, q)
	body := strings.Repeat("x", 1000)
	var offs []uint64
	for len(offs) < 200 { // three segments and a bit
		offs = append(offs, mustSend(t, q, body))
	}
	take := func(n int) {
		for range n {
			m, ok := tryRecv(t, q)
			if !ok {
				t.Fatal("nothing to receive")
			}
			mustDelete(t, q, m.Offset)
		}
	}
	first := func() uint64 { return q.log.First() }
	if first() != offs[0] {
		t.Fatalf("first %d before any delete, want %d", first(), offs[0])
	}
	// An eighth of the interval since the open checkpoint: the first
	// early one runs at once.
	clock.Advance(interval / 8)
	p, ok := q.log.DropPoint()
	if !ok {
		t.Fatal("one segment only")
	}
	take(int(p - offs[0]))
	waitFor(t, "the head checkpointed and the oldest segment dropped without a tick", func() bool {
		head, _ := q.ck.snapshot()
		return head == p && first() == p
	})

	// The next segment left at once after: the checkpoint waits for the
	// rest of the eighth (it sets its timer, and runs nothing).
	p2, _ := q.log.DropPoint()
	timer, runs := ckTimer(q), ckRuns(q)
	take(int(p2 - p))
	waitFor(t, "the early checkpoint decided", func() bool { return ckTimer(q) != timer })
	if ckRuns(q) != runs || first() != p {
		t.Fatalf("a checkpoint ran (dropped to %d) within an eighth of the interval of the last one", first())
	}
	clock.Advance(interval / 8)
	waitFor(t, "the second segment to be dropped an eighth after", func() bool { return first() == p2 })

	// Deleting inside a segment brings nothing forward (a delete starts
	// an early checkpoint before it returns, if at all), and the clock
	// runs every timer due inside Advance.
	runs = ckRuns(q)
	take(3)
	if early, _ := ckFlags(q); early {
		t.Fatal("deletes inside a segment started an early checkpoint")
	}
	clock.Advance(interval / 4)
	if n := ckRuns(q) - runs; n != 0 {
		t.Fatalf("%d checkpoints ran after deletes inside a segment, a quarter of the interval on", n)
	}
	if head, _ := q.ck.snapshot(); head != p2 {
		t.Fatalf("checkpointed head %d after deletes inside a segment, want %d (the tick's)", head, p2)
	}
}

// jumpClock is a ManualClock that moves on by jump (once) just before the
// next timer is set: an Advance on another goroutine that lands between a
// look at the time and the timer that look worked out.
type jumpClock struct {
	*ManualClock
	jump atomic.Int64
}

func (c *jumpClock) AfterFunc(d time.Duration, f func()) Timer {
	if j := c.jump.Swap(0); j != 0 {
		c.Advance(time.Duration(j)) // no timer is due by then: none runs here
	}
	return c.ManualClock.AfterFunc(d, f)
}

// An early checkpoint put off until an eighth of the interval after the
// last one, whose time comes while its timer is being set, runs then: it
// does not wait for the clock to move on again.
func TestEarlyCheckpointDueWhileItsTimerIsSet(t *testing.T) {
	clock := &jumpClock{ManualClock: newFakeClock()}
	q := openEarlyQueue(t, t.TempDir(), clock.ManualClock, func(o *Options) { o.Clock = clock })
	defer mustCloseQueue(t, q)
	for q.log.Stats().Segments < 3 {
		mustSend(t, q, strings.Repeat("j", 300))
	}
	ms := receiveAll(t, q)
	p, ok := q.log.DropPoint()
	if !ok {
		t.Fatal("one segment only")
	}
	timer := ckTimer(q)
	clock.jump.Store(int64(earlyInterval / 8))
	deleteBelow(t, q, ms, p)
	waitFor(t, "the early checkpoint to run or be put off", func() bool { return ckTimer(q) != timer })
	if clock.jump.Load() != 0 {
		t.Fatal("no timer was set for the early checkpoint")
	}
	if head, _ := q.ck.snapshot(); head != p || q.log.First() != p {
		t.Fatalf("checkpointed head %d, First %d, want %d: the early checkpoint waits for a time that has come", head, q.log.First(), p)
	}
}
