package queue

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/checkpoint"
)

// sideLogQueue builds a closed queue in a new directory: 1000 messages,
// every one received once and all but the first (which keeps the head at
// 0) deleted, so that every record of its delete log and of its
// receive-count log names a message at or above the head (no move takes
// the first message out from under it). With 4 KiB message segments the
// side logs' segments are 4 KiB too: a few hundred records each, several
// segments.
func sideLogQueue(t *testing.T, mod ...func(*Options)) (dir string, clock *fakeClock, opts func(*Options)) {
	t.Helper()
	dir, clock = t.TempDir(), newFakeClock()
	opts = func(o *Options) {
		o.MaxReceives = 100
		// No move: a look at the held segments that the sends start
		// on a goroutine of its own, and that runs only after the deletes
		// (a loaded machine), would move the first message out, and the
		// checkpoint after it would drop the side logs below the new head.
		o.MaxHeldSegments = 1 << 20
		for _, m := range mod {
			m(o)
		}
	}
	q := openTestQueue(t, dir, clock, opts)
	bodies := make([][]byte, 1000)
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, "side-%04d", i)
	}
	if _, err := q.SendBatch(bodies); err != nil {
		t.Fatal(err)
	}
	got := offsetsOf(drain(t, q))
	if len(got) != len(bodies) {
		t.Fatalf("handed out %d of %d", len(got), len(bodies))
	}
	if err := q.DeleteBatch(got[1:]); err != nil {
		t.Fatal(err)
	}
	mustCloseQueue(t, q)
	for _, sub := range []string{deletesDir, receivesDir} {
		if n := len(hSegments(t, filepath.Join(dir, sub))); n < 4 {
			t.Fatalf("%s has %d segments, want at least 4", sub, n)
		}
	}
	return dir, clock, opts
}

// recordsIn returns how many records the segment seg of the log in dir
// holds.
func recordsIn(t *testing.T, dir, seg string) int {
	t.Helper()
	n := 0
	for _, r := range hInspect(t, dir, false) {
		if r.seg == seg {
			n++
		}
	}
	return n
}

// openWithoutSideSegment builds a sideLogQueue, removes the first or a
// middle segment (which) of its side log sub, and returns what Stat says
// of it, then the queue opened, and how many records the segment held.
func openWithoutSideSegment(t *testing.T, sub, which string) (Status, *Queue, int) {
	t.Helper()
	dir, clock, opts := sideLogQueue(t)
	sdir := filepath.Join(dir, sub)
	segs := hSegments(t, sdir)
	seg := segs[0]
	if which == "middle" {
		seg = segs[len(segs)/2]
	}
	lost := recordsIn(t, sdir, seg)
	hRemoveSegment(t, sdir, seg)
	st, err := Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	q := openTestQueue(t, dir, clock, opts)
	t.Cleanup(func() { mustCloseQueue(t, q) })
	return st, q, lost
}

// TestDeleteLogMissingSegmentIsReported removes one segment of the delete
// log, the first or one in the middle, and reopens: the deleted messages
// its records named are handed out again, and Recovery and Stat report it
// as damage, with their number (a missing first segment looks like a drop
// but for queue.head's record of where the log starts; a middle one is
// one report for all its records).
func TestDeleteLogMissingSegmentIsReported(t *testing.T) {
	for _, which := range []string{"first", "middle"} {
		t.Run(which, func(t *testing.T) {
			st, q, lost := openWithoutSideSegment(t, deletesDir, which)
			rec := q.Recovery()
			back := 0
			for _, m := range drain(t, q) {
				if m.Offset != 0 {
					back++
				}
			}
			if back != lost {
				t.Fatalf("%d deleted messages came back; the removed segment held %d records", back, lost)
			}
			if len(rec.DeleteDamage) == 0 || rec.DeletesLost != uint64(lost) {
				t.Errorf("Recovery: delete damage %q, %d deleted messages may come back; want it reported, %d", rec.DeleteDamage, rec.DeletesLost, lost)
			}
			if len(st.DeleteDamage) == 0 || st.DeletesLost != uint64(lost) {
				t.Errorf("Stat: delete damage %q, %d deleted messages may come back; want it reported, %d", st.DeleteDamage, st.DeletesLost, lost)
			}
			if which == "middle" && len(rec.DeleteDamage) != 1 {
				// One report for the whole segment: its count, not the
				// number of reports, says what may come back.
				t.Errorf("Recovery: %d reports of one removed segment, want 1: %q", len(rec.DeleteDamage), rec.DeleteDamage)
			}
		})
	}
}

// TestReceiveLogMissingSegmentIsReported removes one segment of the
// receive-count log and reopens: the counts its records held are gone,
// and Recovery and Stat report it, with the number of hand-outs it may
// add.
func TestReceiveLogMissingSegmentIsReported(t *testing.T) {
	for _, which := range []string{"first", "middle"} {
		t.Run(which, func(t *testing.T) {
			st, q, lost := openWithoutSideSegment(t, receivesDir, which)
			rec := q.Recovery()
			if len(rec.ReceiveDamage) == 0 || rec.ReceivesLost != uint64(lost) {
				t.Errorf("Recovery: receive damage %q, %d hand-outs lost; want it reported, %d", rec.ReceiveDamage, rec.ReceivesLost, lost)
			}
			if len(st.ReceiveDamage) == 0 || st.ReceivesLost != uint64(lost) {
				t.Errorf("Stat: receive damage %q, %d hand-outs lost; want it reported, %d", st.ReceiveDamage, st.ReceivesLost, lost)
			}
		})
	}
}

// TestSideLogDropsAreNotDamage: a queue whose head moves on drops the
// segments of its side logs below it, and a reopen reports no damage.
func TestSideLogDropsAreNotDamage(t *testing.T) {
	dir, clock := t.TempDir(), newFakeClock()
	opts := func(o *Options) { o.MaxReceives = 100 }
	q := openTestQueue(t, dir, clock, opts)
	for round := range 6 {
		for i := range 300 {
			mustSend(t, q, fmt.Sprintf("drop-%d-%03d", round, i))
		}
		var offs []uint64
		for _, m := range drain(t, q) {
			offs = append(offs, m.Offset)
		}
		if err := q.DeleteBatch(offs); err != nil {
			t.Fatal(err)
		}
		clock.Advance(2 * time.Second) // a checkpoint, which drops
		waitFor(t, "the checkpoint", func() bool { return q.Stats().Checkpointed == q.Stats().Head })
	}
	mustCloseQueue(t, q)
	for _, sub := range []string{deletesDir, receivesDir} {
		if first := hSegments(t, filepath.Join(dir, sub))[0]; strings.Trim(first, "0") == ".log" {
			t.Fatalf("%s still starts with its first segment %s: nothing was dropped", sub, first)
		}
	}
	st, err := Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	q = openTestQueue(t, dir, clock, opts)
	defer mustCloseQueue(t, q)
	rec := q.Recovery()
	if len(rec.DeleteDamage)+len(rec.ReceiveDamage) != 0 || rec.DeletesLost+rec.ReceivesLost != 0 {
		t.Errorf("Recovery after drops: %+v", rec)
	}
	if len(st.DeleteDamage)+len(st.ReceiveDamage) != 0 || st.DeletesLost+st.ReceivesLost != 0 {
		t.Errorf("Stat after drops: %+v", st)
	}
}

// TestDeleteLogRemovedWholeIsReported removes the delete log's directory
// of a queue whose records were synced: the log the reopen makes is
// empty, and queue.head's record of how far the log was synced says how
// many records are gone.
func TestDeleteLogRemovedWholeIsReported(t *testing.T) {
	dir, clock, opts := sideLogQueue(t, func(o *Options) { o.Log.Sync = engine.SyncInterval })
	if err := os.RemoveAll(filepath.Join(dir, deletesDir)); err != nil {
		t.Fatal(err)
	}
	q := openTestQueue(t, dir, clock, opts)
	defer mustCloseQueue(t, q)
	rec := q.Recovery()
	if back := len(drain(t, q)) - 1; back != 999 || rec.DeletesLost != 999 || len(rec.DeleteDamage) == 0 {
		t.Errorf("%d deleted messages came back; Recovery says %d may (%q), want 999", back, rec.DeletesLost, rec.DeleteDamage)
	}
}

// TestQueueHeadVersion2StillOpens: a queue.head of version 2 (head and
// end, nothing of the side logs) opens as it did, with no damage, and the
// next checkpoint writes version 3.
func TestQueueHeadVersion2StillOpens(t *testing.T) {
	dir, clock, opts := sideLogQueue(t)
	h, err := readHead(dir)
	if err != nil || !h.sides {
		t.Fatalf("queue.head after Close: %+v, %v", h, err)
	}
	b := make([]byte, headSize2)
	b[0] = headVersion2
	binary.BigEndian.PutUint64(b[1:], h.head)
	binary.BigEndian.PutUint64(b[9:], h.end)
	if err := os.WriteFile(filepath.Join(dir, headName), checkpoint.Seal(b), 0o600); err != nil {
		t.Fatal(err)
	}
	q := openTestQueue(t, dir, clock, opts)
	rec := q.Recovery()
	if rec.HeadFrom != "checkpoint" || rec.Head != h.head || len(rec.DeleteDamage)+len(rec.ReceiveDamage) != 0 {
		t.Errorf("open with a version 2 queue.head: %+v", rec)
	}
	if got := len(drain(t, q)); got != 1 {
		t.Errorf("handed out %d messages, want the 1 not deleted", got)
	}
	mustCloseQueue(t, q)
	if h2, err := readHead(dir); err != nil || !h2.sides || h2.head != h.head || h2.end != h.end {
		t.Errorf("queue.head after the next Close: %+v, %v; want version 3 of %+v", h2, err, h)
	}
}

// TestSideLogRemovedWholeIsReportedUnderEverySyncPolicy removes the
// delete log's or the receive-count log's directory of a queue closed
// cleanly, under each sync policy: the records it held are reported lost,
// with their number. Under SyncNone nothing is ever synced, and under
// SyncInterval the receive-count log may not have been synced yet: a
// queue.head that recorded only how far the logs were synced said
// nothing was, and the 999 deleted messages came back unreported.
func TestSideLogRemovedWholeIsReportedUnderEverySyncPolicy(t *testing.T) {
	for _, policy := range []engine.SyncPolicy{engine.SyncNone, engine.SyncInterval, engine.SyncAlways} {
		for _, sub := range []string{deletesDir, receivesDir} {
			t.Run(fmt.Sprintf("%v/%s", policy, sub), func(t *testing.T) {
				dir, clock, opts := sideLogQueue(t, func(o *Options) {
					o.Log.Sync, o.Log.SyncInterval = policy, time.Hour // the interval syncer stays out of it
				})
				records := len(hInspect(t, filepath.Join(dir, sub), false))
				if err := os.RemoveAll(filepath.Join(dir, sub)); err != nil {
					t.Fatal(err)
				}
				st, err := Stat(dir)
				if err != nil {
					t.Fatal(err)
				}
				q := openTestQueue(t, dir, clock, opts)
				defer mustCloseQueue(t, q)
				rec := q.Recovery()
				back := len(drain(t, q)) - 1
				if sub == deletesDir {
					if back != records || rec.DeletesLost != uint64(records) || st.DeletesLost != uint64(records) || len(rec.DeleteDamage) == 0 || len(st.DeleteDamage) == 0 {
						t.Errorf("%d deleted messages came back; Recovery says %d may (%q), Stat %d (%q); want %d",
							back, rec.DeletesLost, rec.DeleteDamage, st.DeletesLost, st.DeleteDamage, records)
					}
					return
				}
				if rec.ReceivesLost != uint64(records) || st.ReceivesLost != uint64(records) || len(rec.ReceiveDamage) == 0 || len(st.ReceiveDamage) == 0 {
					t.Errorf("Recovery says %d receive counts lost (%q), Stat %d (%q); want %d",
						rec.ReceivesLost, rec.ReceiveDamage, st.ReceivesLost, st.ReceiveDamage, records)
				}
			})
		}
	}
}

// TestSideLogLossIsReportedByTheOpenThatFindsIt: a delete log whose first
// segment is gone is reported by the open that finds it; the checkpoint
// after that records where the log starts now, and the next open and
// Stat find nothing new to report (the messages that came back are not
// deleted, and are handed out as any other).
func TestSideLogLossIsReportedByTheOpenThatFindsIt(t *testing.T) {
	dir, clock, opts := sideLogQueue(t)
	hRemoveSegment(t, filepath.Join(dir, deletesDir), hSegments(t, filepath.Join(dir, deletesDir))[0])
	q := openTestQueue(t, dir, clock, opts)
	rec := q.Recovery()
	back := len(drain(t, q))
	mustCloseQueue(t, q)
	if rec.DeletesLost == 0 || back < 2 {
		t.Fatalf("the first open: %d messages handed out, %d reported lost (%q)", back, rec.DeletesLost, rec.DeleteDamage)
	}
	st, err := Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	q = openTestQueue(t, dir, clock, opts)
	defer mustCloseQueue(t, q)
	rec2 := q.Recovery()
	if len(rec2.DeleteDamage)+len(st.DeleteDamage) != 0 || rec2.DeletesLost+st.DeletesLost != 0 {
		t.Errorf("reported again: Recovery %q (%d), Stat %q (%d)", rec2.DeleteDamage, rec2.DeletesLost, st.DeleteDamage, st.DeletesLost)
	}
	if again := len(drain(t, q)); again != back {
		t.Errorf("the second open handed out %d messages, the first %d: the messages that came back are not deleted", again, back)
	}
}
