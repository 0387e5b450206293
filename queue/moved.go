package queue

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync/atomic"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/inflight"
)

// Moves. A message that never finishes (in flight again and again, failing,
// delayed far ahead) holds the head, and the head holds every segment after
// it. When the oldest segment of the message log holds only a few live
// messages (at most MaxMovedPerSegment, and at most an eighth of its
// records, copies of moved messages aside; the cursor past it) and more
// than Options.MaxHeldSegments segments follow it, those messages are
// copied to the end of the log with one append (at most MaxMovedPerSegment
// of them; the rest at the next look; a segment dense with copies only
// once copiesWorthMoving says so): body,
// due, group, dedup id and origin as they were, `moved` = the offset
// consumers know the message by (kept through repeated moves) and
// `receives` = its receive count. Each message's entry keeps its offset
// and points at its copy (entry.stor); the original's offset is done, so
// the head passes the segment, and the next head checkpoint removes it (the
// copies are synced first, whatever the sync policy).
//
// Everything that names a message's record (delete records, receive-count
// records, reads) names the copy: the side logs' records name offsets at
// or above the head, and are removed with it, as for any message. Open
// finds the copies in the log after the head (restoreMoved) and makes
// their entries before the cursor moves, so that they are ordered by the
// offset consumers know, in the ready list and in their groups. A crash
// in the middle of a move leaves the original and the copy, or several
// copies: they are one message (the newest copy is its record, the others
// are done when the cursor reaches them), deleted when any of them is.

// moveCheckEvery is how many sends pass between two looks at the log's
// segment count (besides each head checkpoint).
const moveCheckEvery = 64

// moveState is what the queue keeps about moves. Guarded by Queue.mu but
// for the atomics.
type moveState struct {
	sends    atomic.Uint64 // sends since the last look
	kicked   atomic.Bool   // a look runs on its own goroutine
	unsynced bool          // copies were appended that the next head checkpoint must sync first
	// runs hold every record with the `moved` attribute at or above the
	// head (and maybe some below, until the next checkpoint trims them):
	// the offsets [from, to) of each move's append, ascending. queue.head
	// records them, so that open finds the copies without reading the
	// log from the head (see restoreMoved).
	runs [][2]uint64
	// index is what queue.head said of the runs at open, and indexEnd its
	// end: restoreMoved uses it once.
	index    movedIndex
	indexEnd uint64
	refused  [2]uint64 // the oldest segment's base and the head of the last refused move (1+)
	moved    uint64    // messages moved since open
	// openHead is the head Open started from, before the cursor stepped
	// over the deleted records at it (skipAhead): restoreMoved reads the
	// copies from there. Every offset in [openHead, cursor) is deleted.
	openHead uint64
}

// noteSends counts n sends and, every moveCheckEvery, looks whether the
// log holds more segments than MaxHeldSegments allows, in which case it
// starts a move and checkpoint on a goroutine of its own.
func (q *Queue) noteSends(n int) {
	if q.mv.sends.Add(uint64(n)) < moveCheckEvery {
		return
	}
	q.mv.sends.Store(0)
	if q.log.segments() <= q.opts.MaxHeldSegments+1 || !q.mv.kicked.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer q.mv.kicked.Store(false)
		q.ck.mu.Lock()
		defer q.ck.mu.Unlock()
		if q.ck.stopped {
			return
		}
		if n, _ := q.moveHeld(true); n > 0 {
			_ = q.checkpoint() // reported by Stats; the next tick tries again
		}
	}()
}

// moveHeld moves the live messages out of the oldest segment of the
// message log when the rules above allow it, and returns how many it
// moved. kicked tells a look between checkpoints, which does not repeat a
// look refused at the same oldest segment and head. Called with q.ck.mu
// held.
func (q *Queue) moveHeld(kicked bool) (int, error) {
	if q.log.segments() <= q.opts.MaxHeldSegments+1 {
		return 0, nil
	}
	// A look between checkpoints that was refused for the same oldest
	// segment and head is not repeated (a backlog the queue has not looked
	// at holds the segments too, for as long as it waits).
	q.mu.Lock()
	key := [2]uint64{q.log.First() + 1, q.t.Head() + 1}
	again := kicked && q.mv.refused == key
	q.mu.Unlock()
	if again {
		return 0, nil
	}
	b0, b1, ok := q.log.oldestSegment()
	if !ok {
		return 0, nil
	}
	now := q.now()
	if low, ok := q.dedup.low(now); ok && low < b1 {
		return 0, nil // the dedup window keeps the segment anyway
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed.Load() {
		return 0, nil
	}
	head, cursor := q.t.Head(), q.t.Cursor()
	key = [2]uint64{b0 + 1, head + 1}
	if head >= b1 || cursor < b1 {
		// Nothing holds it (the checkpoint drops it), or the queue has not
		// looked at all of it yet.
		q.mv.refused = key
		return 0, nil
	}
	live, ok := q.liveIn(b0, b1)
	if !ok || len(live) > q.log.moveLimit(b0, b1) && !q.copiesWorthMoving(b1, len(live)) {
		q.mv.refused = key
		return 0, nil
	}
	q.mv.refused = [2]uint64{}
	// One move copies at most MaxMovedPerSegment messages, the lowest
	// records first, so that the queue's lock is never held for a long
	// copy: a segment dense with copies goes over several moves (the head
	// follows each).
	return q.moveOut(live[:min(len(live), MaxMovedPerSegment)])
}

// liveIn returns the entries of the live messages whose records lie in
// [b0, b1), in offset order of their records, ok false when they are too
// many to move or one is being moved to the dead letters. Called with q.mu
// held.
//
// Only messages moved for the first time count against the limit. Copies
// of moved messages were each judged movable once, and moves gather them:
// the copies of moves with no send between them (a slow producer, a
// checkpoint right after a look between checkpoints) land side by side in
// the active segment. Counted, a few of them outnumbered an eighth of a
// small segment's records, no move took that segment again, and the head
// stayed on it with every segment after it, until the messages finished.
func (q *Queue) liveIn(b0, b1 uint64) ([]int32, bool) {
	limit := q.log.moveLimit(b0, b1)
	head := max(q.t.Head(), b0)
	var live []int32
	firsts := 0
	add := func(i int32) bool {
		x := &q.es.e[i]
		if x.state == stDying || x.state == stMoving {
			return false
		}
		live = append(live, i)
		if x.stor == x.off {
			firsts++
		}
		return firsts <= limit
	}
	if uint64(len(q.es.byOff)) < b1-head {
		for _, i := range q.es.byOff {
			if s := q.es.e[i].stor; s >= head && s < b1 && !add(i) {
				return nil, false
			}
		}
		slices.SortFunc(live, func(a, b int32) int { return cmpU64(q.es.e[a].stor, q.es.e[b].stor) })
		return live, true
	}
	for off := head; off < b1; off++ {
		if st := q.t.State(off); st != inflight.StateInFlight && st != inflight.StateReady {
			continue
		}
		i, ok := q.es.moved[off]
		if !ok {
			if i, ok = q.es.lookup(off); !ok {
				continue // registered but without an entry: cannot happen
			}
		}
		if !add(i) {
			return nil, false
		}
	}
	return live, true
}

// moveLimit is the most live messages moved for the first time that the
// segment [b0, b1) may hold for a move to take them.
func moveLimit(b0, b1 uint64) int {
	return max(1, min(MaxMovedPerSegment, int((b1-b0)/8)))
}

// copiesWorthMoving reports whether a move of the oldest segment, whose
// live messages are more than moveLimit because copies of moved messages
// gathered there, is worth its copies: whether at least as many finished
// records follow the segment, up to the cursor, as there are copies in
// the queue. Moving such a segment frees little by itself (its records
// are mostly live); what it is for is the head passing the finished
// records after it once every copy before them has moved. Without the
// rule a queue whose log held little but copies (more held messages than
// MaxHeldSegments segments hold) copied them round and round, a move and
// a sync at every checkpoint; with it the held messages are copied again
// at most once per as many records finished, and the log holds their
// copies, about as many finished records, and MaxHeldSegments segments.
// Called with q.mu held, live the count liveIn found in the segment ending
// at b1.
func (q *Queue) copiesWorthMoving(b1 uint64, live int) bool {
	cursor := q.t.Cursor()
	if cursor < b1 {
		return false
	}
	// Every live message has an entry; those whose records lie at or past
	// the cursor are copies appended since the cursor went by.
	beyond := 0
	for stor := range q.es.moved {
		if stor >= cursor {
			beyond++
		}
	}
	between := int64(len(q.es.byOff) - live - beyond) // live records in [b1, cursor)
	return int64(cursor-b1)-between >= int64(len(q.es.moved))
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// moveOut copies the messages of live to the end of the log with one
// append, makes each copy its message's record and, once the copies are
// durable, marks the originals done. A record that cannot be read is not
// moved (nor are the others: the segment stays). Called with q.mu held,
// which it lets go while it waits for the copies' sync (under SyncAlways
// that wait, under the lock, held every receiver and deleter for an
// fsync per move): the append and the switch of each message's record to
// its copy happen under the lock, so that a delete or a receive count
// names the copy from then on; the originals are marked done only after
// the sync, so that the head, and a checkpoint, pass them only then. A
// Delete of a moved message waits for its copy's sync too (waitCopy).
// Moves do not overlap: each runs with q.ck.mu held.
func (q *Queue) moveOut(live []int32) (int, error) {
	if len(live) == 0 {
		return 0, nil
	}
	bodies := make([][]byte, len(live))
	attrs := make([]*engine.Attrs, len(live))
	recs := make([]engine.Record, 0, len(live))
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	for k, i := range live {
		x := &q.es.e[i]
		r, err := q.log.Read(x.stor)
		if err != nil {
			return 0, fmt.Errorf("pagelog: move of message %d (record %d): %w", x.off, x.stor, err)
		}
		recs = append(recs, r)
		ra, err := r.Attrs()
		if err != nil {
			return 0, fmt.Errorf("pagelog: move of message %d (record %d): %w", x.off, x.stor, err)
		}
		bodies[k] = r.Body
		attrs[k] = &engine.Attrs{
			Due: ra.Due, HasDue: ra.HasDue, Group: ra.Group, Dedup: ra.Dedup,
			Origin: ra.Origin, HasOrigin: ra.HasOrigin,
			Receives: x.recv, HasReceives: true,
			Moved: x.off, HasMoved: true,
		}
	}
	first, n, err := q.log.appendBatchNoWait(bodies, attrs)
	olds := make([]uint64, n)
	for k := range n {
		i := live[k]
		olds[k] = q.es.e[i].stor
		q.es.setStor(i, first+uint64(k))
	}
	if n > 0 {
		q.mv.unsynced = true
		q.mv.moved += uint64(n)
		q.mv.addRun(first, first+uint64(n))
	}
	if err != nil {
		err = fmt.Errorf("pagelog: move of %d messages: %d copied: %w", len(live), n, err)
	}
	if n == 0 {
		return 0, err
	}
	q.mu.Unlock()
	werr := q.log.WaitDurable(context.Background(), first+uint64(n)-1)
	q.mu.Lock()
	if werr != nil {
		// The originals stay: the head does not pass them, and the next
		// checkpoint's syncMoved reports the failure.
		return n, errors.Join(err, fmt.Errorf("pagelog: sync of %d moved messages: %w", n, werr))
	}
	q.mv.unsynced = false
	for _, old := range olds {
		_, _ = q.t.Done(old) // below the cursor: registered
	}
	return n, err
}

// waitCopy waits, under SyncAlways, until the record stor of the message
// known by off is durable. A move makes a message's copy its record
// before the copy is synced (see moveOut): a delete that names the copy
// must not return before it is durable, or a power failure could take the
// copy and bring the original back, not deleted.
func (q *Queue) waitCopy(off, stor uint64) error {
	if !q.syncEnd || stor == off || stor < q.log.Durable() {
		return nil
	}
	if err := q.log.WaitDurable(context.Background(), stor); err != nil {
		return fmt.Errorf("pagelog: sync of moved message %d (record %d): %w", off, stor, err)
	}
	return nil
}

// syncMoved makes the copies of the moves since the last head checkpoint
// durable, before a checkpoint lets the head pass their originals.
// Called with q.ck.mu held.
func (q *Queue) syncMoved() error {
	q.mu.Lock()
	unsynced := q.mv.unsynced
	q.mu.Unlock()
	if !unsynced {
		return nil
	}
	if err := q.log.Sync(); err != nil {
		return fmt.Errorf("pagelog: sync of moved messages: %w", err)
	}
	q.mu.Lock()
	q.mv.unsynced = false
	q.mu.Unlock()
	return nil
}

// addRun notes that the records [from, to) may carry the `moved`
// attribute. Called with q.mu held (or at open), in offset order.
func (m *moveState) addRun(from, to uint64) {
	if k := len(m.runs) - 1; k >= 0 && m.runs[k][1] == from {
		m.runs[k][1] = to
		return
	}
	m.runs = append(m.runs, [2]uint64{from, to})
}

// trimRuns forgets the runs below head and returns a copy of the others,
// cut at head, for queue.head. Called with q.mu held.
func (m *moveState) trimRuns(head uint64) [][2]uint64 {
	k := 0
	for k < len(m.runs) && m.runs[k][1] <= head {
		k++
	}
	m.runs = append(m.runs[:0], m.runs[k:]...)
	if len(m.runs) > 0 {
		m.runs[0][0] = max(m.runs[0][0], head)
	}
	return slices.Clone(m.runs)
}

// movedCopy is a moved record found at open.
type movedCopy struct {
	key    uint64 // the offset consumers know the message by
	stor   uint64 // the copy's offset
	recv   uint32
	due    int64
	group  []byte
	hasDue bool
}

// restoreMoved finds the moved copies in the log from the head on and
// makes their messages' entries, in the order of the offsets consumers
// know, so that they are handed out in that order, before and in their
// groups. A message of which a copy, or the original, is deleted is
// deleted (every copy of it joins the skip set). Called at open.
//
// From the head Open started at, not the cursor: the cursor has already
// stepped over the deleted records at the head (skipAhead, which forgets
// them), and an older copy among them, or the original, whose delete names
// it must still delete its message, as Messages and Stat, which read from
// the head, have it.
//
// With an index of the copies in queue.head (see movedIndex) it reads the
// records the index names below queue.head's end, and the log from that
// end on (what came after the last checkpoint); without one, or when a
// record it names is not a moved copy, the whole log from the head on.
// Recovery.MovedFrom tells which.
func (q *Queue) restoreMoved() error {
	from, cursor := q.mv.openHead, q.t.Cursor()
	deleted := deletedPast(q.skip, from, cursor)
	byKey := map[uint64][]movedCopy{}
	q.mv.runs = nil
	found := func(r engine.Record) bool {
		a, err := r.Attrs()
		if err != nil || !a.HasMoved {
			return false
		}
		byKey[a.Moved] = append(byKey[a.Moved], movedCopy{
			key: a.Moved, stor: r.Offset, recv: a.Receives,
			due: a.Due, hasDue: a.HasDue, group: slices.Clone(a.Group),
		})
		q.mv.addRun(r.Offset, r.Offset+1)
		return true
	}
	idx, end := q.mv.index, q.mv.indexEnd
	q.mv.index = movedIndex{}
	scanFrom := from
	why := idx.why
	if why == "" {
		why = "no index in queue.head"
	}
	q.recovery.MovedFrom = "log (" + why + ")"
	if idx.ok {
		if why := q.readIndexed(idx.runs, from, end, found); why == "" {
			scanFrom = max(from, end)
			q.recovery.MovedFrom = "queue.head index"
		} else {
			clear(byKey)
			q.mv.runs = nil
			q.recovery.MovedFrom = "log (index disagrees with the log: " + why + ")"
		}
	}
	for r, err := range q.log.RecordsWithAttrs(scanFrom) {
		if err != nil {
			continue // damaged: the cursor hands it out as such
		}
		found(r)
	}
	if len(byKey) == 0 {
		return nil
	}
	keys := make([]uint64, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	now := q.now()
	for _, key := range keys {
		copies := byKey[key]
		gone := key >= from && deleted(key)
		for _, c := range copies {
			gone = gone || deleted(c.stor)
		}
		if gone {
			for _, c := range copies {
				q.skip.add(c.stor, c.stor+1)
			}
			if key >= from {
				q.skip.add(key, key+1)
			}
			continue
		}
		newest := copies[len(copies)-1]
		// The older copies, and the original when the log still holds it
		// (a crash in the middle of a move), are done: the cursor steps
		// over them.
		for _, c := range copies[:len(copies)-1] {
			q.skip.add(c.stor, c.stor+1)
		}
		if key >= from {
			q.skip.add(key, key+1)
		}
		recv := q.restored.peek(key)
		for _, c := range copies {
			recv = max(recv, c.recv, q.restored.peek(c.stor))
		}
		if _, ok := q.es.lookup(key); ok {
			return fmt.Errorf("%w: message %d found twice", engine.ErrCorrupt, key) // cannot happen: keys are distinct
		}
		i := q.es.add(key, recv, newest.group)
		q.es.setStor(i, newest.stor)
		if newest.hasDue {
			q.es.e[i].at = q.dueTime(newest.due)
		}
		if q.es.front(i) {
			q.placeFront(i, now)
		} else {
			q.es.set(i, stWaiting, q.es.e[i].at)
		}
	}
	q.armTimer(now)
	return nil
}

// readIndexed reads the records in runs between from and end and hands
// each one to found, which reports whether it is a moved copy. It returns
// "" when every record it could read is one (a damaged or missing one is
// stepped over, as the cursor does), else why the index is not to be
// trusted. Called at open.
func (q *Queue) readIndexed(runs [][2]uint64, from, end uint64, found func(engine.Record) bool) string {
	for _, run := range runs {
		if run[1] > end {
			return fmt.Sprintf("run [%d, %d) past the end %d", run[0], run[1], end)
		}
		// A walk, not a read per offset: a range the log holds no record
		// of (lost, or named by a damaged file whose checksums hold) is
		// one step, however many offsets it spans.
		for r, err := range q.log.Records(max(run[0], from)) {
			if r.Offset >= run[1] {
				break
			}
			if err != nil {
				continue // damaged, or lost: the cursor meets it as such
			}
			if !found(r) {
				return fmt.Sprintf("record %d is not a moved copy", r.Offset)
			}
		}
	}
	return ""
}

// knownCopy handles a record at the cursor c whose message has an entry
// already (key: its moved attribute, else c): the moved copy that is its
// record, registered live, or a stale one, registered done (restoreMoved
// puts the stale ones it finds in the skip set, and a move leaves none
// ahead of the cursor: this is a safeguard). Called with q.mu held, by
// scan.
func (q *Queue) knownCopy(c, key uint64) (known bool, err error) {
	i, ok := q.es.lookup(key)
	if !ok {
		return false, nil
	}
	if err := q.t.Add(c, math.MaxInt64); err != nil {
		return true, fmt.Errorf("pagelog: queue hand-out of %d: %w", c, err)
	}
	if q.es.e[i].stor != c {
		_, _ = q.t.Done(c)
	}
	return true, nil
}
