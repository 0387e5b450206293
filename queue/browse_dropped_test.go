package queue

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/testkit"
)

// Messages while the owner moves held (delayed) messages out of their segments,
// drops those segments and reuses their files as later segments, under
// the walk: each message still comes exactly once, with its body (the
// ones moved meanwhile at their copies' places), and none comes as a
// damaged entry.
func TestMessagesSegmentsDroppedDuringWalk(t *testing.T) {
	clock := newFakeClock()
	dir := t.TempDir()
	// Every dropped file is kept for reuse, so those of the held
	// messages' segments come back as later segments.
	q := openEarlyQueue(t, dir, clock, func(o *Options) {
		o.Visibility = 10 * time.Hour
		o.MaxHeldSegments = 1
		o.Log.RecycleSegments = 16
	})
	defer mustCloseQueue(t, q)
	filler := strings.Repeat("f", 200)
	want := map[uint64]string{}
	var held []uint64
	for i := range 3 {
		// Delayed: held, and (unlike a message in flight, whose Body
		// pins its segment) its segment's file is reused once dropped.
		body := fmt.Sprint("held-", i)
		off, err := q.SendWith([]byte(body), SendOptions{Delay: 10 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		want[off], held = body, append(held, off)
		sendToNextSegment(t, q, filler)
	}
	sendToNextSegment(t, q, filler)
	waitKicked(t, q)
	drainOthers := func() {
		for _, m := range receiveAll(t, q) {
			if _, ok := want[m.Offset]; !ok {
				mustDelete(t, q, m.Offset)
			}
		}
	}
	drainOthers()
	// The files of the held messages' segments, by inode, with their
	// bases.
	files := logFiles(t, dir)
	heldFiles := map[uint64]uint64{} // inode -> base
	for _, off := range held[1:] {
		var base uint64
		for b := range files {
			if b <= off && b >= base {
				base = b
			}
		}
		heldFiles[files[base]] = base
	}
	reused := func() bool {
		n := 0
		for base, ino := range logFiles(t, dir) {
			if old, ok := heldFiles[ino]; ok && base > old {
				n++
			}
		}
		return n == len(heldFiles)
	}

	got := map[uint64]int{}
	var order []uint64
	moved := false
	err := Messages(dir, func(m Stored) bool {
		if m.Err != nil {
			t.Errorf("Messages: damaged entry for %d (record %d): %v", m.Offset, m.Record, m.Err)
			return true
		}
		if w, ok := want[m.Offset]; ok && string(m.Body) != w {
			t.Errorf("Messages: message %d (record %d): %q, want %q", m.Offset, m.Record, m.Body, w)
		}
		got[m.Offset]++
		if _, ok := want[m.Offset]; ok {
			order = append(order, m.Offset, m.Record)
		}
		if moved {
			return true
		}
		moved = true
		// The owner moves the held messages out and drops their
		// segments; then sends (deleting nothing, so nothing more is
		// dropped) until later segments reuse the dropped files.
		for deadline := time.Now().Add(time.Minute); q.Stats().Moved < 3 || q.log.First() <= held[2]; {
			if time.Now().After(deadline) {
				t.Fatalf("the held messages never moved: %+v", q.Stats())
			}
			clock.Advance(earlyInterval / 4)
			time.Sleep(100 * time.Microsecond)
		}
		for deadline := time.Now().Add(time.Minute); !reused(); {
			if time.Now().After(deadline) {
				t.Fatalf("the held messages' files were never reused: %+v, %v", q.Stats(), logFiles(t, dir))
			}
			sendToNextSegment(t, q, filler)
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	for off := range want {
		if got[off] != 1 {
			t.Errorf("message %d came %d times, want once (offset, record: %v)", off, got[off], order)
		}
	}
	t.Logf("offset, record: %v; moved %d", order, q.Stats().Moved)
}

// logFiles returns the inode of each segment file of dir, by base offset.
func logFiles(t *testing.T, dir string) map[uint64]uint64 {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[uint64]uint64{}
	for _, p := range names {
		base, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(p), ".log"), 10, 64)
		if err != nil {
			continue
		}
		st, err := os.Stat(p)
		if err != nil {
			continue // dropped meanwhile
		}
		files[base] = testkit.Inode(st)
	}
	return files
}
