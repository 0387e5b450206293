package queue

import (
	"strings"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
)

// Messages beside an owner whose backlog spans more segments than a log
// opened read-only keeps mapped (engine.DefaultMaxMappedSegments): the
// oldest segments are mapped on demand, and some are not mapped when the
// owner deletes their messages and drops them under the walk. Messages
// must go on past them and end, giving every message not deleted.
func TestBrowseManySegmentsDroppedUnderWalk(t *testing.T) {
	clock := newFakeClock()
	dir := t.TempDir()
	q := openTestQueue(t, dir, clock, func(o *Options) { o.CheckpointInterval = time.Hour })
	defer mustCloseQueue(t, q)
	body := strings.Repeat("m", 300)
	for q.log.Stats().Segments < engine.DefaultMaxMappedSegments+12 {
		mustSend(t, q, body)
	}
	end := q.log.Next()
	ms := receiveAll(t, q)
	// The messages of the oldest segments, more of them than a log opened
	// read-only maps beyond the newest: about 26 segments of 140 in a
	// 64-bit process, 10 of 20 in a 32-bit one (which maps 8, not 128).
	deleted := min(300, len(ms)/2)
	if deleted < 100 {
		t.Fatalf("%d messages", len(ms))
	}
	type result struct {
		got map[uint64]int
		err error
	}
	done := make(chan result, 1)
	go func() {
		got := map[uint64]int{}
		first := true
		err := Messages(dir, func(m Stored) bool {
			if m.Err != nil {
				t.Errorf("Messages: damaged entry %d: %v", m.Offset, m.Err)
			}
			got[m.Offset]++
			if first {
				// The owner deletes the oldest messages and drops their
				// segments under the walk.
				first = false
				for _, x := range ms[:deleted] {
					mustDelete(t, q, x.Offset)
				}
				q.ck.mu.Lock()
				err := q.checkpoint()
				q.ck.mu.Unlock()
				if err != nil {
					t.Error(err)
				}
				if q.log.First() <= ms[deleted/2].Offset {
					t.Errorf("the oldest segments were not dropped: first %d", q.log.First())
				}
			}
			return true
		})
		done <- result{got, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		for _, m := range ms[deleted:] {
			if r.got[m.Offset] != 1 {
				t.Errorf("message %d came %d times, want once", m.Offset, r.got[m.Offset])
			}
		}
		for off, n := range r.got {
			if off >= end || n != 1 {
				t.Errorf("message %d came %d times (end %d)", off, n, end)
			}
		}
	case <-time.After(30 * time.Second):
		// The walk is left spinning: nothing stops Messages.
		t.Fatalf("Messages never ended (it spins on a segment dropped before it was mapped)")
	}
}
