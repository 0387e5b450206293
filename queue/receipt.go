package queue

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// A Receipt names one delivery of a message: one hand-out by Receive or
// TryReceive (Message.Receipt). A message's offset stays the same through
// its redeliveries, so a receiver whose deadline passed could, by offset,
// release or extend the message after it was handed to someone else; by
// receipt it cannot (ReleaseReceipt, ChangeVisibilityReceipt). Compare
// receipts with ==, keep and pass them back as they are; Delivery is
// opaque: it tells the deliveries of one message apart, within one open of
// the queue and across opens (where the receive count may start again).
type Receipt struct {
	Offset   uint64 // the message's offset (Message.Offset)
	Delivery uint64 // which delivery of it
}

// ErrStaleReceipt is returned by ReleaseReceipt and ChangeVisibilityReceipt
// for a receipt whose delivery is no longer the message's current one: the
// message was handed out again since, or the receipt comes from an
// earlier open of the queue. The error wraps ErrNotInFlight too.
var ErrStaleReceipt = errors.New("pagelog: receipt of a delivery that is no longer current")

// openNonce returns the number that tells this open's deliveries from
// those of other opens: random, so that a delivery of one open has the
// number of one of another with a chance of 2^-64.
func openNonce() uint64 { return rand.Uint64() }

// delivery returns the Delivery of the current hand-out of x in this
// open: the open's nonce plus the message's receive count, which grows by
// one at each hand-out (it saturates at 2^32-1, after which the
// deliveries of the message share one number).
func (q *Queue) delivery(x *entry) uint64 {
	return q.nonce + uint64(x.recv)
}

// ReleaseReceipt makes the message of r ready at once, as Release does,
// if r is its current delivery and it is in flight: a receipt whose
// delivery was followed by another gets an error wrapping ErrStaleReceipt
// and changes nothing; a message no longer in flight (deleted, or its
// deadline passed) gets ErrNotInFlight.
func (q *Queue) ReleaseReceipt(r Receipt) error {
	return q.changeVisibility(r.Offset, &r, 0)
}

// ChangeVisibilityReceipt moves the deadline of the message of r to d from
// now, as ChangeVisibility does, if r is its current delivery and it is in
// flight; otherwise it returns the errors of ReleaseReceipt and changes
// nothing.
func (q *Queue) ChangeVisibilityReceipt(r Receipt, d time.Duration) error {
	return q.changeVisibility(r.Offset, &r, d)
}

// DeleteReceipt deletes the message of r: Delete(r.Offset). A stale
// receipt deletes too, as a late Delete by offset does (and as an SQS
// receipt handle does): the work of its delivery is done, so the message
// is not handed out again. The current holder's body stays valid until
// its own deadline, and its Delete then returns nil.
func (q *Queue) DeleteReceipt(r Receipt) error {
	return q.Delete(r.Offset)
}

// checkReceipt returns nil when r names the current delivery of entry i
// (or r is nil: a call by offset), else an error wrapping ErrStaleReceipt
// and ErrNotInFlight. Called with q.mu held.
func (q *Queue) checkReceipt(i int32, r *Receipt) error {
	if r == nil {
		return nil
	}
	x := &q.es.e[i]
	if cur := q.delivery(x); r.Delivery != cur || !x.handed {
		return fmt.Errorf("%w: offset %d, delivery %#x (the message was handed out again since): %w", ErrStaleReceipt, r.Offset, r.Delivery, ErrNotInFlight)
	}
	return nil
}
