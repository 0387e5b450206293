package queue

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/pagelog/pagelog/engine"
)

// Delete marks the message at offset done: it leaves the queue's state (a
// late delete of a message whose deadline passed counts too), the next
// message of its group may be handed out, and a delete record is appended
// to the delete log; under SyncAlways Delete returns once that record is
// synced. Deleting an offset already deleted returns nil. An offset not
// handed out since the queue was opened, or beyond the end, gets
// ErrNotInFlight.
func (q *Queue) Delete(offset uint64) error {
	q.mu.Lock()
	if q.closed.Load() {
		q.mu.Unlock()
		return engine.ErrClosed
	}
	ok, err := q.deleteOne(offset, q.now())
	var at uint64
	if ok {
		q.counts.deleted++
		at, err = q.appendDelete(offset)
	}
	if serr := q.skipAhead(); err == nil {
		err = serr
	}
	q.mu.Unlock()
	if err != nil || !ok {
		return err
	}
	return q.waitDelete(at)
}

// deleteOne takes the message at off out of the queue's state if it was
// handed out since open: ok says a delete record is to be written. An
// offset deleted already gives neither; one never handed out gives an
// error wrapping ErrNotInFlight. Called with q.mu held.
func (q *Queue) deleteOne(off uint64, now int64) (ok bool, err error) {
	i, found := q.es.lookup(off)
	if !found {
		if off >= q.t.Cursor() && !q.skipped(off) {
			return false, fmt.Errorf("%w: offset %d (head %d, cursor %d)", ErrNotInFlight, off, q.t.Head(), q.t.Cursor())
		}
		return false, nil // deleted already
	}
	if !q.es.e[i].handed {
		return false, fmt.Errorf("%w: offset %d was not handed out since the queue was opened", ErrNotInFlight, off)
	}
	q.es.unset(i)
	q.finish(i, now)
	return true, nil
}

// DeleteBatch deletes the messages at offsets as Delete does, with one
// append to the delete log and, under SyncAlways, one sync. It deletes
// every offset it can; the error names each one it could not delete (each
// wrapping ErrNotInFlight, or the delete log's error).
func (q *Queue) DeleteBatch(offsets []uint64) error {
	q.mu.Lock()
	if q.closed.Load() {
		q.mu.Unlock()
		return engine.ErrClosed
	}
	now := q.now()
	var errs []error
	var done []uint64
	for _, off := range offsets {
		ok, err := q.deleteOne(off, now)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			done = append(done, off)
		}
	}
	q.counts.deleted += uint64(len(done))
	at, wrote, err := q.appendDeletes(done)
	if err != nil {
		errs = append(errs, err)
	}
	if err := q.skipAhead(); err != nil {
		errs = append(errs, err)
	}
	q.mu.Unlock()
	if wrote {
		if err := q.waitDelete(at); err != nil {
			errs = append(errs, fmt.Errorf("pagelog: delete records of %d messages: %w", len(done), err))
		}
	}
	return errors.Join(errs...)
}

// finish forgets entry i, in no state, whose message is deleted or moved:
// its offset is done, and the next message of its group, if it was
// waiting, is placed. Called with q.mu held.
func (q *Queue) finish(i int32, now int64) {
	off := q.es.e[i].off
	_, _ = q.t.Done(off) // registered at the cursor: never ErrUnknown
	if next := q.es.drop(i); next >= 0 && q.es.e[next].state == stWaiting {
		q.es.unset(next)
		q.placeFront(next, now)
	}
}

// Discard deletes the message at offset whatever its state in this
// process: in flight, ready again, delayed, waiting in its group, or not
// handed out yet. It is meant for tools (`pagelog queue delete`), which
// run in a process that did not receive the message: the in-flight table
// lives in the receiving process only. Discarding an offset already
// deleted returns nil; one at or beyond the end gets an error wrapping
// ErrNotFound.
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
	switch {
	case ok:
		q.es.unset(i)
		q.finish(i, q.now())
	case offset < q.t.Cursor() || q.skipped(offset):
		q.mu.Unlock()
		return nil // deleted already
	default:
		q.skip.add(offset, offset+1)
	}
	q.counts.deleted++
	at, wrote, err := q.appendDeletes([]uint64{offset})
	if err == nil {
		err = q.skipAhead()
	}
	q.mu.Unlock()
	if err != nil || !wrote {
		return err
	}
	return q.waitDelete(at)
}

// appendDeletes appends the delete records of offsets with one append and
// returns the last one's offset in the delete log (wrote false when
// offsets is empty). An error names the offsets without a record. Called
// with q.mu held (or at open), so that records and q.buckets agree.
func (q *Queue) appendDeletes(offsets []uint64) (last uint64, wrote bool, err error) {
	if len(offsets) == 0 {
		return 0, false, nil
	}
	if len(offsets) == 1 {
		at, err := q.appendDelete(offsets[0])
		return at, err == nil, err
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
		return 0, false, err
	}
	return first + uint64(n) - 1, true, err
}

// waitDelete waits, under SyncAlways, until the delete record at is synced.
func (q *Queue) waitDelete(at uint64) error {
	if q.opts.Log.Sync != engine.SyncAlways {
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
func (q *Queue) ChangeVisibility(offset uint64, d time.Duration) error {
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
		if deadline > x.at {
			// The body stays valid until the new deadline.
			if r, err := q.log.Read(offset); err == nil {
				q.pins.push(deadline, r)
			}
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

// Release makes a message in flight ready at once: ChangeVisibility(offset, 0).
func (q *Queue) Release(offset uint64) error {
	return q.ChangeVisibility(offset, 0)
}
