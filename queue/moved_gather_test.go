package queue

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Three messages held in flight, each in a segment of its own with deleted
// messages around it: each is movable (one live message in a segment of
// about twenty records). Checkpoints that come with no send between them
// move the three into the same segment, the active one; the stream then
// fills that segment and goes past it. The segment holds three live
// messages in about twenty records, more than an eighth: no move takes them
// again, the head stays there, and every segment after it stays, however
// many checkpoints come. MaxHeldSegments 1 promises a short log.
func TestMovedCopiesGatheredStillMove(t *testing.T) {
	const interval = earlyInterval
	clock := newFakeClock()
	q := openHeldQueue(t, t.TempDir(), clock)
	defer mustCloseQueue(t, q)
	body := strings.Repeat("s", 200)
	nextSegment := func() { sendToNextSegment(t, q, body) }
	var held []uint64
	for i := range 3 {
		held = append(held, mustSend(t, q, fmt.Sprint("held-", i)))
		nextSegment()
	}
	nextSegment()
	isHeld := func(off uint64) bool { return off == held[0] || off == held[1] || off == held[2] }
	// Nothing moves before the deletes (every message is live); from
	// them on, a checkpoint they bring forward may move one.
	waitKicked(t, q)
	next := q.log.Next()
	if q.Stats().Moved != 0 {
		t.Fatalf("moved before any delete: %+v", q.Stats())
	}
	for _, m := range receiveAll(t, q) {
		if !isHeld(m.Offset) {
			mustDelete(t, q, m.Offset)
		}
	}

	// No sends: each checkpoint moves the oldest segment's held message to
	// the end of the log, into the active segment.
	deadline := time.Now().Add(time.Minute)
	for q.Stats().Moved < 3 || q.log.Stats().Segments > 1 {
		clock.Advance(interval / 8)
		time.Sleep(100 * time.Microsecond)
		if time.Now().After(deadline) {
			t.Fatalf("the held messages never moved: %+v", q.Stats())
		}
	}
	if got := q.log.Next(); got != next+3 || q.Stats().Moved != 3 {
		t.Fatalf("after the moves: Next %d (was %d), Moved %d; want the three copies alone appended", got, next, q.Stats().Moved)
	}

	// The stream goes on past the segment of the three copies.
	for i := range 400 {
		mustSend(t, q, body)
		if i%4 == 3 {
			for _, m := range receiveAll(t, q) {
				if isHeld(m.Offset) {
					t.Fatalf("held message %d handed out again", m.Offset)
				}
				mustDelete(t, q, m.Offset)
			}
		}
		if i%50 == 49 {
			clock.Advance(interval / 8)
			time.Sleep(time.Millisecond)
		}
	}
	for range 3 {
		nextSegment()
	}
	for _, m := range receiveAll(t, q) {
		mustDelete(t, q, m.Offset)
	}
	// A checkpoint an eighth of the interval at a time, 40 intervals.
	for range 320 {
		if q.log.Stats().Segments <= 4 {
			break
		}
		clock.Advance(interval / 8)
		time.Sleep(time.Millisecond)
	}
	if segs := q.log.Stats().Segments; segs > 4 {
		q.mu.Lock()
		head := q.t.Head()
		q.mu.Unlock()
		b0, b1, _ := q.log.oldestSegment()
		st := q.Stats()
		t.Fatalf("the held messages' copies hold the head at %d in segment [%d, %d) (%d records, %d live): %d segments stay; Moved %d, MoveError %v",
			head, b0, b1, b1-b0, len(held), segs, st.Moved, st.MoveError)
	}
}

// Eighty held messages, each in a segment of its own, move with no send
// between the moves: their eighty copies gather in one segment, more than
// MaxMovedPerSegment. When the head comes to that segment its copies move
// again, at most MaxMovedPerSegment per move, until none is left there and
// the segment goes; every held message comes back when its deadline
// passes, with its body, once.
func TestMovedCopiesOverCapMoveInSeveralMoves(t *testing.T) {
	const interval = earlyInterval
	const nHeld = 80
	clock := newFakeClock()
	dir := t.TempDir()
	q := openEarlyQueue(t, dir, clock, func(o *Options) {
		o.Log.SegmentBytes = 64 << 10
		o.Visibility = 10 * time.Hour
		o.MaxHeldSegments = 1
	})
	defer mustCloseQueue(t, q)
	filler := strings.Repeat("f", 4<<10)
	nextSegment := func() {
		t.Helper()
		for segs := q.log.Stats().Segments; q.log.Stats().Segments == segs; {
			mustSend(t, q, filler)
		}
	}
	held := map[uint64]string{}
	for i := range nHeld {
		body := fmt.Sprint("held-", i)
		held[mustSend(t, q, body)] = body
		nextSegment()
	}
	nextSegment()
	waitKicked(t, q)
	next := q.log.Next()
	if q.Stats().Moved != 0 {
		t.Fatalf("moved before any delete: %+v", q.Stats())
	}
	deleteUnheld := func() {
		t.Helper()
		for _, m := range receiveAll(t, q) {
			if _, ok := held[m.Offset]; ok {
				continue
			}
			mustDelete(t, q, m.Offset)
		}
	}
	deleteUnheld()

	// No sends: one held message moves at each checkpoint, its copy into
	// the active segment.
	for i := 0; q.Stats().Moved < nHeld; i++ {
		if i > 40*nHeld {
			t.Fatalf("the held messages never moved: %+v", q.Stats())
		}
		clock.Advance(interval / 8)
	}
	if got := q.log.Next(); got != next+nHeld || q.Stats().Moved != nHeld {
		t.Fatalf("after the first moves: Next %d (was %d), Moved %d; want the %d copies alone appended", got, next, q.Stats().Moved, nHeld)
	}

	// The stream goes past the segment of the copies, until as many
	// finished records as copies follow it (what makes a segment dense
	// with copies worth moving again).
	for from := q.log.Next(); q.log.Next()-from < nHeld+MaxMovedPerSegment; {
		nextSegment()
		deleteUnheld()
	}
	waitKicked(t, q)

	// No sends again: each checkpoint runs at most one move, and one move
	// copies at most MaxMovedPerSegment messages.
	last := q.Stats().Moved
	for i := 0; q.Stats().Moved < 2*nHeld || q.log.Stats().Segments > 3; i++ {
		if i > 320 {
			b0, b1, _ := q.log.oldestSegment()
			t.Fatalf("the copies' segment [%d, %d) stays: %d segments, %+v", b0, b1, q.log.Stats().Segments, q.Stats())
		}
		clock.Advance(interval / 8)
		moved := q.Stats().Moved
		if moved-last > MaxMovedPerSegment {
			t.Fatalf("one checkpoint moved %d messages, more than %d", moved-last, MaxMovedPerSegment)
		}
		last = moved
	}
	if st := q.Stats(); st.Moved != 2*nHeld || st.MoveError != nil {
		t.Fatalf("after the second moves: %+v, want Moved %d", st, 2*nHeld)
	}

	clock.Advance(11 * time.Hour)
	got := map[uint64]string{}
	for _, m := range receiveAll(t, q) {
		if _, dup := got[m.Offset]; dup {
			t.Fatalf("message %d handed out twice", m.Offset)
		}
		got[m.Offset] = string(m.Body)
	}
	if len(got) != len(held) {
		t.Fatalf("%d messages back after the deadline, want the %d held", len(got), len(held))
	}
	for off, body := range held {
		if got[off] != body {
			t.Fatalf("message %d came back as %q, want %q", off, got[off], body)
		}
	}
}

// waitKicked waits until no move started between checkpoints (by sends)
// runs any more.
func waitKicked(t *testing.T, q *Queue) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); q.mv.kicked.Load(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a move between checkpoints never ended")
		}
	}
}

// openHeldQueue opens a queue for the tests of moves: 4 KiB segments,
// MaxHeldSegments 1, deadlines 10 hours away, checkpoints every
// earlyInterval of clock.
func openHeldQueue(t *testing.T, dir string, clock *fakeClock) *Queue {
	t.Helper()
	return openEarlyQueue(t, dir, clock, func(o *Options) {
		o.Visibility = 10 * time.Hour
		o.MaxHeldSegments = 1
	})
}

// sendToNextSegment sends body until the message log has one more segment.
func sendToNextSegment(t *testing.T, q *Queue, body string) {
	t.Helper()
	for segs := q.log.Stats().Segments; q.log.Stats().Segments == segs; {
		mustSend(t, q, body)
	}
}
