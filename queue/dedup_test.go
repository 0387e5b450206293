package queue

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

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

// TestDedupIDsOfOneHashAreToldApart: ids whose hashes are equal are kept
// apart by the ids in their records: each is sent once, a send again of
// any of them gives its own first offset, concurrent sends of one id
// append once, and all of it holds after a reopen (the window rebuilt
// from the log) and until the window passes. Every id here has one hash.
func TestDedupIDsOfOneHashAreToldApart(t *testing.T) {
	dedupHashForTests = func(string) uint64 { return 42 }
	defer func() { dedupHashForTests = nil }()
	const window = 100 * time.Second
	clock := newFakeClock()
	dir := t.TempDir()
	opts := func(o *Options) { o.DedupWindow = window; o.CheckpointInterval = time.Hour }
	q := openTestQueue(t, dir, clock, opts)
	ids := []string{"a", "b", "c", "d"}
	first := map[string]uint64{}
	for _, id := range ids {
		first[id] = mustSendWith(t, q, "body-"+id, SendOptions{DedupID: id})
	}
	check := func(when string) {
		t.Helper()
		for _, id := range ids {
			if off := mustSendWith(t, q, "again-"+id, SendOptions{DedupID: id}); off != first[id] {
				t.Fatalf("%s: a send again of %q gave offset %d, its first send's is %d", when, id, off, first[id])
			}
		}
		if got := q.Stats().DedupIDs; got != len(ids) {
			t.Fatalf("%s: %d ids remembered, want %d", when, got, len(ids))
		}
	}
	check("first sends")

	// Concurrent first sends of one id append once, beside ids of its hash.
	var wg sync.WaitGroup
	offs := make([]uint64, 16)
	for i := range offs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			off, err := q.SendWith([]byte("e"), SendOptions{DedupID: "e"})
			if err != nil {
				t.Error(err)
			}
			offs[i] = off
		}()
	}
	wg.Wait()
	for _, off := range offs {
		if off != offs[0] {
			t.Fatalf("concurrent sends of one id gave offsets %v", offs)
		}
	}
	first["e"], ids = offs[0], append(ids, "e")
	if end := q.Stats().End; end != first["e"]+1 {
		t.Fatalf("the log ends at %d after 5 ids sent once each", end)
	}
	check("concurrent sends")

	mustCloseQueue(t, q)
	q = openTestQueue(t, dir, clock, opts)
	defer func() { mustCloseQueue(t, q) }()
	check("after a reopen")

	clock.Advance(window + time.Second)
	if got := q.Stats().DedupIDs; got != 0 {
		t.Fatalf("%d ids remembered after the window passed", got)
	}
	if off := mustSendWith(t, q, "late-a", SendOptions{DedupID: "a"}); off == first["a"] {
		t.Fatalf("a send of %q after the window gave its first offset %d", "a", off)
	}
}

// TestSendWithNewDedupIDAllocatesNothing: once the window is full and
// each send expires about one id (the steady state), a send with a new
// DedupID allocates nothing: neither the attribute (the id is not copied)
// nor the window's bookkeeping (the expiry ring is reused in place).
func TestSendWithNewDedupIDAllocatesNothing(t *testing.T) {
	const n, runs = 5000, 20_000
	const step = time.Millisecond
	clock := newFakeClock()
	q := openTestQueue(t, t.TempDir(), clock, func(o *Options) {
		o.Log.SegmentBytes = 16 << 20 // no roll while measured
		o.DedupWindow = n * step
		o.CheckpointInterval = 365 * 24 * time.Hour
	})
	defer mustCloseQueue(t, q)
	ids := make([]string, n+runs+1)
	for i := range ids {
		ids[i] = fmt.Sprint("id-", i)
	}
	body := []byte("body")
	next := 0
	send := func() {
		if _, err := q.SendWith(body, SendOptions{DedupID: ids[next]}); err != nil {
			t.Fatal(err)
		}
		next++
		clock.Advance(step)
	}
	for range 2 * n { // fill the window, then expire through it once
		send()
	}
	if allocs := testing.AllocsPerRun(runs-n, send); allocs != 0 {
		t.Fatalf("a send with a new dedup id allocates %v times", allocs)
	}
	if got := q.Stats().DedupIDs; got < n-1 || got > n+1 {
		t.Fatalf("the window holds %d ids, want %d", got, n)
	}
}
