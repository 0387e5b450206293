package queue

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Messages beside an owner that works through its backlog while the walk
// runs: it deletes every message Messages' log held at its open, moves a
// delayed message out of its segment (the copy goes to the end of the
// log), and drops every segment below the copy, the newest one Messages
// had opened included, deleting what it sends meanwhile as it goes; the
// dropped files are reused. The delayed message
// is live throughout: it must come once, at its copy's place (its
// original's file no longer holds it).
func TestBrowseNewestDroppedFollowsCopyPastEnd(t *testing.T) {
	for _, recycle := range []int{0} {
		t.Run(fmt.Sprint("recycle=", recycle), func(t *testing.T) {
			clock := newFakeClock()
			dir := t.TempDir()
			q := openEarlyQueue(t, dir, clock, func(o *Options) {
				o.Visibility = 10 * time.Hour
				o.MaxHeldSegments = 4
				o.Log.RecycleSegments = recycle // 0: the queue's default, one spare file
			})
			defer mustCloseQueue(t, q)
			filler := strings.Repeat("f", 200)
			first := mustSend(t, q, "first")
			held := mustSendWith(t, q, "held", SendOptions{Delay: 100 * time.Hour})
			for range 6 {
				sendToNextSegment(t, q, filler)
			}
			heldFile := logFiles(t, dir)[0] // the inode of held's segment, based at 0
			reused := func() bool {
				for base, ino := range logFiles(t, dir) {
					if ino == heldFile && base > 0 {
						return true
					}
				}
				return false
			}
			// The newest segment at Messages' open.
			var newest uint64
			for base := range logFiles(t, dir) {
				newest = max(newest, base)
			}
			got := map[uint64]int{}
			var order []string
			err := Messages(dir, func(m Stored) bool {
				order = append(order, fmt.Sprintf("%d@%d err=%v", m.Offset, m.Record, m.Err))
				if m.Err != nil {
					t.Errorf("Messages: damaged entry for %d (record %d): %v", m.Offset, m.Record, m.Err)
					return true
				}
				got[m.Offset]++
				if m.Offset == held && string(m.Body) != "held" {
					t.Errorf("Messages gave %d as %q", m.Offset, m.Body)
				}
				if m.Offset != first {
					return true
				}
				// The owner works through its backlog: everything but the
				// delayed message is deleted, the delayed message moves,
				// the segments below its copy go, and their files come
				// back as new segments.
				for _, m := range receiveAll(t, q) {
					mustDelete(t, q, m.Offset)
				}
				step := func() {
					sendToNextSegment(t, q, filler)
					for _, m := range receiveAll(t, q) {
						mustDelete(t, q, m.Offset)
					}
					clock.Advance(earlyInterval / 4)
					time.Sleep(100 * time.Microsecond)
				}
				for deadline := time.Now().Add(20 * time.Second); q.Stats().Moved < 1; step() {
					if time.Now().After(deadline) {
						t.Fatalf("the delayed message never moved: %+v", q.Stats())
					}
				}
				for deadline := time.Now().Add(20 * time.Second); q.log.First() <= newest || !reused(); step() {
					if time.Now().After(deadline) {
						t.Fatalf("the segments below the copy never all went, or the delayed message's file was never reused: %+v, %v", q.Stats(), logFiles(t, dir))
					}
				}
				return true
			})
			if err != nil {
				t.Fatal(err)
			}
			// The steps go on until a file is reused; on a slow machine
			// they may take the copy's own segment to the oldest, and the
			// message moves again. What must hold is below: Messages gives
			// it once, however often it moved.
			if n := q.Stats().Moved; n < 1 {
				t.Fatalf("the delayed message moved %d times, want at least once", n)
			}
			if got[held] != 1 {
				t.Errorf("the delayed message %d, live throughout, came %d times, want once (moved %d; given: %v)",
					held, got[held], q.Stats().Moved, order)
			}
		})
	}
}
