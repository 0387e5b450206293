package queue

import (
	"errors"
	"testing"
	"time"
)

// wantStale checks that err says the receipt's delivery is stale.
func wantStale(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, ErrStaleReceipt) || !errors.Is(err, ErrNotInFlight) {
		t.Fatalf("%s: %v, want ErrStaleReceipt (and ErrNotInFlight)", what, err)
	}
}

// TestStaleReceiptCannotReleaseOrExtendAnothersDelivery: a receiver whose
// deadline passed holds a receipt that can neither put the message back
// in the queue nor extend it once it was handed to another receiver; the
// current receipt can, until its own delivery ends.
func TestStaleReceiptCannotReleaseOrExtendAnothersDelivery(t *testing.T) {
	clock := newFakeClock()
	q := openTestQueue(t, t.TempDir(), clock)
	defer mustCloseQueue(t, q)
	off := mustSend(t, q, "work")
	a, ok := tryRecv(t, q)
	if !ok || a.Receipt.Offset != off {
		t.Fatalf("first receive: %+v, %v", a, ok)
	}
	clock.Advance(testVisibility) // a's deadline passes
	b, ok := tryRecv(t, q)
	if !ok || b.Offset != off || b.Receives != 2 || b.Receipt == a.Receipt {
		t.Fatalf("second receive: %+v, %v (the first: %+v)", b, ok, a)
	}

	wantStale(t, "release by the first receiver", q.ReleaseReceipt(a.Receipt))
	if m, ok := tryRecv(t, q); ok {
		t.Fatalf("the stale release put the message back: handed out again %+v", m)
	}
	wantStale(t, "extension by the first receiver", q.ChangeVisibilityReceipt(a.Receipt, time.Hour))
	if st := q.Stats(); st.InFlight != 1 {
		t.Fatalf("stats after the stale calls: %+v", st)
	}

	// b's own receipt works: more time, then back in the queue.
	if err := q.ChangeVisibilityReceipt(b.Receipt, time.Hour); err != nil {
		t.Fatalf("extension by the current receiver: %v", err)
	}
	clock.Advance(testVisibility)
	if m, ok := tryRecv(t, q); ok {
		t.Fatalf("handed out inside the extended deadline: %+v", m)
	}
	if err := q.ReleaseReceipt(b.Receipt); err != nil {
		t.Fatalf("release by the current receiver: %v", err)
	}
	if err := q.ReleaseReceipt(b.Receipt); !errors.Is(err, ErrNotInFlight) || errors.Is(err, ErrStaleReceipt) {
		t.Fatalf("second release of the current delivery: %v, want ErrNotInFlight only", err)
	}
	c, ok := tryRecv(t, q)
	if !ok || c.Offset != off || c.Receives != 3 {
		t.Fatalf("third receive: %+v, %v", c, ok)
	}
	wantStale(t, "release by the second receiver", q.ReleaseReceipt(b.Receipt))

	// A stale Delete deletes: the work was done.
	if err := q.DeleteReceipt(a.Receipt); err != nil {
		t.Fatalf("delete by the first receiver: %v", err)
	}
	if err := q.DeleteReceipt(c.Receipt); err != nil {
		t.Fatalf("delete by the current receiver after the stale delete: %v", err)
	}
	if err := q.ReleaseReceipt(c.Receipt); !errors.Is(err, ErrNotInFlight) {
		t.Fatalf("release of a deleted message: %v", err)
	}
	if st := q.Stats(); st.Messages != 0 || st.InFlight != 0 {
		t.Fatalf("stats after the deletes: %+v", st)
	}
}

// TestReceiptOfAnEarlierOpenIsStale: after a reopen the receive count
// starts again (no receive-count log), yet a receipt handed out before the
// reopen does not name the new delivery.
func TestReceiptOfAnEarlierOpenIsStale(t *testing.T) {
	clock := newFakeClock()
	dir := t.TempDir()
	q := openTestQueue(t, dir, clock)
	mustSend(t, q, "work")
	old, ok := tryRecv(t, q)
	if !ok {
		t.Fatal("nothing to receive")
	}
	mustCloseQueue(t, q)

	q = openTestQueue(t, dir, clock)
	defer mustCloseQueue(t, q)
	m, ok := tryRecv(t, q)
	if !ok || m.Offset != old.Offset || m.Receives != old.Receives {
		t.Fatalf("receive after the reopen: %+v, %v (before: %+v)", m, ok, old)
	}
	wantStale(t, "release with the receipt of the earlier open", q.ReleaseReceipt(old.Receipt))
	wantStale(t, "extension with the receipt of the earlier open", q.ChangeVisibilityReceipt(old.Receipt, time.Hour))
	if err := q.ReleaseReceipt(m.Receipt); err != nil {
		t.Fatalf("release with the current receipt: %v", err)
	}
}
