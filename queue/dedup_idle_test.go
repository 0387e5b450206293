package queue

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestIdleQueueDropsSegmentsOnceDedupExpires: segments the head has left
// but the dedup window holds (their ids must survive a restart) are
// dropped by a checkpoint tick once the window has passed, with no send or
// delete after it: an idle queue gives the disk back.
func TestIdleQueueDropsSegmentsOnceDedupExpires(t *testing.T) {
	clock := newFakeClock()
	q := openEarlyQueue(t, t.TempDir(), clock, func(o *Options) { o.DedupWindow = time.Minute })
	defer mustCloseQueue(t, q)
	body := strings.Repeat("d", 300)
	for i := 0; q.log.Stats().Segments < 6; i++ {
		mustSendWith(t, q, body, SendOptions{DedupID: fmt.Sprint("idle-", i)})
	}
	deleteBelow(t, q, receiveAll(t, q), q.log.Next())
	end := q.log.Next()
	clock.Advance(earlyInterval / 8)
	waitFor(t, "the early checkpoint of the whole head", func() bool { h, _ := q.ck.snapshot(); return h == end })
	waitFor(t, "the held drop point noted", func() bool { _, held := ckFlags(q); return held != 0 })
	if q.log.First() != 0 {
		t.Fatalf("First %d: segments with ids inside the dedup window were dropped", q.log.First())
	}
	// Idle: the clock passes the window, one tick at a time.
	for range int(time.Minute/earlyInterval) + 2 {
		clock.Advance(earlyInterval)
		time.Sleep(time.Millisecond)
	}
	waitFor(t, "the held segments dropped", func() bool { return q.log.Stats().Segments == 1 })
	if f := q.log.First(); f == 0 || f > end {
		t.Fatalf("First %d after the window passed (head %d)", f, end)
	}
}
