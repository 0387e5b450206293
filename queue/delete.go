package queue

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/pagelog/pagelog/engine"
)

// Delete marks the message at offset done: a delete record is appended to
// the delete log, then the message leaves the queue's state (a late delete
// of a message whose deadline passed counts too) and the next message of
// its group may be handed out; under SyncAlways Delete returns once the
// record is synced. A delete whose record cannot be written (a full disk)
// returns the error and changes nothing. Deleting an offset already
// deleted returns nil. An offset not handed out since the queue was
// opened, or beyond the end, gets ErrNotInFlight.
func (q *Queue) Delete(offset uint64) error {
	q.mu.Lock()
	if q.closed.Load() {
		q.mu.Unlock()
		return engine.ErrClosed
	}
	i, ok, err := q.deletable(offset)
	var at, stor uint64
	if ok {
		stor = q.es.e[i].stor
		if at, err = q.appendDelete(stor); err == nil {
			q.es.unset(i)
			q.finish(i, clockUnread)
			q.counts.deleted++
			err = q.skipAhead()
		}
	}
	q.mu.Unlock()
	if err != nil || !ok {
		return err
	}
	return errors.Join(q.waitDelete(at), q.waitCopy(offset, stor))
}

// deletable reports whether the message at off may be deleted: ok with its
// entry when it was handed out since open; neither for an offset deleted
// already; an error wrapping ErrNotInFlight for one never handed out.
// Called with q.mu held.
func (q *Queue) deletable(off uint64) (i int32, ok bool, err error) {
	i, found := q.es.lookup(off)
	if !found {
		if off >= q.t.Cursor() && !q.skipped(off) {
			return 0, false, fmt.Errorf("%w: offset %d (head %d, cursor %d)", ErrNotInFlight, off, q.t.Head(), q.t.Cursor())
		}
		return 0, false, nil // deleted already
	}
	if !q.es.e[i].handed {
		return 0, false, fmt.Errorf("%w: offset %d was not handed out since the queue was opened", ErrNotInFlight, off)
	}
	return i, true, nil
}

// DeleteBatch deletes the messages at offsets as Delete does, with one
// append to the delete log and, under SyncAlways, one sync. It deletes
// every offset it can; the error names each one it could not delete (each
// wrapping ErrNotInFlight, or the delete log's error: those messages stay
// as they were).
func (q *Queue) DeleteBatch(offsets []uint64) error {
	q.mu.Lock()
	if q.closed.Load() {
		q.mu.Unlock()
		return engine.ErrClosed
	}
	var errs []error
	var todo, recs []uint64 // the messages, and their records' offsets
	seen := make(map[uint64]bool, len(offsets))
	for _, off := range offsets {
		if seen[off] {
			continue
		}
		seen[off] = true
		i, ok, err := q.deletable(off)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			todo = append(todo, off)
			recs = append(recs, q.es.e[i].stor)
		}
	}
	at, n, err := q.appendDeletes(recs)
	if err != nil {
		errs = append(errs, err)
	}
	now := q.now() // once for the batch
	// The newest moved copy deleted, for waitCopy.
	var copyOff, copyStor uint64
	for k, off := range todo[:n] {
		if recs[k] != off && recs[k] >= copyStor {
			copyOff, copyStor = off, recs[k]
		}
		i, _ := q.es.lookup(off)
		q.es.unset(i)
		q.finish(i, now)
	}
	q.counts.deleted += uint64(n)
	if err := q.skipAhead(); err != nil {
		errs = append(errs, err)
	}
	q.mu.Unlock()
	if n > 0 {
		if err := q.waitDelete(at); err != nil {
			errs = append(errs, fmt.Errorf("pagelog: delete records of %d messages: %w", n, err))
		}
		if err := q.waitCopy(copyOff, copyStor); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// finish forgets entry i, in no state, whose message is deleted or moved:
// its offset is done, and the next message of its group, if it was
// waiting, is placed (at now; clockUnread reads the clock then, which a
// message without a group never needs). Called with q.mu held.
func (q *Queue) finish(i int32, now int64) {
	q.recordDone(q.es.e[i].stor)
	if next := q.es.drop(i); next >= 0 && q.es.e[next].state == stWaiting {
		q.es.unset(next)
		if now == clockUnread {
			now = q.now()
		}
		q.placeFront(next, now)
	}
}

// clockUnread is finish's now when the caller has not read the clock: a
// read costs about 55 ns, a twelfth of a send, receive and delete.
const clockUnread = math.MinInt64

// recordDone marks the record of a message done: in the in-flight table
// when the cursor has passed it (registered there: never ErrUnknown), else
// (a moved copy ahead of the cursor) in the skip set, which the cursor
// steps over. Called with q.mu held.
func (q *Queue) recordDone(stor uint64) {
	if stor < q.t.Cursor() {
		_, _ = q.t.Done(stor)
		q.noteHead()
		return
	}
	q.skip.add(stor, stor+1)
}

// Discard deletes the message at offset whatever its state in this
// process: in flight, ready again, delayed, waiting in its group, or not
// handed out yet. It is meant for tools (`pagelog queue delete`), which
// run in a process that did not receive the message: the in-flight table
// lives in the receiving process only. Discarding an offset already
// deleted, or the offset of a moved message's copy (no message is known by
// it: see Options.MaxHeldSegments), returns nil; one at or beyond the end
// gets an error wrapping ErrNotFound.
func (q *Queue) Discard(offset uint64) error {
	q.mu.Lock()
	if q.closed.Load() {
		q.mu.Unlock()
		return engine.ErrClosed
	}
	if next := q.log.Next(); offset >= next {
		q.mu.Unlock()
		return fmt.Errorf("%w: offset %d is at or beyond the end %d", engine.ErrNotFound, offset, next)
	}
	i, ok := q.es.lookup(offset)
	if _, copied := q.es.moved[offset]; !ok && copied {
		q.mu.Unlock()
		return nil // the record of a moved message, known by another offset
	}
	if !ok && (offset < q.t.Cursor() || q.skipped(offset)) {
		q.mu.Unlock()
		return nil // deleted already
	}
	rec := offset
	if ok {
		rec = q.es.e[i].stor
	}
	at, err := q.appendDelete(rec)
	if err == nil {
		if ok {
			q.es.unset(i)
			q.finish(i, clockUnread)
		} else {
			q.skip.add(offset, offset+1)
		}
		q.counts.deleted++
		err = q.skipAhead()
	}
	q.mu.Unlock()
	if err != nil {
		return err
	}
	return errors.Join(q.waitDelete(at), q.waitCopy(offset, rec))
}

// appendDeletes appends the delete records of offsets (the offsets of the
// messages' records) with one append and
// returns the last one's offset in the delete log and how many it wrote
// (the first n: an error names the offsets after them). Called with q.mu
// held (or at open), so that records and q.buckets agree.
func (q *Queue) appendDeletes(offsets []uint64) (last uint64, n int, err error) {
	switch len(offsets) {
	case 0:
		return 0, 0, nil
	case 1:
		at, err := q.appendDelete(offsets[0])
		if err != nil {
			return 0, 0, err
		}
		return at, 1, nil
	}
	buf := make([]byte, deleteRecordBytes*len(offsets))
	bodies := make([][]byte, len(offsets))
	for k, off := range offsets {
		b := buf[k*deleteRecordBytes : (k+1)*deleteRecordBytes]
		binary.BigEndian.PutUint64(b, off)
		bodies[k] = b
	}
	first, n, err := q.dels.AppendBatch(bodies, nil)
	for k := range n {
		q.buckets.add(first+uint64(k), offsets[k])
	}
	if err != nil {
		err = fmt.Errorf("pagelog: delete records of %d messages not written (offsets %v): %w", len(offsets)-n, offsets[n:], err)
	}
	if n == 0 {
		return 0, 0, err
	}
	return first + uint64(n) - 1, n, err
}

// waitDelete waits, under SyncAlways, until the delete record at is synced.
func (q *Queue) waitDelete(at uint64) error {
	if !q.syncEnd {
		return nil
	}
	return q.dels.WaitDurable(context.Background(), at)
}

// ChangeVisibility moves the deadline of a message in flight to d from
// now: later or sooner. 0 makes it ready at once (or moves it to the dead
// letters when it has used up MaxReceives, before ChangeVisibility
// returns). A message not in flight (not handed out, deleted, or its
// deadline passed) gets ErrNotInFlight; d outside [0, MaxVisibility]
// gets ErrBadOptions. A later deadline keeps the body valid until then.
// It acts on whichever delivery of the message is current: a receiver
// whose deadline passed could move another's; ChangeVisibilityReceipt
// cannot.
func (q *Queue) ChangeVisibility(offset uint64, d time.Duration) error {
	return q.changeVisibility(offset, nil, d)
}

// changeVisibility is ChangeVisibility, of the delivery r only when r is
// not nil.
func (q *Queue) changeVisibility(offset uint64, r *Receipt, d time.Duration) error {
	if d < 0 || d > MaxVisibility {
		return fmt.Errorf("%w: visibility %v outside [0, %v]", engine.ErrBadOptions, d, MaxVisibility)
	}
	q.mu.Lock()
	if q.closed.Load() {
		q.mu.Unlock()
		return engine.ErrClosed
	}
	now := q.now()
	q.expire(now)
	i, ok := q.es.lookup(offset)
	if ok {
		if err := q.checkReceipt(i, r); err != nil {
			q.mu.Unlock()
			return err
		}
	}
	if !ok || q.es.e[i].state != stInFlight {
		q.mu.Unlock()
		return fmt.Errorf("%w: offset %d", ErrNotInFlight, offset)
	}
	x := &q.es.e[i]
	var batch []moveItem
	if d == 0 {
		q.es.unset(i)
		if q.dueToDie(x) {
			q.toDying(i)
			batch = q.takeDying(false)
		} else {
			q.es.set(i, stReady, 0)
			q.waiters.wake(1)
		}
	} else {
		deadline := addSat(now, int64(d))
		if deadline > x.at && x.pin == 0 {
			// The body stays valid until the new deadline (a first
			// hand-out's is pinned while in flight already): the pin
			// of the segment the body was served from moves on, which
			// may no longer be the one of x.stor (a move since).
			q.pins.extend(x.handSeg, deadline)
		}
		x.at = deadline
		q.es.flight.fix(x.pos)
	}
	q.armTimer(now)
	q.mu.Unlock()
	if batch != nil {
		q.runMoves(batch)
	}
	return nil
}

// Release makes a message in flight ready at once: ChangeVisibility(offset,
// 0), whichever delivery of it is current (see ReleaseReceipt).
func (q *Queue) Release(offset uint64) error {
	return q.ChangeVisibility(offset, 0)
}
