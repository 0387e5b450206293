package queue

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/testkit"
)

// sendDrain sends n messages to q, receives them all and returns their
// offsets, lowest first.
func sendDrain(t *testing.T, q *Queue, prefix string, n int) []uint64 {
	t.Helper()
	bodies := make([][]byte, n)
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, "%s-%05d", prefix, i)
	}
	if _, err := q.SendBatch(bodies); err != nil {
		t.Fatal(err)
	}
	got := offsetsOf(drain(t, q))
	if len(got) != n {
		t.Fatalf("handed out %d of %d", len(got), n)
	}
	return got
}

// TestDeleteLogStartedAgainKeepsItsRecords: a queue whose delete log was
// removed whole starts the log again from offset 0. Its
// new records must not be dropped as if they lay below where the old log
// started: a checkpoint taken once the new log has grown past that
// offset removed them, and the deleted messages they named came back at
// the next open with no damage reported.
func TestDeleteLogStartedAgainKeepsItsRecords(t *testing.T) {
	dir, clock := t.TempDir(), newFakeClock()
	opts := func(o *Options) { o.MaxHeldSegments = 1 << 20 } // the message at the head stays where it is
	q := openTestQueue(t, dir, clock, opts)
	if err := q.DeleteBatch(sendDrain(t, q, "old", 3000)); err != nil {
		t.Fatal(err)
	}
	mustCloseQueue(t, q)
	h, err := readHead(dir)
	if err != nil || h.head != 3000 || h.dels.from == 0 {
		t.Fatalf("queue.head after the first run: %+v, %v; want head 3000 and the delete log starting above 0", h, err)
	}
	if err := os.RemoveAll(filepath.Join(dir, deletesDir)); err != nil {
		t.Fatal(err)
	}

	q = openTestQueue(t, dir, clock, opts)
	if rec := q.Recovery(); len(rec.DeleteDamage) != 0 {
		// Every record it held named a message below the head.
		t.Fatalf("the delete log removed after the head passed all its records: damage %q", rec.DeleteDamage)
	}
	// Every message but the first (which keeps the head where it is) is
	// deleted: the new log's records all name messages above the head,
	// and it grows past where queue.head says the old one started.
	got := sendDrain(t, q, "new", 2*int(h.dels.from)+1000)
	if err := q.DeleteBatch(got[1:]); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(filepath.Join(dir, headName))
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second) // a checkpoint
	waitFor(t, "the checkpoint", func() bool {
		b, err := os.ReadFile(filepath.Join(dir, headName))
		return err == nil && string(b) != string(before)
	})
	mustCloseQueue(t, q)

	q = openTestQueue(t, dir, clock, opts)
	defer mustCloseQueue(t, q)
	rec := q.Recovery()
	back := drain(t, q)
	if len(back) != 1 || len(rec.DeleteDamage) != 0 {
		t.Fatalf("reopened: %d messages handed out (want the 1 not deleted), delete damage %q, %d may come back",
			len(back), rec.DeleteDamage, rec.DeletesLost)
	}
}

// TestDeleteLogStartedAgainKeepsItsRecordsAcrossACrash is the same with a
// crash (a copy of the directory taken while the queue runs) before the
// queue wrote queue.head again: the copy's queue.head still holds the old
// log's start, and the reopened queue must not cut the new log there
// either.
func TestDeleteLogStartedAgainKeepsItsRecordsAcrossACrash(t *testing.T) {
	dir, clock := t.TempDir(), newFakeClock()
	opts := func(o *Options) { o.MaxHeldSegments = 1 << 20 } // the message at the head stays where it is
	q := openTestQueue(t, dir, clock, opts)
	if err := q.DeleteBatch(sendDrain(t, q, "old", 3000)); err != nil {
		t.Fatal(err)
	}
	mustCloseQueue(t, q)
	h, err := readHead(dir)
	if err != nil || h.dels.from == 0 {
		t.Fatalf("queue.head after the first run: %+v, %v; want the delete log starting above 0", h, err)
	}
	if err := os.RemoveAll(filepath.Join(dir, deletesDir)); err != nil {
		t.Fatal(err)
	}

	q = openTestQueue(t, dir, clock, opts)
	got := sendDrain(t, q, "new", 2*int(h.dels.from)+1000)
	if err := q.DeleteBatch(got[1:]); err != nil {
		t.Fatal(err)
	}
	crashed := t.TempDir() // no checkpoint ran: the fake clock stands still
	testkit.MustCopyDir(t, dir, crashed, true)
	mustCloseQueue(t, q)

	q = openTestQueue(t, crashed, clock, opts)
	mustCloseQueue(t, q) // its checkpoint drops what it may
	q = openTestQueue(t, crashed, clock, opts)
	defer mustCloseQueue(t, q)
	rec := q.Recovery()
	back := drain(t, q)
	if len(back) != 1 || len(rec.DeleteDamage) != 0 {
		t.Fatalf("reopened: %d messages handed out (want the 1 not deleted), delete damage %q, %d may come back",
			len(back), rec.DeleteDamage, rec.DeletesLost)
	}
}
