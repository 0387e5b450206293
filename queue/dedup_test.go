package queue

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/pagelog/pagelog/engine"
)

// TestSendWithRememberedDedupIDAfterCloseIsRefused: a send to a closed
// queue gets ErrClosed, whether its DedupID is remembered or not; it
// does not report the first send's offset as if the queue took it.
func TestSendWithRememberedDedupIDAfterCloseIsRefused(t *testing.T) {
	q := openTestQueue(t, t.TempDir(), newFakeClock())
	mustSendWith(t, q, "a", SendOptions{DedupID: "x"})
	mustCloseQueue(t, q)
	for _, id := range []string{"x", "y"} {
		if off, err := q.SendWith([]byte("a"), SendOptions{DedupID: id}); !errors.Is(err, engine.ErrClosed) {
			t.Fatalf("send of id %s after Close: offset %d, %v; want ErrClosed", id, off, err)
		}
	}
}

// TestDeadLettersDedupIDsAreNotRememberedAfterReopen: a dead letter keeps
// its dedup id as an attribute, but the dead-letter queue never took a
// send with it: its window remembers no id before a reopen, nor after one
// (the window rebuilt from the log passes over dead letters), so that a
// send of the id to the dead-letter queue appends, after a reopen as
// before.
func TestDeadLettersDedupIDsAreNotRememberedAfterReopen(t *testing.T) {
	clock := newFakeClock()
	dir := filepath.Join(t.TempDir(), "q")
	opts := func(o *Options) { o.MaxReceives = 1 }
	q := openTestQueue(t, dir, clock, opts)
	mustSendWith(t, q, "a", SendOptions{DedupID: "x"})
	if _, ok := tryRecv(t, q); !ok {
		t.Fatal("nothing received")
	}
	clock.Advance(testVisibility)
	waitFor(t, "the move to the dead letters", func() bool { return q.Stats().DeadLetters == 1 })
	if n := q.DeadLetter().Stats().DedupIDs; n != 0 {
		t.Fatalf("the dead-letter queue remembers %d dedup ids, want 0", n)
	}
	mustCloseQueue(t, q)

	q = openTestQueue(t, dir, clock, opts)
	defer mustCloseQueue(t, q)
	d := q.DeadLetter()
	if n, m := d.Recovery().DedupIDs, d.Stats().DedupIDs; n != 0 || m != 0 {
		t.Fatalf("after a reopen the dead-letter queue remembers %d dedup ids (%d rebuilt), want 0", m, n)
	}
	end := d.Stats().End
	if off := mustSendWith(t, d, "b", SendOptions{DedupID: "x"}); off != end {
		t.Fatalf("after a reopen a send of id x to the dead-letter queue gave offset %d, want a new message at %d", off, end)
	}
}
