package queue

import (
	"context"
	"errors"
	"testing"

	"github.com/pagelog/pagelog/engine"
)

// A view whose map points at another queue's record reads damage, never
// the other queue's body.
func TestStoreViewNeverReadsAnotherQueuesRecord(t *testing.T) {
	s := openTestStore(t, t.TempDir(), StoreOptions{})
	defer s.Close()
	a, b := mustQueue(t, s, "a"), mustQueue(t, s, "b")
	if _, err := a.Send([]byte("mine")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Send([]byte("secret of b")); err != nil {
		t.Fatal(err)
	}
	va, vb := a.st.sq.msgs, b.st.sq.msgs
	pb, err := vb.at(0)
	if err != nil {
		t.Fatal(err)
	}
	va.mu.Lock()
	va.pos.set(0, pb)
	va.mu.Unlock()
	r, err := va.Read(0)
	if !errors.Is(err, engine.ErrCorrupt) || r.Body != nil {
		t.Fatalf("Read of a's offset 0 mapped to b's record = %q, %v; want no body and ErrCorrupt", r.Body, err)
	}
	// The queue hands the damaged message out without a body, with the
	// error, so that it can be deleted.
	m, ok, err := a.TryReceive()
	if !ok || m.Body != nil || !errors.Is(err, engine.ErrCorrupt) {
		t.Fatalf("TryReceive of a = %q, %v, %v; want the damaged message, no body, ErrCorrupt", m.Body, ok, err)
	}
}

// Offsets a view skipped are holes: Gaps reports them, Read finds no
// record, Records reports a run of them once.
func TestStoreViewHolesAreGaps(t *testing.T) {
	s := openTestStore(t, t.TempDir(), StoreOptions{})
	defer s.Close()
	q := mustQueue(t, s, "q")
	v := q.st.sq.msgs
	if _, err := q.Send([]byte("0")); err != nil {
		t.Fatal(err)
	}
	if err := v.SkipTo(5); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Append([]byte("5")); err != nil {
		t.Fatal(err)
	}
	if g := v.Gaps(0); len(g) != 1 || g[0] != [2]uint64{1, 5} {
		t.Fatalf("Gaps = %v, want [[1 5]]", g)
	}
	if _, err := v.Read(3); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("Read of a hole = %v, want ErrNotFound", err)
	}
	var offs []uint64
	var errs int
	for r, err := range v.Records(0) {
		if err != nil {
			errs++
			continue
		}
		offs = append(offs, r.Offset)
	}
	if len(offs) != 2 || offs[0] != 0 || offs[1] != 5 || errs != 1 {
		t.Fatalf("Records: offsets %v and %d errors, want [0 5] and 1", offs, errs)
	}
	if v.Durable() > v.Next() || v.offsetAt(0) != 0 {
		t.Fatalf("Durable %d, offsetAt(0) %d", v.Durable(), v.offsetAt(0))
	}
}

// WaitDurable of an offset the view dropped after its append (the queue's
// head passed it: a checkpoint between a Delete's append and its wait)
// waits for the shared log as the engine's WaitDurable does for a dropped
// record, rather than failing: the record is there, only its position is
// forgotten.
func TestStoreViewWaitDurableOfDroppedOffsetWaitsForTheLog(t *testing.T) {
	s := openTestStore(t, t.TempDir(), StoreOptions{})
	defer s.Close()
	q := mustQueue(t, s, "q")
	v := q.st.sq.dels
	var last uint64
	for i := range 4 {
		var err error
		if last, err = v.Append([]byte{0, 0, 0, 0, 0, 0, 0, byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	p, err := v.at(last)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.DropBefore(last + 1); err != nil {
		t.Fatal(err)
	}
	if err := v.WaitDurable(context.Background(), last); err != nil {
		t.Fatalf("WaitDurable of an offset dropped after its append: %v", err)
	}
	if d := s.dels.l.Durable(); d <= p {
		t.Fatalf("after WaitDurable the shared log is durable to %d, the record is at %d", d, p)
	}
	if err := v.WaitDurable(context.Background(), last+1); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("WaitDurable past the view's end = %v, want ErrNotFound", err)
	}
}

// DropPoint, asked at each delete, keeps its answer while the view's first
// stays: the answer stays what the shared log's segments say as records
// are appended, segments roll, the head moves and holes are filled.
func TestStoreViewDropPointFollowsTheSharedSegments(t *testing.T) {
	s := openTestStore(t, t.TempDir(), StoreOptions{Log: engine.Options{SegmentBytes: 4096}})
	defer s.Close()
	a, b := mustQueue(t, s, "a"), mustQueue(t, s, "b")
	v := a.st.sq.msgs
	check := func(when string) {
		t.Helper()
		p, ok := v.DropPoint()
		_, b1, want := v.oldestSegment()
		if ok != want || ok && p != b1 {
			t.Fatalf("%s: DropPoint = %d, %v; the segments say %d, %v", when, p, ok, b1, want)
		}
	}
	body := make([]byte, 300)
	// a's one record in the oldest segment, b's records past it: holes
	// a skips to take that record's position.
	if _, err := a.Send(body); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if _, err := b.Send(body); err != nil {
			t.Fatal(err)
		}
	}
	check("one record in the oldest segment")
	if err := v.SkipTo(v.Next() + 3); err != nil {
		t.Fatal(err)
	}
	check("after SkipTo past the record")
	for i := range 40 {
		if _, err := a.Send(body); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			if _, err := b.Send(body); err != nil {
				t.Fatal(err)
			}
		}
		check("after a send")
	}
	for off := uint64(1); off < 30; off += 4 {
		if _, err := v.DropBefore(off); err != nil {
			t.Fatal(err)
		}
		check("after DropBefore")
		if _, err := b.Send(body); err != nil {
			t.Fatal(err)
		}
		check("after a send of another queue")
	}
	if err := v.SkipTo(v.Next() + 3); err != nil {
		t.Fatal(err)
	}
	check("after SkipTo")
	if _, err := v.DropBefore(v.Next()); err != nil {
		t.Fatal(err)
	}
	check("with no record")
}
