package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/pagelog/pagelog/engine"
)

// Dead letters. A message received MaxReceives times without being deleted
// is moved when it would be ready again (its deadline passed, Release,
// ChangeVisibility to 0, or found at open with its count used up): its
// body is appended to the dead-letter queue with its group and dedup id,
// origin = its offset here and receives = its count; only once that append
// is synced (under every policy: a message a Sync made durable must not
// be lost to a move the next power failure half undoes) is it deleted
// here. A crash in between leaves it in both queues: it is moved again, a
// duplicate in the dead letters, never a loss. A timer runs the moves, at
// once, not the next Receive; a failed move is tried again after
// moveRetry. Redrive moves dead letters back the same way, the other way
// round, taking only those whose move has ended (see deadMoves).

// moveRetry is how long a failed move waits before it is tried again.
const moveRetry = time.Second

// deadMoves tracks the moves to the dead letters under way, so that
// Redrive takes only dead letters whose move has ended: one taken between
// its append there and its delete here would, after a crash in that
// window, be in three places (the original, the dead letter, the
// redriven copy). Guarded by Queue.mu.
type deadMoves struct {
	// from holds, per move under way, the dead-letter queue's end when it
	// began: its dead letters lie at or above it.
	from []uint64
	// copied, when not nil, runs in a move once its dead letters are
	// durable, before its delete records are written here (tests hold a
	// move in that window with it).
	copied func()
}

// begin notes a move that starts now. Called with q.mu held.
func (m *deadMoves) begin(end uint64) { m.from = append(m.from, end) }

// end forgets the move that began at from. Called with q.mu held.
func (m *deadMoves) end(from uint64) {
	if k := slices.Index(m.from, from); k >= 0 {
		m.from = slices.Delete(m.from, k, k+1)
	}
}

// settled returns the dead-letter offset below which no move is under
// way: end, the dead-letter queue's end now (a move that begins later
// appends above it), or the start of the oldest move under way. Called
// with q.mu held.
func (m *deadMoves) settled(end uint64) uint64 {
	for _, f := range m.from {
		end = min(end, f)
	}
	return end
}

// moveItem is one message to move.
type moveItem struct {
	off  uint64 // the offset the message is known by
	stor uint64 // its record's offset (see entry)
	recv uint32
}

// DeadLetter returns the dead-letter queue, nil when there is none (see
// Options.DeadLetterDir). It is an ordinary Queue: receive, delete and
// inspect its messages; each carries the origin offset and the receive
// count as attributes of its record. It is closed by this queue's Close.
func (q *Queue) DeadLetter() *Queue { return q.dead }

// openDeadLetters opens the dead-letter queue, when there is to be one.
func (q *Queue) openDeadLetters() error {
	dir := q.opts.DeadLetterDir
	if dir == "" {
		dir = DeadLetterPath(q.dir)
		if q.opts.MaxReceives == 0 {
			if ok, _ := IsQueue(dir); !ok {
				return nil
			}
		}
		// The sibling may be a symbolic link: into the queue's
		// directory, or to it, it is refused as a DeadLetterDir is.
		var err error
		if dir, err = checkDeadLetterDir(dir, q.dir); err != nil {
			return err
		}
	}
	o := Options{
		Log:                q.opts.Log,
		Visibility:         q.opts.Visibility,
		CheckpointInterval: q.opts.CheckpointInterval,
		Clock:              q.opts.Clock,
		DedupWindow:        q.opts.DedupWindow,
		MaxHeldSegments:    q.opts.MaxHeldSegments,
	}
	o.Log.FirstOffset = 0
	o.Log.MaxRecordBytes = max(o.Log.MaxRecordBytes, q.log.MaxRecordBytes()) // every body fits
	d, err := open(dir, o, q)
	if err != nil {
		return fmt.Errorf("pagelog: the dead-letter queue in %s: %w", dir, err)
	}
	q.dead = d
	return nil
}

// takeDying takes the messages waiting to be moved: they are moving from
// now on, and the caller runs runMoves with them. Nothing is taken once
// the queue is closed, unless closing (Close's last moves). Called with
// q.mu held.
func (q *Queue) takeDying(closing bool) []moveItem {
	if len(q.dying) == 0 || q.dead == nil || q.closed.Load() && !closing {
		return nil
	}
	var items []moveItem
	for _, off := range q.dying {
		i, ok := q.es.lookup(off)
		if !ok || q.es.e[i].state != stDying {
			continue // deleted meanwhile
		}
		x := &q.es.e[i]
		q.es.unset(i)
		q.es.set(i, stMoving, 0)
		items = append(items, moveItem{x.off, x.stor, x.recv})
	}
	q.dying = q.dying[:0]
	if len(items) == 0 {
		return nil
	}
	q.moves.Add(1)
	return items
}

// runMoves moves items to the dead letters: one append there, then, once
// it is durable, one append of delete records here. Items that could not
// be appended go back to the dying list for a later try.
func (q *Queue) runMoves(items []moveItem) {
	defer q.moves.Done()
	q.mu.Lock()
	from := q.dead.log.Next()
	q.dm.begin(from)
	hook := q.dm.copied
	q.mu.Unlock()
	defer func() {
		q.mu.Lock()
		q.dm.end(from)
		q.mu.Unlock()
	}()
	bodies := make([][]byte, len(items))
	attrs := make([]*engine.Attrs, len(items))
	var recs []engine.Record
	for k, it := range items {
		a := &engine.Attrs{Origin: it.off, HasOrigin: true, Receives: it.recv, HasReceives: true}
		if r, err := q.log.Read(it.stor); err == nil {
			// A damaged record moves with an empty body: its origin says
			// where to look.
			recs = append(recs, r)
			bodies[k] = r.Body
			if ra, err := r.Attrs(); err == nil {
				a.Group, a.Dedup = ra.Group, ra.Dedup
			}
		}
		attrs[k] = a
	}
	first, n, err := q.dead.appendBatch(bodies, attrs)
	if err == nil && n > 0 {
		err = q.dead.durable(first + uint64(n) - 1)
		if err != nil {
			n = 0 // not known durable: deleting here could lose them
		}
	}
	for _, r := range recs {
		r.Release()
	}
	if hook != nil {
		hook()
	}

	q.mu.Lock()
	moved, at, derr := q.endMoves(items, n, func(i int32, _ int64) { q.toDying(i) })
	q.counts.deadLettered += uint64(moved)
	if err == nil {
		err = derr
	}
	now := q.now()
	if err != nil {
		q.counts.moveErr = fmt.Errorf("pagelog: move to the dead letters: %w", err)
		q.retryAt = addSat(now, int64(moveRetry))
	} else {
		q.counts.moveErr = nil
	}
	q.armTimer(now)
	q.mu.Unlock()
	if moved > 0 {
		if err := q.waitDelete(at); err != nil {
			q.mu.Lock()
			q.counts.moveErr = fmt.Errorf("pagelog: move to the dead letters: %w", err)
			q.mu.Unlock()
		}
	}
}

// endMoves ends a move of items: the first k, copied to the other queue,
// are deleted here with one append of delete records (whose last offset
// it returns, and how many it wrote), then leave the queue's state; the
// others, and those whose record could not be written, are handed to back.
// An item deleted meanwhile is left alone. Called with q.mu held.
func (q *Queue) endMoves(items []moveItem, k int, back func(i int32, now int64)) (moved int, at uint64, err error) {
	now := q.now()
	var copied, recs []uint64
	for j, it := range items {
		i, ok := q.es.lookup(it.off)
		if !ok || q.es.e[i].state != stMoving {
			continue // deleted meanwhile
		}
		if j < k {
			copied = append(copied, it.off)
			recs = append(recs, q.es.e[i].stor)
			continue
		}
		q.es.unset(i)
		back(i, now)
	}
	at, n, err := q.appendDeletes(recs)
	for j, off := range copied {
		i, _ := q.es.lookup(off)
		q.es.unset(i)
		if j < n {
			q.finish(i, now)
		} else {
			back(i, now) // no delete record: it stays, and may be copied again
		}
	}
	if serr := q.skipAhead(); err == nil {
		err = serr
	}
	return n, at, err
}

// durable waits until the message at off is synced: under SyncAlways
// AppendBatch did it, under SyncInterval and SyncNone a sync is waited for
// (started, under SyncNone). A move's delete on the other side must never
// outlive, in a power failure, the append it follows: under SyncNone that
// lost messages an earlier Sync had made durable
// (TestQueueRecycledLogRestartAndPowerLoss). Moves are rare: one sync per
// batch of them.
func (q *Queue) durable(off uint64) error {
	return q.log.WaitDurable(context.Background(), off)
}

// Redrive moves up to n dead letters (n <= 0: all) back to this queue as
// new sends, oldest first: each keeps its body and group, starts again at
// 0 receives, and carries origin = its dead-letter offset. Dead letters in
// flight (received from the dead-letter queue and not deleted) are not
// moved, nor those whose move there has not ended (their delete here is
// not written yet), nor those of a group after one of these. It returns how many it
// moved; a crash while it runs may leave a message in both queues, never
// in neither. A queue without a dead-letter queue gets ErrNoDeadLetters.
func (q *Queue) Redrive(n int) (moved int, err error) {
	if q.dead == nil {
		return 0, ErrNoDeadLetters
	}
	q.mu.Lock()
	if q.closed.Load() {
		q.mu.Unlock()
		return 0, engine.ErrClosed
	}
	q.moves.Add(1)
	settled := q.dm.settled(q.dead.log.Next())
	q.mu.Unlock()
	defer q.moves.Done()

	d := q.dead
	items, recs, err := d.takeRedrive(n, settled)
	if len(items) == 0 {
		return 0, err
	}
	bodies := make([][]byte, len(items))
	attrs := make([]*engine.Attrs, len(items))
	for k, r := range recs {
		a := &engine.Attrs{Origin: items[k].off, HasOrigin: true}
		bodies[k] = r.Body
		if ra, err := r.Attrs(); err == nil {
			a.Group = ra.Group
		}
		attrs[k] = a
	}
	first, k, err := q.appendBatch(bodies, attrs)
	if err == nil && k > 0 {
		if err = q.durable(first + uint64(k) - 1); err != nil {
			k = 0
		}
	}
	for _, r := range recs {
		r.Release()
	}
	if ferr := d.finishRedrive(items, k); err == nil {
		err = ferr
	}
	q.mu.Lock()
	q.counts.redriven += uint64(k)
	q.mu.Unlock()
	return k, err
}

// takeRedrive takes up to n dead letters (n <= 0: all) for Redrive,
// oldest first, with their records: every message below settled (see
// deadMoves) not in flight, not delayed and not dying, and in a group only
// those before the first that is not. They are moving from now on. Called
// on the dead-letter queue.
func (q *Queue) takeRedrive(n int, settled uint64) ([]moveItem, []engine.Record, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed.Load() {
		return nil, nil, engine.ErrClosed
	}
	now := q.now()
	q.expire(now)
	for {
		i, r, _, found, err := q.scan(now)
		if err != nil {
			return nil, nil, err
		}
		if found {
			r.Release()
			q.es.set(i, stReady, 0)
			continue
		}
		if q.t.Cursor() >= q.end() {
			break
		}
	}
	idx := make([]int32, 0, len(q.es.byOff))
	for _, i := range q.es.byOff {
		idx = append(idx, i)
	}
	slices.SortFunc(idx, func(a, b int32) int {
		x, y := q.es.e[a].off, q.es.e[b].off
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	})
	blocked := map[int32]bool{} // groups whose line stops here
	var items []moveItem
	var recs []engine.Record
	for _, i := range idx {
		if n > 0 && len(items) == n {
			break
		}
		x := &q.es.e[i]
		ok := (x.state == stReady || x.state == stWaiting) && x.off < settled
		if x.group >= 0 {
			ok = ok && !blocked[x.group]
			if !ok {
				blocked[x.group] = true
			}
		}
		if !ok {
			continue
		}
		r, err := q.log.Read(x.stor)
		if err != nil {
			r = engine.Record{Offset: x.stor} // damaged: moves with an empty body
		}
		q.es.unset(i)
		q.es.set(i, stMoving, 0)
		items = append(items, moveItem{off: x.off, stor: x.stor})
		recs = append(recs, r)
	}
	return items, recs, nil
}

// finishRedrive deletes the first k of items, which are in the source now,
// and puts the others back. Called on the dead-letter queue.
func (q *Queue) finishRedrive(items []moveItem, k int) error {
	q.mu.Lock()
	moved, at, err := q.endMoves(items, k, func(i int32, now int64) {
		if q.es.front(i) {
			q.placeFront(i, now)
		} else {
			q.es.set(i, stWaiting, q.es.e[i].at)
		}
	})
	q.counts.deleted += uint64(moved)
	q.armTimer(q.now())
	q.mu.Unlock()
	if moved > 0 {
		err = errors.Join(err, q.waitDelete(at))
	}
	return err
}
