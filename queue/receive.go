package queue

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/pagelog/pagelog/engine"
)

// Receive hands out a message and hides it until its deadline: the ready
// message with the lowest offset (one handed out before whose deadline
// passed, one whose due time came, the next of its group), else the next
// one past the cursor that may be handed out now. When none is ready it
// blocks until one is (a Send, an expiring deadline or due time), the
// queue is closed (ErrClosed) or ctx is done (ctx.Err()). A context that
// is already done returns ctx.Err() at once and hands out nothing.
//
// Each hand-out counts as a receive. With MaxReceives > 0 the receive
// count is written to the receive-count log before the message is handed
// out (under SyncAlways, synced): a message whose receiver crashes is
// counted all the same.
//
// A message whose record fails its checks is handed out like any other,
// with an error wrapping ErrCorrupt and the Message's Offset, Receives and
// Deadline set: delete it to skip it, or it comes back after its deadline.
func (q *Queue) Receive(ctx context.Context) (Message, error) {
	if err := ctx.Err(); err != nil {
		return Message{}, err // a done context changes nothing
	}
	q.inside.Add(1)
	defer q.inside.Add(-1)
	for {
		h, w, err := q.tryReceive(true)
		if err != nil || w == nil {
			return h.m, err
		}
		select {
		case <-w:
		case <-ctx.Done():
			q.cancelWait(w)
			return Message{}, ctx.Err()
		}
	}
}

// TryReceive is Receive without waiting: ok is false, and nothing is
// handed out, when no message is ready now.
func (q *Queue) TryReceive() (m Message, ok bool, err error) {
	h, _, err := q.tryReceive(false)
	return h.m, h.handed, err
}

// tryReceive hands out a message, or, when none is ready and wait is set,
// registers the caller as a waiter and returns the channel that wakes it.
func (q *Queue) tryReceive(wait bool) (handOutcome, chan struct{}, error) {
	for {
		q.mu.Lock()
		if q.closed.Load() {
			q.mu.Unlock()
			return handOutcome{}, nil, engine.ErrClosed
		}
		h, err := q.handOut()
		if err == nil && h.again {
			q.mu.Unlock() // a long scan: let others in, then go on
			continue
		}
		var w chan struct{}
		if err == nil && !h.handed && wait {
			w = q.waiters.add()
		}
		q.mu.Unlock()
		if h.durable {
			// The receive count must be durable before the body is
			// handed out.
			if derr := q.recvs.WaitDurable(context.Background(), h.at); derr != nil {
				err = errors.Join(err, fmt.Errorf("pagelog: receive-count record of %d: %w", h.m.Offset, derr))
			}
		}
		return h, w, err
	}
}

// handOutcome is what handOut did.
type handOutcome struct {
	m       Message
	handed  bool   // m was handed out
	again   bool   // the scan stopped at its limit: call again
	durable bool   // wait until the receive-count record at is synced
	at      uint64 // the receive-count record's offset
}

// scanLimit bounds how many records one handOut passes under the lock.
const scanLimit = 1024

// handOut hands out the next ready message, if any, with its body. Called
// with q.mu held. A message whose record fails its checks is handed out
// too, with the error (see Receive).
func (q *Queue) handOut() (handOutcome, error) {
	var h handOutcome
	now := q.now()
	q.expire(now)
	es := q.es
	var r engine.Record
	var rerr error
	var i int32
	loaded := false // r holds the message's record
	if es.ready.len() > 0 {
		i = es.ready.top()
		es.unset(i)
	} else {
		var found bool
		var err error
		i, r, rerr, found, err = q.scan(now)
		loaded = found && rerr == nil
		if err != nil || !found {
			h.again = err == nil && q.t.Cursor() < q.end()
			q.armTimer(now)
			return h, err
		}
	}
	x := &es.e[i]
	wasHanded := x.handed
	x.handed = true
	if x.recv < math.MaxUint32 {
		x.recv++
	}
	if q.opts.MaxReceives > 0 {
		at, err := q.appendReceive(x.stor, x.recv)
		if err != nil {
			x.recv--
			x.handed = wasHanded
			es.set(i, stReady, 0) // it stays first in line
			r.Release()
			q.armTimer(now)
			return h, err
		}
		h.at, h.durable = at, q.syncEnd
	}
	deadline := addSat(now, int64(q.vis))
	es.set(i, stInFlight, deadline)
	q.counts.received++
	if x.recv > 1 {
		q.counts.redelivered++
	}
	q.armTimer(now)
	h.handed = true
	h.m = Message{
		Offset: x.off, Receives: int(x.recv), Deadline: q.wallTime(deadline), Group: es.groupName(i),
		Receipt: Receipt{Offset: x.off, Delivery: q.delivery(x)},
	}
	if rerr != nil {
		return h, rerr
	}
	if !loaded {
		// The body is read, and its record kept (see entries.pins and
		// pins), under the lock: nothing can delete the
		// message and drop its segment in between.
		var err error
		if r, err = q.log.Read(x.stor); err != nil {
			return h, err
		}
	}
	h.m.Body = r.Body
	if wasHanded {
		x.handSeg, _ = r.Segment()
		q.pins.push(deadline, r)
	} else {
		es.pin(i, r)
	}
	return h, nil
}

// scan moves the cursor forward, registering each message it passes,
// until it finds one that may be handed out now: that one is returned in
// no state, with its record (or the error reading it), for handOut. The
// delayed and waiting ones it passes are put in their states. It stops
// after scanLimit messages, or at the end, with found false.
func (q *Queue) scan(now int64) (i int32, r engine.Record, rerr error, found bool, err error) {
	es := q.es
	for range scanLimit {
		if err := q.skipAhead(); err != nil {
			return 0, r, nil, false, err
		}
		c := q.t.Cursor()
		if c >= q.end() {
			return 0, r, nil, false, nil
		}
		r, rerr = q.log.Read(c)
		var a engine.Attrs
		if rerr == nil {
			if a, rerr = r.Attrs(); rerr != nil {
				r.Release()
				r = engine.Record{}
				rerr = fmt.Errorf("%w: offset %d: %w", engine.ErrCorrupt, c, rerr)
			}
		}
		key := c // the offset the message is known by
		if rerr == nil && a.HasMoved {
			key = a.Moved
		}
		if known, err := q.knownCopy(c, key); known || err != nil {
			r.Release()
			if err != nil {
				return 0, engine.Record{}, nil, false, err
			}
			continue
		}
		if err := q.t.Add(c, math.MaxInt64); err != nil {
			r.Release()
			return 0, engine.Record{}, nil, false, fmt.Errorf("pagelog: queue hand-out of %d: %w", c, err)
		}
		i = es.add(key, q.restored.take(c), a.Group)
		if key != c {
			es.setStor(i, c)
			es.e[i].recv = max(es.e[i].recv, a.Receives)
		}
		if a.HasDue {
			es.e[i].at = q.dueTime(a.Due)
		}
		if rerr != nil {
			return i, engine.Record{}, rerr, true, nil // damaged: handed out as is
		}
		if q.place(i, now) {
			return i, r, nil, true, nil
		}
		r.Release()
	}
	return 0, engine.Record{}, nil, false, nil
}

// place puts entry i, in no state, where it belongs: waiting behind its
// group's front, delayed until its due time (at), dying, or ready. It
// reports true instead of making it ready when i may be handed out now and
// take is set: the caller hands it out.
func (q *Queue) place(i int32, now int64) (take bool) {
	es := q.es
	x := &es.e[i]
	switch {
	case !es.front(i):
		es.set(i, stWaiting, x.at)
	case x.at > now:
		es.set(i, stDelayed, x.at)
	case q.dueToDie(x):
		q.toDying(i)
	default:
		return true
	}
	return false
}

// placeFront places entry i, in no state, after the message before it in
// its group was done: it is ready (and wakes a receiver) unless delayed or
// dying.
func (q *Queue) placeFront(i int32, now int64) {
	if q.place(i, now) {
		q.es.set(i, stReady, 0)
		q.waiters.wake(1)
	}
}

// dueToDie reports whether the message of x is to be moved to the dead
// letters rather than handed out again.
func (q *Queue) dueToDie(x *entry) bool {
	return q.opts.MaxReceives > 0 && q.dead != nil && int64(x.recv) >= int64(q.opts.MaxReceives)
}

// toDying puts entry i, in no state, on the list of moves to the dead
// letters, which a timer runs at once.
func (q *Queue) toDying(i int32) {
	q.es.set(i, stDying, 0)
	q.dying = append(q.dying, q.es.e[i].off)
}

// expire moves the delayed messages whose due time came and the in-flight
// messages whose deadline passed (at or before now) on: to the ready list,
// waking a receiver for each, or to the dead letters. Called with q.mu
// held.
func (q *Queue) expire(now int64) {
	es := q.es
	if next, ok := es.next(); !ok || next > now {
		q.pins.releaseUntil(now)
		return
	}
	due := es.takeDue(now)
	ready := due[:0]
	for _, i := range due {
		if q.dueToDie(&es.e[i]) {
			q.toDying(i)
		} else {
			ready = append(ready, i)
		}
	}
	es.setReady(ready)
	q.waiters.wake(len(ready))
	q.pins.releaseUntil(now)
}

// dueTime turns a due time in Unix milliseconds into the queue's time.
func (q *Queue) dueTime(ms int64) int64 {
	return int64(time.UnixMilli(ms).Sub(q.epoch)) // Sub saturates
}

// skipAhead moves the cursor past the deleted offsets at it (deleted before
// a restart, lost, or discarded ahead of the cursor), so that the head
// follows.
func (q *Queue) skipAhead() error {
	end := q.end()
	for {
		c := q.t.Cursor()
		q.skip.trimFront(c)
		r, ok := q.skip.front()
		if !ok || r.from != c || c >= end {
			return nil
		}
		to := min(r.to, end)
		if err := q.t.Skip(to); err != nil {
			return fmt.Errorf("pagelog: queue skip of [%d, %d): %w", c, to, err)
		}
		q.skip.trimFront(to)
	}
}
