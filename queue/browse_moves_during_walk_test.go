package queue

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Messages while the owner moves held messages out of their segments
// during the walk (two delayed ones, a group's front in flight and its
// second waiting, a plain one in flight), drops the segments they left,
// reuses those files as later segments, and discards one of them: each
// message live throughout comes exactly once, with its body and group,
// never as a damaged entry; the discarded one comes once at most; nothing
// else comes. The newest segment Messages opened keeps live messages, so
// the walk follows the log to the copies.

// walkMsg is a live message of the test.
type walkMsg struct {
	body     string
	group    string
	inFlight bool // its Body pins its original's file in the owner
	keeper   bool // not held: never moved
}

func TestBrowseMovedDuringWalkComeOnce(t *testing.T) {
	clock := newFakeClock()
	dir := t.TempDir()
	q := openEarlyQueue(t, dir, clock, func(o *Options) {
		o.Visibility = 10 * time.Hour
		o.MaxHeldSegments = 1
		o.Log.RecycleSegments = 64
	})
	defer mustCloseQueue(t, q)
	filler := strings.Repeat("f", 200)
	live := map[uint64]*walkMsg{}
	send := func(body string, o SendOptions) uint64 {
		off := mustSendWith(t, q, body, o)
		live[off] = &walkMsg{body: body, group: o.Group}
		return off
	}
	// Receives what is ready and deletes the fillers; live messages
	// handed out stay in flight.
	drain := func() {
		t.Helper()
		for _, m := range receiveAll(t, q) {
			if live[m.Offset] == nil {
				mustDelete(t, q, m.Offset)
			}
		}
	}
	send("delayed-0", SendOptions{Delay: 100 * time.Hour})
	sendToNextSegment(t, q, filler)
	front := send("group-front", SendOptions{Group: "g"})
	send("group-second", SendOptions{Group: "g"})
	sendToNextSegment(t, q, filler)
	plain := send("in-flight", SendOptions{})
	sendToNextSegment(t, q, filler)
	doomed := send("discarded-during-walk", SendOptions{Delay: 100 * time.Hour})
	sendToNextSegment(t, q, filler)
	send("delayed-1", SendOptions{Delay: 100 * time.Hour})
	sendToNextSegment(t, q, filler)
	sendToNextSegment(t, q, filler)
	waitKicked(t, q)
	drain() // hands out the group's front and the plain one
	live[front].inFlight = true
	live[plain].inFlight = true
	if n := q.Stats().InFlight; n != 2 {
		t.Fatalf("%d in flight, want 2 (the group's front and the plain one)", n)
	}
	// Keepers fill the active segment: too many live messages for a
	// move, so it stays, and the walk's log keeps following the owner.
	for i := range 8 {
		live[mustSend(t, q, fmt.Sprint("keeper-", i))] = &walkMsg{body: fmt.Sprint("keeper-", i), keeper: true}
	}
	stor := func(key uint64) uint64 {
		q.mu.Lock()
		defer q.mu.Unlock()
		if i, ok := q.es.lookup(key); ok {
			return q.es.e[i].stor
		}
		return key
	}
	held := func(h *walkMsg) bool { return h != nil && !h.keeper }
	// The files of the held messages' records that leave at the move, by
	// inode: reused once dropped. A file that holds the record of a
	// message in flight is left out (its Body pins the file in the
	// owner).
	heldFiles := map[uint64]uint64{} // inode -> base
	files := logFiles(t, dir)
	baseOf := func(at uint64) uint64 {
		var base uint64
		for b := range files {
			if b <= at && b >= base {
				base = b
			}
		}
		return base
	}
	pinned := map[uint64]bool{}
	var top uint64
	for key, h := range live {
		if h.inFlight {
			pinned[baseOf(key)] = true
		}
		if held(h) {
			top = max(top, key)
		}
	}
	for key, h := range live {
		if b := baseOf(key); held(h) && !h.inFlight && !pinned[b] {
			heldFiles[files[b]] = b
		}
	}
	if len(heldFiles) < 2 {
		t.Fatalf("%d held files to reuse: %v", len(heldFiles), files)
	}
	reused := func() bool {
		files := logFiles(t, dir)
		for ino, old := range heldFiles {
			back := false
			for base, i := range files {
				if i == ino && base > old {
					back = true
				}
			}
			if !back {
				return false
			}
		}
		return true
	}

	got := map[uint64]int{}
	var order []string
	first := true
	err := Messages(dir, func(m Stored) bool {
		order = append(order, fmt.Sprintf("%d@%d", m.Offset, m.Record))
		if m.Err != nil {
			t.Errorf("Messages: damaged entry for %d (record %d): %v", m.Offset, m.Record, m.Err)
			return true
		}
		got[m.Offset]++
		h := live[m.Offset]
		switch {
		case h == nil:
			t.Errorf("Messages gave %d (record %d, %q), no live message", m.Offset, m.Record, m.Body)
		case !bytes.Equal(m.Body, []byte(h.body)) || m.Group != h.group:
			t.Errorf("Messages gave %d as %q in group %q, want %q in %q", m.Offset, m.Body, m.Group, h.body, h.group)
		}
		if !first {
			return true
		}
		first = false
		// Under the walk: the held messages move, their segments go,
		// one of them is discarded, and the files they left come back
		// as later segments.
		for deadline := time.Now().Add(20 * time.Second); ; {
			done := q.log.First() > top
			for key, h := range live {
				done = done && (!held(h) || stor(key) > top)
			}
			if done {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the held messages were not all moved: %+v", q.Stats())
			}
			clock.Advance(earlyInterval / 4)
			time.Sleep(100 * time.Microsecond)
		}
		if err := q.Discard(doomed); err != nil {
			t.Fatalf("Discard(%d): %v", doomed, err)
		}
		for deadline := time.Now().Add(20 * time.Second); !reused(); {
			if time.Now().After(deadline) {
				t.Fatalf("the held messages' files were never all reused: %v, now %v", heldFiles, logFiles(t, dir))
			}
			// Nothing deleted, nothing more dropped: the kept files
			// come back one by one. These messages are live too.
			for segs := q.log.Stats().Segments; q.log.Stats().Segments == segs; {
				live[mustSend(t, q, filler)] = &walkMsg{body: filler, keeper: true}
			}
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := q.Stats().Moved; n < 5 {
		t.Fatalf("%d messages moved, want the 5 held ones at least", n)
	}
	for key, h := range live {
		switch {
		case key == doomed:
			if got[key] > 1 {
				t.Errorf("the message discarded during the walk came %d times", got[key])
			}
		case got[key] != 1:
			t.Errorf("message %d (%s) came %d times, want once: %v", key, h.body, got[key], order)
		}
	}
	t.Logf("offset@record: %v; moved %d", order, q.Stats().Moved)
}
