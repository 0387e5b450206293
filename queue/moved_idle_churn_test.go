package queue

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// More held messages than MaxHeldSegments+1 segments can hold: once the
// moves gathered their copies (several segments of nothing but copies),
// moving them again cannot shorten the log, and an idle queue should stop
// copying them. Each look finds the oldest segment dense with copies,
// which no longer count against the limit, and copies them to the end of
// the log: a move and a sync at every checkpoint, for as long as the
// messages are held, once a consumer polling the queue (finding nothing)
// has let the cursor pass the copies.
func TestMovedIdleQueueStopsRecopying(t *testing.T) {
	const nHeld = 200
	clock := newFakeClock()
	q := openEarlyQueue(t, t.TempDir(), clock, func(o *Options) {
		o.Visibility = 10 * time.Hour
		o.MaxHeldSegments = 1
	})
	defer mustCloseQueue(t, q)
	filler := strings.Repeat("f", 300)
	held := map[uint64]string{}
	for i := range nHeld {
		body := fmt.Sprintf("held-%03d-%s", i, strings.Repeat("h", 60))
		held[mustSend(t, q, body)] = body
		for segs := q.log.Stats().Segments; q.log.Stats().Segments == segs; {
			mustSend(t, q, filler)
		}
	}
	for _, m := range receiveAll(t, q) {
		if _, ok := held[m.Offset]; !ok {
			mustDelete(t, q, m.Offset)
		}
	}
	// The held messages move and their copies gather.
	for i := 0; q.Stats().Moved < nHeld || q.log.Stats().Segments > 20; i++ {
		if i > 100*nHeld {
			t.Fatalf("the held messages never moved: %+v", q.Stats())
		}
		clock.Advance(earlyInterval / 8)
		time.Sleep(50 * time.Microsecond)
	}
	for range 80 { // ten intervals: what can settle settles
		clock.Advance(earlyInterval / 8)
		receiveAll(t, q)
		time.Sleep(50 * time.Microsecond)
	}
	waitKicked(t, q)
	before, segs := q.Stats().Moved, q.log.Stats().Segments
	syncs := q.log.Stats().Syncs
	for range 8 * 100 { // a hundred intervals, idle but for a consumer that polls
		clock.Advance(earlyInterval / 8)
		if m, ok := tryRecv(t, q); ok {
			t.Fatalf("message %d (%q) handed out before its deadline", m.Offset, m.Body)
		}
		time.Sleep(50 * time.Microsecond)
	}
	st := q.Stats()
	b0, b1, _ := q.log.oldestSegment()
	t.Logf("idle: Moved %d -> %d, segments %d -> %d, oldest [%d, %d), head %d, next %d", before, st.Moved, segs, st.Log.Segments, b0, b1, st.Head, st.End)
	if st.Moved != before {
		t.Fatalf("an idle queue with %d held messages (%d segments of copies, MaxHeldSegments 1) moved %d copies more in 100 checkpoint intervals (%d before; %d syncs); the log is at %d segments",
			nHeld, segs, st.Moved-before, before, st.Log.Syncs-syncs, st.Log.Segments)
	}

	// Traffic again, every message finished: the copies move again once as
	// many finished records as there are copies follow them, so the log
	// holds the copies' segments, the segments of nHeld fillers, and
	// MaxHeldSegments besides (and the active and prepared ones), and each
	// held message is copied about once per nHeld records sent.
	perSeg := len(filler) // fillers per segment, at most
	sent := 0
	for range 60 {
		n0 := sent
		for n := q.log.Stats().Segments; q.log.Stats().Segments == n; sent++ {
			mustSend(t, q, filler)
		}
		perSeg = min(perSeg, sent-n0)
		bound := segs + (nHeld+perSeg-1)/perSeg + 1 + 3
		for _, m := range receiveAll(t, q) {
			if _, ok := held[m.Offset]; ok {
				t.Fatalf("held message %d handed out before its deadline", m.Offset)
			}
			mustDelete(t, q, m.Offset)
		}
		clock.Advance(earlyInterval / 8)
		waitKicked(t, q)
		if n := q.log.Stats().Segments; n > bound {
			t.Fatalf("with traffic: %d segments, want at most %d (%d of copies, %d fillers a segment, MaxHeldSegments 1); %+v", n, bound, segs, perSeg, q.Stats())
		}
	}
	moved := q.Stats().Moved - before
	t.Logf("traffic: %d sent, %d copies moved again, %d segments", sent, moved, q.log.Stats().Segments)
	if moved == 0 || moved > uint64(nHeld*(sent/nHeld+2)) {
		t.Fatalf("with traffic: %d copies moved again for %d records sent, want between 1 and %d", moved, sent, nHeld*(sent/nHeld+2))
	}
}
